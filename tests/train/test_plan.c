/* test_plan.c — proves src/train/plan/cost.c, choose.c and measure.c: the collectives' costs
 * equal the alpha-beta forms worked out by hand for each of select.c's choices (recursive
 * doubling, one host, the ring, two ranks' exchange, hierarchical) and the exchange's; a
 * data-parallel and a pipeline step of a model whose layer times are set by hand equal their
 * formulas; a pipeline's deferred weight gradients, the codecs' encoding and decoding and a
 * machine's cores shared by emulated hosts are priced as worked out by hand; oversubscribed
 * cores slow compute; tensor parallelism's and hybrid broadcast's shares stepped inside backward,
 * and hybrid's step by hand; the measured model fits its two batch sizes;
 * clear-cut cases choose the obvious layout (a tiny net on 1 gbit: data parallelism; huge
 * [connected] layers on a slow link: factors, hybrid or split layers, not gradients); the
 * table lists the runnable layouts fastest first and ends with the choice. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train/mp/hybrid.h"
#include "train/mp/pipeline.h"
#include "train/plan/plan.h"
#include "train/tiny_data.h"

static char dir[256];

static sh_plan_cluster cluster(int h, int r)
{
    sh_plan_cluster c;
    memset(&c, 0, sizeof c);
    c.hosts = h, c.ranks_per_host = r, c.cores = 64;
    c.shm_alpha_s = 2e-6, c.shm_s_per_byte = 1.0 / 4e9;
    c.net_alpha_s = 50e-6, c.net_s_per_byte = 1.0 / 125e6;
    snprintf(c.link, sizeof c.link, "test");
    snprintf(c.shm, sizeof c.shm, "test");
    return c;
}

#define REL(a, b) (fabs((double)(a) - (double)(b)) <= 1e-12 * fabs((double)(b)) + 1e-15)

static void allreduce_costs_follow_select_c(void)
{
    sh_plan_cluster c = cluster(1, 4);
    double as = c.shm_alpha_s, bs = c.shm_s_per_byte, an = c.net_alpha_s, bn = c.net_s_per_byte;
    double MB4 = 4.0 * 1024 * 1024;
    /* one host, 4 MiB: cma, 2 alpha + 2 (n-1)/n bytes */
    CHECK(REL(sh_plan_allreduce_s(&c, MB4, 1, 4), 2 * as + 1.5 * MB4 * bs), "one host: %g",
          sh_plan_allreduce_s(&c, MB4, 1, 4));
    /* 8 KiB over 2 x 2: one round within the host, one across */
    double k8 = 8192;
    CHECK(REL(sh_plan_allreduce_s(&c, k8, 2, 2), (as + k8 * bs) + (an + k8 * bn)), "small: %g",
          sh_plan_allreduce_s(&c, k8, 2, 2));
    /* 4 hosts x 1, 4 MiB: the ring, 2 (h-1) alpha + 2 (h-1)/h bytes */
    CHECK(REL(sh_plan_allreduce_s(&c, MB4, 4, 1), 6 * an + 1.5 * MB4 * bn), "ring: %g", sh_plan_allreduce_s(&c, MB4, 4, 1));
    /* 2 hosts x 1, 512 KiB: recursive doubling, one exchange */
    CHECK(REL(sh_plan_allreduce_s(&c, 524288, 2, 1), an + 524288 * bn), "pair: %g", sh_plan_allreduce_s(&c, 524288, 2, 1));
    /* 2 x 2, 4 MiB: hierarchical: within (reduce-scatter + allgather: 2 (alpha + half)), across a
     * host's share of 2 MiB above the pair range: the ring over 2 hosts, 2 alpha + bytes */
    double hier = 2 * (as + 0.5 * MB4 * bs) + (2 * an + MB4 * bn);
    CHECK(REL(sh_plan_allreduce_s(&c, MB4, 2, 2), hier), "hierarchical: %g want %g", sh_plan_allreduce_s(&c, MB4, 2, 2),
          hier);
    CHECK(sh_plan_allreduce_s(&c, MB4, 1, 1) == 0 && sh_plan_allreduce_s(&c, 0, 2, 2) == 0, "nothing to do costs 0");
    /* the exchange: 2 x 2, 1 MB a rank: the host link carries 2 ranks x 2/3 of it */
    double P = 1e6, ex = 2 * P * (2.0 / 3) * bn + 3 * an;
    CHECK(REL(sh_plan_exchange_s(&c, P, 2, 2, 3), ex), "exchange: %g want %g", sh_plan_exchange_s(&c, P, 2, 2, 3), ex);
    CHECK(REL(sh_plan_p2p_s(&c, P, 1), as + P * bs) && REL(sh_plan_p2p_s(&c, P, 0), an + P * bn), "p2p");
    c.cores = 2;
    CHECK(sh_plan_cpu_share(&c, 1) == 2.0 && sh_plan_cpu_share(&c, 2) == 4.0, "4 ranks on 2 cores: %g",
          sh_plan_cpu_share(&c, 1));
    c.cores = 8;
    CHECK(sh_plan_cpu_share(&c, 2) == 1.0, "enough cores: %g", sh_plan_cpu_share(&c, 2));
}

/* A model of tiny.cfg with every layer's times set by hand: forward f b, backward 2 f b. */
static void hand_model(sh_plan_model *m, double f)
{
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/hand.cfg", dir);
    memset(m, 0, sizeof *m);
    m->cfg_path = "hand.cfg";
    m->batch = 16;
    m->time_steps = 1;
    m->threads = 1;
    CHECK_OK(sh_net_load(cfg, 16, 1, &m->net));
    if (!m->net) return;
    m->nlayers = sh_net_nlayers(m->net);
    m->nparams = sh_net_nparams(m->net);
    m->layer = calloc((size_t)m->nlayers, sizeof *m->layer);
    for (int l = 0; l < m->nlayers; l++) {
        size_t off;
        int c, h, w;
        sh_plan_layer *y = &m->layer[l];
        y->fwd_b = f, y->bwd_b = 2 * f;
        sh_net_layer_params(m->net, l, &off, &y->nparams);
        sh_net_layer_shape(m->net, l, &c, &h, &w);
        y->outputs = (size_t)c * h * w;
        y->inputs = l ? m->layer[l - 1].outputs : (size_t)sh_net_input_count(m->net);
    }
    m->optim_s = 1e-3;
}

static void steps_equal_their_formulas(void)
{
    sh_plan_model m;
    double f = 1e-4;
    hand_model(&m, f);
    if (!m.net) return;
    sh_plan_cluster c = cluster(1, 2);
    /* data parallel, one host: parameters under 1 MiB are one bucket, sent when backward ends */
    sh_plan_layout L;
    memset(&L, 0, sizeof L);
    L.kind = SH_PLAN_DP, L.codec = -1, L.S = L.M = L.T = 1;
    sh_plan_predict(&m, &c, &L);
    double F = m.nlayers * f * 16, B = 2 * F;
    double want = F + B + m.optim_s / 2 + sh_plan_allreduce_s(&c, 4.0 * m.nparams, 1, 2);
    CHECK(L.ok && REL(L.step_s, want), "dp step %g want %g", L.step_s, want);
    CHECK(REL(L.images_per_s, 32 / want), "dp images/s %g", L.images_per_s);
    /* across 2 hosts the next forward hides the exchange's tail up to F */
    c = cluster(2, 1);
    sh_plan_predict(&m, &c, &L);
    double tail = sh_plan_allreduce_s(&c, 4.0 * m.nparams, 2, 1) - F;
    want = F + B + m.optim_s / 2 + (tail > 0 ? tail : 0);
    CHECK(L.ok && REL(L.step_s, want), "dp across hosts %g want %g", L.step_s, want);
    /* pipeline 2 x 2 micro-batches on one host: (M + S - 1) slots of the slower stage (its
     * layers at 8 images, and the activations there and back), then each stage's update */
    c = cluster(1, 2);
    memset(&L, 0, sizeof L);
    L.kind = SH_PLAN_PIPE, L.S = 2, L.M = 2, L.T = 1, L.codec = -1;
    sh_plan_predict(&m, &c, &L);
    int cuts[3];
    CHECK_OK(sh_pipe_plan(m.net, 2, cuts));
    double slot = 0, upd = 0, fill = 0;
    for (int s = 0; s < 2; s++) {
        double cs = (cuts[s + 1] - cuts[s]) * 3 * f * 8, p = 0;
        if (s == 0) cs += 2 * sh_plan_p2p_s(&c, 4.0 * 8 * m.layer[cuts[1] - 1].outputs, 1);
        for (int l = cuts[s]; l < cuts[s + 1]; l++) p += m.layer[l].nparams;
        slot = cs > slot ? cs : slot;
        fill += cs;
        upd = m.optim_s * p / m.nparams > upd ? m.optim_s * p / m.nparams : upd;
    }
    /* 1F1B: the first micro-batch down and the last back through both stages (their sum), the
     * slower stage's slot for the second */
    want = fill + slot + upd;
    CHECK(L.ok && REL(L.step_s, want), "pipeline step %g want %g (cuts %d %d %d)", L.step_s, want, cuts[0], cuts[1],
          cuts[2]);
    CHECK(REL(L.bubble_s, fill - slot), "bubble: the faster stage's slot, %g want %g", L.bubble_s, fill - slot);
    CHECK(REL(L.images_per_step, 16), "one replica: %g images a step", L.images_per_step);
    /* 3 ranks do not hold 2 stages; 5 micro-batches do not divide 16 */
    c = cluster(1, 3);
    sh_plan_predict(&m, &c, &L);
    CHECK(!L.ok && strstr(L.why, "no multiple of 2"), "3 ranks: %s", L.why);
    c = cluster(1, 2);
    L.M = 5;
    sh_plan_predict(&m, &c, &L);
    CHECK(!L.ok && strstr(L.why, "do not divide 16"), "5 micro-batches: %s", L.why);
    /* oversubscribed: 4 ranks on 2 cores compute at half speed */
    c = cluster(1, 4);
    c.cores = 2;
    CHECK(REL(sh_plan_layer_s(&m, &c, 0, 16), 2 * 3 * f * 16), "cpu share: %g", sh_plan_layer_s(&m, &c, 0, 16));
    sh_plan_model_fini(&m);
}

/* The terms the planner measures: a pipeline's deferred weight gradients (one product a layer
 * over the whole batch, the first stage's last share exposed), the codecs' encoding and every
 * rank's decoding, and the cores of a machine that emulated hosts share. */
static void deferred_weights_codecs_and_shared_cores(void)
{
    sh_plan_model m;
    double f = 1e-4;
    hand_model(&m, f);
    if (!m.net) return;
    for (int l = 0; l < m.nlayers; l++) /* dW is half of every weighted layer's backward */
        if (m.layer[l].nparams) m.layer[l].wgt_b = f;
    sh_plan_cluster c = cluster(1, 2);
    sh_plan_layout L;
    memset(&L, 0, sizeof L);
    L.kind = SH_PLAN_PIPE, L.S = 2, L.M = 4, L.T = 1, L.codec = -1;
    sh_plan_predict(&m, &c, &L);
    int cuts[3];
    CHECK_OK(sh_pipe_plan(m.net, 2, cuts));
    double u[2], w[2], upd = 0;
    for (int s = 0; s < 2; s++) {
        u[s] = w[s] = 0;
        double p = 0;
        for (int l = cuts[s]; l < cuts[s + 1]; l++) {
            int weighted = m.layer[l].nparams > 0;
            u[s] += (3 * f - (weighted ? f : 0)) * 4; /* a micro-batch of 4: forward, dX */
            w[s] += weighted ? f * 16 : 0;              /* dW once over 16 */
            p += m.layer[l].nparams;
        }
        if (s == 0) u[s] += 2 * sh_plan_p2p_s(&c, 4.0 * 4 * m.layer[cuts[1] - 1].outputs, 1);
        upd = m.optim_s * p / m.nparams > upd ? m.optim_s * p / m.nparams : upd;
    }
    double slot = u[0] > u[1] ? u[0] : u[1], pass = u[0] + u[1] + 3 * slot + w[0] / 4;
    for (int s = 0; s < 2; s++) pass = 4 * u[s] + w[s] > pass ? 4 * u[s] + w[s] : pass;
    CHECK(L.ok && REL(L.step_s, pass + upd), "deferred dW: step %g want %g", L.step_s, pass + upd);
    /* only the first stage's first layer defers, its whole backward: the pass outlasts every
     * stage's own work, and the last micro-batch's quarter of that dW comes after it */
    for (int l = 0; l < m.nlayers; l++) m.layer[l].wgt_b = l == 0 ? 2 * f : 0;
    sh_plan_predict(&m, &c, &L);
    double u0 = f * 4 + 2 * sh_plan_p2p_s(&c, 4.0 * 4 * m.layer[cuts[1] - 1].outputs, 1), w0 = 2 * f * 16, u1 = 0;
    for (int l = 1; l < cuts[1]; l++) u0 += 3 * f * 4;
    for (int l = cuts[1]; l < m.nlayers; l++) u1 += 3 * f * 4;
    slot = u0 > u1 ? u0 : u1;
    pass = u0 + u1 + 3 * slot + w0 / 4;
    CHECK(pass > 4 * u0 + w0 && pass > 4 * u1, "the case: the fill, not a stage's work");
    CHECK(L.ok && REL(L.step_s, pass + upd), "first stage's dW: step %g want %g", L.step_s, pass + upd);
    /* tensor parallelism alone defers nothing: the same model's dW stays in backward */
    memset(&L, 0, sizeof L);
    L.kind = SH_PLAN_PIPE, L.S = 1, L.M = 1, L.T = 2, L.codec = -1;
    sh_plan_layout T2 = L;
    sh_plan_predict(&m, &c, &T2);
    for (int l = 0; l < m.nlayers; l++) m.layer[l].wgt_b = 0;
    sh_plan_predict(&m, &c, &L);
    CHECK(T2.ok && REL(T2.step_s, L.step_s), "tensor 2: %g with dW timed, %g without", T2.step_s, L.step_s);

    /* codecs: each layer encoded once and every rank's payload decoded, on the backward's
     * cores; a free link leaves only that */
    c.shm_alpha_s = 0, c.shm_s_per_byte = 1e-18;
    memset(&L, 0, sizeof L);
    L.kind = SH_PLAN_DP, L.codec = SH_PLAN_1BIT, L.S = L.M = L.T = 1;
    sh_plan_layout Z = L;
    sh_plan_predict(&m, &c, &Z);
    m.enc_s[SH_PLAN_1BIT] = 2e-9, m.dec_s[SH_PLAN_1BIT] = 1e-9;
    sh_plan_predict(&m, &c, &L);
    double cpu = (double)m.nparams * (2e-9 + 2 * 1e-9);
    CHECK(L.ok && fabs(L.step_s - Z.step_s - cpu) < 1e-9, "1bit: %g more, want %g", L.step_s - Z.step_s, cpu);
    L.codec = Z.codec = SH_PLAN_FP16;
    sh_plan_predict(&m, &c, &Z);
    m.enc_s[SH_PLAN_FP16] = 2e-9, m.dec_s[SH_PLAN_FP16] = 1e-9;
    sh_plan_predict(&m, &c, &L);
    cpu = (double)m.nparams * (1.5 * 2e-9 + 2 * 1e-9); /* the whole and the sum's half encoded, two decodes */
    CHECK(L.ok && fabs(L.step_s - Z.step_s - cpu) < 1e-9, "fp16: %g more, want %g", L.step_s - Z.step_s, cpu);

    /* timed at sizes: between two of them their line, beyond them the fit a + b m */
    m.nsizes = 3, m.sizes[0] = 16, m.sizes[1] = 8, m.sizes[2] = 4;
    m.layer[0].fwd_t[0] = 10e-4, m.layer[0].fwd_t[1] = 4e-4, m.layer[0].fwd_t[2] = 3e-4;
    CHECK(REL(sh_plan_part_s(&m, 0, 0, 12), 7e-4) && REL(sh_plan_part_s(&m, 0, 0, 6), 3.5e-4) &&
          REL(sh_plan_part_s(&m, 0, 0, 32), f * 32) && REL(sh_plan_part_s(&m, 0, 0, 2), f * 2),
          "12 images: %g, 6: %g, 32: %g, 2: %g", sh_plan_part_s(&m, 0, 0, 12), sh_plan_part_s(&m, 0, 0, 6),
          sh_plan_part_s(&m, 0, 0, 32), sh_plan_part_s(&m, 0, 0, 2));
    m.nsizes = 0;

    /* the network stack's CPU: 2 hosts of one rank on one core each, plain data parallel (one
     * bucket: 4 x parameters bytes, a rank sends 2 (H-1)/H of them across): that many bytes'
     * CPU more; with cores to spare, none */
    c = cluster(2, 1);
    c.cores = 1;
    memset(&L, 0, sizeof L);
    L.kind = SH_PLAN_DP, L.codec = -1, L.S = L.M = L.T = 1;
    Z = L;
    sh_plan_predict(&m, &c, &Z);
    c.net_cpu_s_per_byte = 1e-9;
    sh_plan_predict(&m, &c, &L);
    cpu = 4.0 * (double)m.nparams * 1e-9;
    CHECK(L.ok && REL(L.compute_s - Z.compute_s, cpu), "network stack: %g more compute, want %g",
          L.compute_s - Z.compute_s, cpu);
    CHECK(REL(sh_plan_net_cpu_s(&c, 1, 1e6), 1e-3), "1 MB at 1 ns: %g s", sh_plan_net_cpu_s(&c, 1, 1e6));
    c.cores = 2;
    CHECK(sh_plan_net_cpu_s(&c, 1, 1e6) == 0, "a core to spare takes it");
    c = cluster(1, 2);
    c.cores = 1, c.net_cpu_s_per_byte = 1e-9;
    CHECK(sh_plan_net_cpu_s(&c, 1, 1e6) == 0, "one host sends nothing across");

    /* 4 emulated hosts of one rank on a machine of 2 cores: half a core a rank */
    c = cluster(4, 1);
    c.cores = 2;
    CHECK(sh_plan_cpu_share(&c, 1) == 1.0, "4 hosts of 2 cores each: %g", sh_plan_cpu_share(&c, 1));
    c.machine_hosts = 4;
    CHECK(sh_plan_cpu_share(&c, 1) == 2.0 && REL(sh_plan_layer_s(&m, &c, 0, 16), 2 * 3 * f * 16),
          "4 hosts sharing 2 cores: %g", sh_plan_cpu_share(&c, 1));
    sh_plan_model_fini(&m);
}

/* hand_model's times on another cfg of the test's directory. */
static void hand_model_of(sh_plan_model *m, const char *name, double f)
{
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/%s", dir, name);
    memset(m, 0, sizeof *m);
    m->cfg_path = name;
    m->batch = 16;
    m->time_steps = 1;
    m->threads = 1;
    CHECK_OK(sh_net_load(cfg, 16, 1, &m->net));
    if (!m->net) return;
    m->nlayers = sh_net_nlayers(m->net);
    m->nparams = sh_net_nparams(m->net);
    m->layer = calloc((size_t)m->nlayers, sizeof *m->layer);
    for (int l = 0; l < m->nlayers; l++) {
        size_t off;
        int c, h, w;
        sh_plan_layer *y = &m->layer[l];
        y->fwd_b = f, y->bwd_b = 2 * f;
        sh_net_layer_params(m->net, l, &off, &y->nparams);
        sh_net_layer_shape(m->net, l, &c, &h, &w);
        y->outputs = (size_t)c * h * w;
        y->inputs = l ? m->layer[l - 1].outputs : (size_t)sh_net_input_count(m->net);
        y->connected = !strncmp(sh_net_layer_name(m->net, l), "connected", 9);
    }
    m->optim_s = 1e-3;
}

/* Tensor parallelism with one replica steps its [connected] shares inside backward: the
 * optimizer's pass covers the rest; with replicas it covers its shares too. Hybrid broadcast:
 * the convolution on b/N images, the connected part on b at 1/N, the first split layer's input
 * gradient going back with the activities, the shares stepped inside backward. */
static void fused_updates_and_the_hybrid_step(void)
{
    sh_plan_model m;
    double f = 1e-4;
    hand_model(&m, f);
    if (!m.net) return;
    for (int l = 0; l < m.nlayers; l++) m.layer[l].connected = l < 3;
    sh_plan_cluster c = cluster(1, 2);
    sh_plan_layout L, Z;
    memset(&L, 0, sizeof L);
    L.kind = SH_PLAN_PIPE, L.S = 1, L.M = 1, L.T = 2, L.codec = -1;
    Z = L;
    double opt = m.optim_s, p0 = m.layer[0].nparams, p1 = m.layer[1].nparams, p2 = m.layer[2].nparams;
    sh_plan_predict(&m, &c, &L);
    m.optim_s = 0;
    sh_plan_predict(&m, &c, &Z);
    CHECK(L.ok && REL(L.step_s - Z.step_s, opt * p2 / m.nparams), "tensor 2, one replica: the update %g, want %g",
          L.step_s - Z.step_s, opt * p2 / m.nparams);
    c = cluster(1, 4); /* 2 replicas: the update of the shares is a pass of its own */
    sh_plan_predict(&m, &c, &Z);
    m.optim_s = opt;
    sh_plan_predict(&m, &c, &L);
    double want = opt * (p0 / 2 + p1 / 2 + p2) / m.nparams;
    CHECK(L.ok && REL(L.step_s - Z.step_s, want), "tensor 2 x 2 replicas: the update %g, want %g",
          L.step_s - Z.step_s, want);
    sh_plan_model_fini(&m);

    hand_model_of(&m, "hyb.cfg", f);
    if (!m.net) return;
    c = cluster(1, 2);
    memset(&L, 0, sizeof L);
    L.kind = SH_PLAN_HYBRID, L.scheme = SH_HYBRID_BROADCAST, L.S = L.M = L.T = 1, L.codec = -1;
    sh_plan_predict(&m, &c, &L);
    int cut = 0;
    unsigned char roles[16] = {0};
    CHECK_OK(sh_net_hybrid_plan(m.net, 2, &cut, roles));
    double conv = 0, fc = 0, sums = 0, cparams = 0, stepped = 0, B = 16;
    for (int l = 0; l < cut; l++) conv += 3 * f * 8, cparams += m.layer[l].nparams;
    stepped = cparams;
    for (int l = cut; l < m.nlayers; l++) {
        fc += 3 * f * B * (roles[l] ? 0.5 : 1);
        if (!roles[l]) {
            stepped += m.layer[l].nparams;
            continue;
        }
        sums += sh_plan_allreduce_s(&c, 4 * B * m.layer[l].outputs, 1, 2);
        if (l > cut) sums += sh_plan_allreduce_s(&c, 4 * B * m.layer[l].inputs, 1, 2);
    }
    double acts = 2 * sh_plan_exchange_s(&c, 4 * 0.5 * B * m.layer[cut - 1].outputs, 1, 2, 1);
    want = conv + fc + m.optim_s * stepped / m.nparams + acts + sums + sh_plan_allreduce_s(&c, 4 * cparams, 1, 2);
    CHECK(cut == 1 && roles[1] && roles[2], "hyb.cfg: cut %d", cut);
    CHECK(L.ok && REL(L.step_s, want), "hybrid broadcast: step %g want %g", L.step_s, want);
    CHECK(REL(L.images_per_step, 16), "hybrid: the batch a step, %g", L.images_per_step);
    sh_plan_model_fini(&m);
}

static sh_plan_layout best_of(const char *cfg_name, int h, int r, double net_mb_s, int cores, sh_plan_list *list)
{
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/%s", dir, cfg_name);
    sh_plan_model m;
    sh_plan_layout none;
    memset(&none, 0, sizeof none);
    CHECK_OK(sh_plan_model_measure(cfg, 0, 1, r, &m));
    if (!m.net) return none;
    sh_plan_cluster c = cluster(h, r);
    c.net_s_per_byte = 1.0 / (net_mb_s * 1e6);
    c.cores = cores;
    sh_plan_enumerate(&m, &c, list);
    /* the list is sorted: runnable ones first, fastest first */
    for (int i = 1; i < list->n; i++) {
        const sh_plan_layout *a = &list->l[i - 1], *b = &list->l[i];
        CHECK(a->ok >= b->ok && (!b->ok || a->images_per_s >= b->images_per_s), "%s: %s before %s", cfg_name, a->name,
              b->name);
    }
    sh_plan_model_fini(&m);
    return list->best >= 0 ? list->l[list->best] : none;
}

static void clear_cut_cases_choose_the_obvious_layout(void)
{
    sh_plan_list *list = calloc(1, sizeof *list);
    /* a tiny net (1 700 parameters) on 1 gbit, 2 hosts: data parallelism */
    sh_plan_layout b = best_of("tiny.cfg", 2, 1, 125, 64, list);
    CHECK(b.ok && b.kind == SH_PLAN_DP, "tiny net, 1 gbit: chose %s", b.name);
    /* 2 x 2048 x 2048 [connected] at batch 8, 2 hosts on 100 mbit: a layout that moves activities or
     * factors, not gradients (sufficient factors, hybrid, or the layers split: tensor parallel),
     * far ahead of the plain exchange of 34 MB a step */
    b = best_of("huge.cfg", 2, 1, 12.5, 64, list);
    CHECK(b.ok && (b.sfb || b.kind == SH_PLAN_HYBRID || (b.kind == SH_PLAN_PIPE && b.T > 1 && b.S == 1)),
          "huge [connected], 100 mbit: chose %s", b.name);
    double plain = 0;
    for (int i = 0; i < list->n; i++)
        if (list->l[i].kind == SH_PLAN_DP && list->l[i].codec < 0 && !list->l[i].sfb) plain = list->l[i].images_per_s;
    CHECK(plain > 0 && b.images_per_s > 5 * plain, "the choice %g images/s, plain data parallel %g", b.images_per_s,
          plain);
    free(list);
}

static void measured_model_fits_two_batch_sizes(void)
{
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/huge.cfg", dir);
    sh_plan_model m;
    CHECK_OK(sh_plan_model_measure(cfg, 0, 1, 1, &m));
    if (!m.net) return;
    CHECK(m.batch == 8 && m.nlayers == 4 && m.threads == 1, "batch %d, %d layers", m.batch, m.nlayers);
    CHECK(m.layer[1].nparams == 2048u * 2048 + 2048 && m.layer[1].connected && m.layer[1].inputs == 2048 &&
          m.layer[1].outputs == 2048, "layer 1: %zu parameters", m.layer[1].nparams);
    double big = m.layer[1].fwd_a + m.layer[1].fwd_b * 8, per = m.layer[1].fwd_b;
    /* reading 16 MB of weights may cost as much at 1 image as at 8: a fixed part, no negative slope */
    CHECK(big > 0 && per >= 0 && m.optim_s > 0, "2048 x 2048 forward at 8 images %g s, %g s an image", big, per);
    /* timed at 8, 4, 2 and 1 images, a larger batch never faster */
    CHECK(m.nsizes == 4 && m.sizes[0] == 8 && m.sizes[3] == 1, "%d sizes, %d..%d", m.nsizes, m.sizes[0],
          m.sizes[m.nsizes - 1]);
    for (int k = 0; k + 1 < m.nsizes; k++)
        CHECK(m.layer[1].fwd_t[k] >= m.layer[1].fwd_t[k + 1] && m.layer[1].bwd_t[k] >= m.layer[1].bwd_t[k + 1],
              "size %d", m.sizes[k]);
    CHECK(REL(sh_plan_part_s(&m, 1, 0, 8), m.layer[1].fwd_t[0]) && REL(sh_plan_part_s(&m, 1, 1, 3),
          (m.layer[1].bwd_t[2] + m.layer[1].bwd_t[1]) / 2), "the timed points");
    /* dW of a [connected] is timed apart, a part of its backward; the softmax has none */
    double wgt = m.layer[1].wgt_a + m.layer[1].wgt_b * 8, bwd = m.layer[1].bwd_a + m.layer[1].bwd_b * 8;
    CHECK(wgt > 0 && wgt <= bwd * (1 + 1e-9) && m.layer[3].wgt_a == 0 && m.layer[3].wgt_b == 0,
          "dW %g s of backward %g s", wgt, bwd);
    for (int k = 0; k < SH_PLAN_NCODECS; k++) CHECK(m.enc_s[k] > 0 && m.dec_s[k] > 0, "codec %d timed", k);
    sh_plan_model_fini(&m);
}

static void the_table_lists_layouts_and_the_choice(void)
{
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/tiny.cfg", dir);
    sh_plan_model m;
    CHECK_OK(sh_plan_model_measure(cfg, 0, 1, 2, &m));
    if (!m.net) return;
    sh_plan_cluster c;
    CHECK_OK(sh_plan_cluster_for_link(2, 2, "1gbit", -1, &c));
    CHECK(REL(c.net_alpha_s, 50e-6) && c.net_s_per_byte > 1.0 / 125e6 && c.shm_s_per_byte > 0, "1gbit: %g s/B",
          c.net_s_per_byte);
    /* a byte through TCP costs CPU: measured, between a picosecond and a microsecond */
    CHECK(c.net_cpu_s_per_byte > 1e-12 && c.net_cpu_s_per_byte < 1e-6, "TCP: %g s of CPU a byte",
          c.net_cpu_s_per_byte);
    CHECK_RC(sh_plan_cluster_for_link(2, 2, "fast", -1, &c), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(), "\"fast\""), "%s", shoal_last_error_message());
    CHECK_OK(sh_plan_cluster_for_link(2, 2, "300MB/s", 10, &c));
    CHECK(REL(c.net_alpha_s, 10e-6), "latency %g", c.net_alpha_s);
    sh_plan_list *list = calloc(1, sizeof *list);
    sh_plan_enumerate(&m, &c, list);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    sh_plan_print(&m, &c, list, f);
    fclose(f);
    CHECK(text && strstr(text, "2 hosts x 2 ranks (4 ranks)") && strstr(text, "images/s") &&
          strstr(text, "choice: ") && strstr(text, "-n 4"), "%s", text ? text : "");
    int rows = 0;
    for (int i = 0; i < list->n; i++) rows += list->l[i].ok && strstr(text, list->l[i].name) != NULL;
    int ok = 0;
    for (int i = 0; i < list->n; i++) ok += list->l[i].ok;
    CHECK(rows == ok && ok >= 5, "%d of %d runnable layouts in the table", rows, ok);
    free(text);
    f = open_memstream(&text, &len);
    sh_plan_print_json(&m, &c, list, f);
    fclose(f);
    CHECK(text && text[0] == '{' && strstr(text, "\"layouts\":[") && strstr(text, "\"choice\":{"), "%s", text);
    free(text);
    free(list);
    sh_plan_model_fini(&m);
}

int main(void)
{
    check_begin("test_plan", 120);
    if (tiny_make_dir(dir, sizeof dir) != 0 ||
        tiny_write_file(dir, "hand.cfg", "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n[connected]\noutput=32\n"
                                         "activation=relu\n[connected]\noutput=32\nactivation=relu\n[connected]\n"
                                         "output=4\nactivation=linear\n[softmax]\n") ||
        tiny_write_file(dir, "hyb.cfg", "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n[convolutional]\nfilters=4\n"
                                        "size=3\nstride=1\npad=1\nactivation=relu\n[connected]\noutput=32\n"
                                        "activation=relu\n[connected]\noutput=4\nactivation=linear\n[softmax]\n") ||
        tiny_write_file(dir, "tiny.cfg", "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\n[connected]\noutput=24\n"
                                         "activation=relu\n[connected]\noutput=4\nactivation=linear\n[softmax]\n") ||
        tiny_write_file(dir, "huge.cfg", "[net]\nbatch=8\nwidth=32\nheight=64\nchannels=1\n[connected]\noutput=2048\n"
                                         "activation=relu\n[connected]\noutput=2048\nactivation=relu\n[connected]\n"
                                         "output=10\nactivation=linear\n[softmax]\n")) {
        CHECK(0, "cannot write the test's files");
        return check_end();
    }
    RUN(allreduce_costs_follow_select_c);
    RUN(steps_equal_their_formulas);
    RUN(deferred_weights_codecs_and_shared_cores);
    RUN(fused_updates_and_the_hybrid_step);
    RUN(measured_model_fits_two_batch_sizes);
    RUN(clear_cut_cases_choose_the_obvious_layout);
    RUN(the_table_lists_layouts_and_the_choice);
    tiny_remove_dir(dir);
    return check_end();
}
