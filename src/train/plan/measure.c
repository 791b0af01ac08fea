/* plan/measure.c — what the planner's model is calibrated with, measured here: each layer's
 * forward and backward (and its dW apart) at a replica's batch b, b/2, b/4, b/8 in the CPU time
 * each pass got, median of REPS after a warm-up; the optimizer's step; each codec's encoding and
 * decoding; TCP's CPU a byte; shared memory's bandwidth (`shoal plan`) or, in a job, allreduces
 * of two sizes within and across hosts fit to the model's allreduce formulas.
 * Not here: the model (plan/cost.c), the choice (plan/choose.c).
 * Proved by tests/train/test_plan.c and tests/cli/test_plan_cli.c. */
#include "train/plan/plan.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/cpus.h"
#include "base/env.h"
#include "base/err.h"
#include "base/util.h"
#include "nn/optim.h"

#define REPS 5                 /* timed passes per batch size (the median counts) */
#define SHM_ALPHA_S 5e-6       /* a shared-memory message's start (slots.c, eager.c: a few us) */
/* Shared-memory allreduce moves bytes at about a third of one thread's memcpy (docs/plan.md). */
#define SHM_OF_MEMCPY 0.35
#define NET_ALPHA_S 50e-6      /* a TCP message's start across hosts when not probed */
/* TCP's share of a link's rate: a 1514-byte Ethernet frame carries 1448 bytes (IP, TCP with
 * timestamps and Ethernet headers take the rest), and an allreduce's traffic both ways shares
 * each direction with the other's acknowledgements (66 bytes every two segments): what shoal's
 * ring and hierarchical allreduce reach across a shaped link (docs/plan.md). */
#define TCP_OF_LINK (1448.0 / 1514 * (1 - 66.0 / (2 * 1514)))
#define PROBE_SMALL 1024       /* floats: recursive doubling's range */
#define PROBE_LARGE (1 << 20)  /* floats: the bandwidth's */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* CPU seconds of this thread (thread 1) or of the process (0). */
static double cpu_now_s(int thread)
{
    struct timespec t;
    clock_gettime(thread ? CLOCK_THREAD_CPUTIME_ID : CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One pass at m images: each layer's forward, backward and deferrable weight-gradient
 * milliseconds into f, b, w at stride (the last timed apart after backward from the layer's
 * own factors, as a pipeline stage computes it once over the batch: sh_net_layer_weight_grads). */
static shoal_result time_pass(sh_net *net, const float *x, const int32_t *y, int m, int threads, double *f, double *b,
                              double *w, int stride)
{
    int one = threads <= 1; /* one kernel thread: the calling one runs the layers */
    uint64_t t0 = sh_now_ns();
    double c0 = cpu_now_s(1);
    SH_TRY(sh_net_forward(net, x, m, 1));
    if (sh_net_has_softmax(net)) (void)sh_net_loss(net, y);
    else sh_net_loss_sum(net);
    SH_TRY(sh_net_backward(net, NULL, NULL));
    /* with one kernel thread, the pass as the CPU ran it: a busy machine's scheduler stops a
     * long pass more often than a short one, and that time is not the layer's (several
     * threads: their idle time is the layer's, the wall time stays) */
    double wall = (double)(sh_now_ns() - t0) * 1e-9, ran = cpu_now_s(1) - c0;
    double share = one && wall > 0 && ran > 0 && ran < wall ? ran / wall : 1.0;
    for (int l = 0; l < sh_net_nlayers(net); l++) {
        sh_net_layer_times(net, l, &f[l * stride], &b[l * stride]);
        f[l * stride] *= share;
        b[l * stride] *= share;
        w[l * stride] = 0;
        const float *lx, *ldy;
        int in, out;
        if (!sh_net_layer_defers(net, l) || !sh_net_layer_factors(net, l, &lx, &ldy, &in, &out)) continue;
        t0 = sh_now_ns();
        sh_net_layer_weight_grads(net, l, lx, ldy, m, 0);
        w[l * stride] = (double)(sh_now_ns() - t0) * 1e-6 * share;
    }
    return SHOAL_OK;
}

/* Per-layer seconds at each of the nsizes batch sizes, median of REPS passes after a warm-up,
 * the sizes taken in turn within each round (a load that comes and goes falls on all of
 * them alike): t holds, for size k, forward, backward and dW of every layer at t + 3 L k. */
static shoal_result time_layers(sh_net *net, const float *x, const int32_t *y, const int *sizes, int nsizes,
                                int threads, double *t)
{
    int L = sh_net_nlayers(net);
    size_t n = (size_t)L * nsizes * REPS;
    double *f = NULL, *b = NULL, *w = NULL;
    SH_TRY(sh_calloc(n, sizeof *f, (void **)&f));
    shoal_result rc = sh_calloc(n, sizeof *b, (void **)&b);
    if (rc == SHOAL_OK) rc = sh_calloc(n, sizeof *w, (void **)&w);
    for (int k = 0; rc == SHOAL_OK && k < nsizes; k++) /* the warm-up */
        rc = time_pass(net, x, y, sizes[k], threads, f, b, w, REPS);
    for (int it = 0; rc == SHOAL_OK && it < REPS; it++)
        for (int k = 0; rc == SHOAL_OK && k < nsizes; k++) {
            size_t at = (size_t)k * L * REPS + it;
            rc = time_pass(net, x, y, sizes[k], threads, f + at, b + at, w + at, REPS);
        }
    for (int k = 0; rc == SHOAL_OK && k < nsizes; k++)
        for (int l = 0; l < L; l++) {
            size_t at = ((size_t)k * L + l) * REPS;
            double *tk = t + 3 * (size_t)L * k;
            qsort(f + at, REPS, sizeof *f, cmp_double);
            qsort(b + at, REPS, sizeof *b, cmp_double);
            qsort(w + at, REPS, sizeof *w, cmp_double);
            tk[l] = f[at + REPS / 2] * 1e-3;
            tk[L + l] = b[at + REPS / 2] * 1e-3;
            tk[2 * L + l] = w[at + REPS / 2] * 1e-3;
            if (tk[2 * L + l] > tk[L + l]) tk[2 * L + l] = tk[L + l]; /* noise: a part of backward, never more */
        }
    free(f);
    free(b);
    free(w);
    return rc;
}

/* a + b m through (m1, t1) and (m2, t2), m1 > m2; a lone point: all per image. Either part
 * negative is noise: a negative slope keeps the time at m1 as a fixed cost, a negative fixed
 * cost (the small batch timed slow) keeps it all per image. */
static void fit_line(double t1, double t2, int m1, int m2, int two, double *a, double *b)
{
    *b = two ? (t1 - t2) / (m1 - m2) : t1 / m1;
    if (*b < 0) *b = 0;
    *a = t1 - *b * m1;
    if (*a < 0) *a = 0, *b = t1 / m1;
}

/* CPU seconds of one call of stmt on this thread (a single-threaded step: what it costs, not
 * what a busy machine's scheduler adds), median of REPS after a warm-up. */
#define MEDIAN_S(out, stmt)                                                    \
    do {                                                                       \
        double t_[REPS];                                                       \
        stmt;                                                                  \
        for (int k_ = 0; k_ < REPS; k_++) {                                    \
            double t0_ = cpu_now_s(1);                                         \
            stmt;                                                              \
            t_[k_] = cpu_now_s(1) - t0_;                                       \
        }                                                                      \
        qsort(t_, REPS, sizeof t_[0], cmp_double);                             \
        (out) = t_[REPS / 2];                                                  \
    } while (0)

/* The optimizer's step over the net's parameters, and each codec's cost per value. */
static shoal_result time_update(sh_plan_model *m)
{
    int nranges = 0;
    const sh_param_range *ranges = sh_net_param_ranges(m->net, &nranges);
    sh_optim *opt = NULL;
    SH_TRY(sh_optim_create(&sh_net_get_config(m->net)->optim, m->nparams, ranges, nranges, &opt));
    float *p = sh_net_params(m->net), *g = sh_net_grads(m->net);
    MEDIAN_S(m->optim_s, sh_optim_step(opt, p, g, 0));
    sh_optim_destroy(opt);
    size_t count = m->nparams < (1u << 20) ? m->nparams : (1u << 20);
    if (count < 1024) count = 1024;
    float *src = NULL, *dst = NULL;
    void *payload = NULL;
    shoal_result rc = sh_calloc(count, sizeof *src, (void **)&src);
    if (rc == SHOAL_OK) rc = sh_calloc(count, sizeof *dst, (void **)&dst);
    sh_rng r;
    sh_rng_seed(&r, 3);
    for (size_t i = 0; src && i < count; i++) src[i] = sh_rng_float(&r) - 0.5f;
    const shoal_codec kinds[SH_PLAN_NCODECS] = {SHOAL_CODEC_FP16, SHOAL_CODEC_1BIT, SHOAL_CODEC_TOPK};
    for (int k = 0; rc == SHOAL_OK && k < SH_PLAN_NCODECS; k++) {
        shoal_codec_opts o;
        shoal_codec_opts_default(&o);
        o.codec = kinds[k];
        o.topk_fraction = 0.01;
        shoal_compressor *z = NULL;
        rc = shoal_compressor_create(&o, count, &z);
        size_t nb = z ? shoal_compressor_payload_nbytes(z) : 0;
        if (rc == SHOAL_OK) rc = sh_calloc(nb + 1, 1, &payload);
        double enc = 0, dec = 0;
        if (rc == SHOAL_OK) MEDIAN_S(enc, (void)shoal_compressor_encode(z, src, payload));
        if (rc == SHOAL_OK) MEDIAN_S(dec, (void)shoal_compressor_decode(z, payload, nb, dst));
        m->enc_s[k] = enc / (double)count;
        m->dec_s[k] = dec / (double)count;
        free(payload);
        payload = NULL;
        shoal_compressor_destroy(z);
    }
    free(src);
    free(dst);
    return rc;
}

shoal_result sh_plan_model_measure(const char *cfg_path, int batch, int threads, int ranks_per_host,
                                   sh_plan_model *out)
{
    memset(out, 0, sizeof *out);
    out->cfg_path = cfg_path;
    if (!batch) SH_TRY(sh_net_cfg_batch(cfg_path, &batch));
    out->batch = batch;
    out->threads = threads > 0 ? threads : sh_cpus_threads_per_rank(0, ranks_per_host, NULL);
    SH_TRY(sh_net_load(cfg_path, batch, 1, &out->net));
    sh_net_set_threads(out->net, out->threads);
    out->time_steps = sh_net_time_steps(out->net);
    batch = out->batch = sh_net_batch(out->net); /* rows: a recurrent net's streams x time steps */
    int L = out->nlayers = sh_net_nlayers(out->net);
    out->nparams = sh_net_nparams(out->net);
    size_t nx = (size_t)batch * (size_t)sh_net_input_count(out->net);
    float *x = NULL;
    int32_t *y = NULL;
    double *t = NULL;
    shoal_result rc = sh_calloc((size_t)L, sizeof *out->layer, (void **)&out->layer);
    if (rc == SHOAL_OK) rc = sh_alloc_aligned(nx * sizeof *x, (void **)&x);
    if (rc == SHOAL_OK) rc = sh_calloc((size_t)batch, sizeof *y, (void **)&y);
    if (rc == SHOAL_OK) rc = sh_calloc(3 * (size_t)L * SH_PLAN_NSIZES, sizeof *t, (void **)&t);
    sh_rng r;
    sh_rng_seed(&r, 1);
    for (size_t i = 0; x && i < nx; i++) x[i] = sh_rng_float(&r);
    int K = sh_net_nclasses(out->net);
    for (int i = 0; y && i < batch; i++) y[i] = K > 0 ? (int32_t)(sh_rng_u64(&r) % (uint64_t)K) : 0;
    int T = out->time_steps, streams = batch / T;
    for (int k = 0; k < SH_PLAN_NSIZES; k++) { /* b, b/2, b/4, b/8 in whole sequences */
        int m = T * (streams >> k > 0 ? streams >> k : 1);
        if (k && m == out->sizes[k - 1]) break;
        out->sizes[out->nsizes++] = m;
    }
    if (rc == SHOAL_OK) rc = time_layers(out->net, x, y, out->sizes, out->nsizes, out->threads, t);
    size_t in = (size_t)sh_net_input_count(out->net);
    int last = out->nsizes - 1;
    for (int l = 0; rc == SHOAL_OK && l < L; l++) {
        sh_plan_layer *p = &out->layer[l];
        double *part[3] = {p->fwd_t, p->bwd_t, p->wgt_t};
        for (int j = 0; j < 3; j++)
            for (int k = last; k >= 0; k--) { /* noise: a larger batch is never faster */
                part[j][k] = t[3 * (size_t)L * k + (size_t)j * L + l];
                if (k < last && part[j][k] < part[j][k + 1]) part[j][k] = part[j][k + 1];
            }
        fit_line(p->fwd_t[0], p->fwd_t[last], batch, out->sizes[last], last > 0, &p->fwd_a, &p->fwd_b);
        fit_line(p->bwd_t[0], p->bwd_t[last], batch, out->sizes[last], last > 0, &p->bwd_a, &p->bwd_b);
        fit_line(p->wgt_t[0], p->wgt_t[last], batch, out->sizes[last], last > 0, &p->wgt_a, &p->wgt_b);
        size_t off = 0;
        int c, h, w;
        sh_net_layer_params(out->net, l, &off, &p->nparams);
        sh_net_layer_shape(out->net, l, &c, &h, &w);
        p->outputs = (size_t)c * h * w;
        p->inputs = l ? out->layer[l - 1].outputs : in;
        p->connected = !strncmp(sh_net_layer_name(out->net, l), "connected", 9);
    }
    if (rc == SHOAL_OK) rc = time_update(out);
    sh_free_aligned(x);
    free(y);
    free(t);
    if (rc != SHOAL_OK) sh_plan_model_fini(out);
    return rc;
}

void sh_plan_model_fini(sh_plan_model *m)
{
    sh_net_destroy(m->net);
    free(m->layer);
    memset(m, 0, sizeof *m);
}

/* ---- links ---- */

/* "1gbit", "2.5gbit", "800mbit", "300MB/s", "1.2GB/s": bytes per second; 0 when unreadable. */
static double parse_rate(const char *s)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (!end || end == s || !(v > 0)) return 0;
    char unit[16];
    size_t n = 0;
    for (; *end && n + 1 < sizeof unit; end++) unit[n++] = (char)tolower((unsigned char)*end);
    unit[n] = 0;
    if (*end) return 0;
    if (!strcmp(unit, "gbit")) return v * 1e9 / 8;
    if (!strcmp(unit, "mbit")) return v * 1e6 / 8;
    if (!strcmp(unit, "gb/s")) return v * 1e9;
    if (!strcmp(unit, "mb/s")) return v * 1e6;
    return 0;
}

/* One thread's memcpy of 64 MiB, bytes per second. */
static double memcpy_rate(void)
{
    size_t n = 64u << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a);
        free(b);
        return 5e9;
    }
    memset(a, 1, n);
    memset(b, 2, n);
    double s = 0;
    MEDIAN_S(s, memcpy(b, a, n));
    free(a);
    free(b);
    return s > 0 ? (double)n / s : 5e9;
}

#define TCP_PROBE_NBYTES (16u << 20) /* bytes through the loopback connection */
#define TCP_PROBE_CHUNK (256u << 10)
#define TCP_PROBE_MSS 1448           /* a 1500-byte MTU's TCP payload, not loopback's 64 KiB */

static void *tcp_drain(void *arg)
{
    int fd = *(int *)arg;
    char *buf = malloc(TCP_PROBE_CHUNK);
    for (size_t got = 0; buf && got < TCP_PROBE_NBYTES;) {
        ssize_t k = recv(fd, buf, TCP_PROBE_CHUNK, 0);
        if (k <= 0) break;
        got += (size_t)k;
    }
    free(buf);
    return NULL;
}

/* CPU seconds of this process to send a byte and receive it over a loopback TCP connection
 * cut in Ethernet-sized segments:
 * the kernel's copies and protocol work a rank pays for its traffic across hosts, on its own
 * cores (an emulated cluster's links run through the same stack). 0 when it cannot be set up. */
static double tcp_cpu_per_byte(void)
{
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof at;
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), a = -1, b = -1, mss = TCP_PROBE_MSS;
    double s = 0;
    if (ls >= 0) (void)setsockopt(ls, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof mss); /* an Ethernet link's segments */
    if (ls >= 0 && bind(ls, (struct sockaddr *)&at, sizeof at) == 0 && listen(ls, 1) == 0 &&
        getsockname(ls, (struct sockaddr *)&at, &len) == 0 &&
        (a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 &&
        connect(a, (struct sockaddr *)&at, sizeof at) == 0 && (b = accept(ls, NULL, NULL)) >= 0) {
        char *buf = calloc(1, TCP_PROBE_CHUNK);
        pthread_t th;
        double t0 = cpu_now_s(0);
        if (buf && pthread_create(&th, NULL, tcp_drain, &b) == 0) {
            size_t sent = 0;
            while (sent < TCP_PROBE_NBYTES) {
                ssize_t k = send(a, buf, TCP_PROBE_CHUNK, MSG_NOSIGNAL);
                if (k <= 0) break;
                sent += (size_t)k;
            }
            shutdown(a, SHUT_WR);
            pthread_join(th, NULL);
            if (sent >= TCP_PROBE_NBYTES) s = (cpu_now_s(0) - t0) / (double)sent;
        }
        free(buf);
    }
    if (b >= 0) close(b);
    if (a >= 0) close(a);
    if (ls >= 0) close(ls);
    return s > 0 ? s : 0;
}

/* SHOAL_PLAN_* in MB/s or us over what was measured (0 or unset: the measurement). */
static void overrides(sh_plan_cluster *c)
{
    long v = 0;
    if (sh_env_long("SHOAL_PLAN_SHM_MBS", &v) == SHOAL_OK && v > 0) {
        c->shm_s_per_byte = 1.0 / ((double)v * 1e6);
        snprintf(c->shm, sizeof c->shm, "SHOAL_PLAN_SHM_MBS=%ld", v);
    }
    if (sh_env_long("SHOAL_PLAN_NET_MBS", &v) == SHOAL_OK && v > 0) {
        c->net_s_per_byte = 1.0 / ((double)v * 1e6);
        snprintf(c->link, sizeof c->link, "SHOAL_PLAN_NET_MBS=%ld", v);
    }
    if (sh_env_long("SHOAL_PLAN_NET_US", &v) == SHOAL_OK && v > 0) c->net_alpha_s = (double)v * 1e-6;
    if (sh_env_long("SHOAL_PLAN_CORES", &v) == SHOAL_OK && v > 0) c->cores = (int)v;
    if (sh_env_long("SHOAL_PLAN_MACHINE_HOSTS", &v) == SHOAL_OK && v > 1) c->machine_hosts = (int)v;
}

shoal_result sh_plan_cluster_for_link(int hosts, int ranks_per_host, const char *link, double latency_us,
                                      sh_plan_cluster *out)
{
    memset(out, 0, sizeof *out);
    out->hosts = hosts;
    out->ranks_per_host = ranks_per_host;
    out->cores = sh_cpus_available();
    double rate = parse_rate(link);
    if (!(rate > 0))
        return SH_FAIL(SHOAL_ERR_INVALID, "--link \"%s\": give 1gbit, 10gbit or a rate such as 2.5gbit, 800mbit, "
                       "300MB/s", link);
    out->net_s_per_byte = 1.0 / (TCP_OF_LINK * rate);
    out->net_alpha_s = latency_us >= 0 ? latency_us * 1e-6 : NET_ALPHA_S;
    out->net_cpu_s_per_byte = hosts > 1 ? tcp_cpu_per_byte() : 0;
    snprintf(out->link, sizeof out->link, "%s", link);
    out->shm_alpha_s = SHM_ALPHA_S;
    out->shm_s_per_byte = 1.0 / (SHM_OF_MEMCPY * memcpy_rate());
    snprintf(out->shm, sizeof out->shm, "0.35 x this machine's memcpy");
    overrides(out);
    return SHOAL_OK;
}

/* Median seconds of an allreduce of count floats on c. */
static shoal_result probe_allreduce(shoal_comm *c, float *buf, size_t count, double *s)
{
    double t[REPS];
    SH_TRY(shoal_allreduce(c, buf, buf, count, SHOAL_FLOAT32, SHOAL_SUM));
    for (int k = 0; k < REPS; k++) {
        SH_TRY(shoal_barrier(c));
        uint64_t t0 = sh_now_ns();
        SH_TRY(shoal_allreduce(c, buf, buf, count, SHOAL_FLOAT32, SHOAL_SUM));
        t[k] = (double)(sh_now_ns() - t0) * 1e-9;
    }
    qsort(t, REPS, sizeof t[0], cmp_double);
    *s = t[REPS / 2];
    return SHOAL_OK;
}

/* alpha and beta of a group of n ranks (one host: shared memory; leaders: across hosts) from
 * a small and a large allreduce, inverting the model's formulas for them. */
static shoal_result probe_group(shoal_comm *g, int across, float *buf, double *alpha, double *beta)
{
    int n = shoal_comm_world(g);
    double ts, tl, L = 4.0 * PROBE_LARGE, S = 4.0 * PROBE_SMALL;
    SH_TRY(probe_allreduce(g, buf, PROBE_SMALL, &ts));
    SH_TRY(probe_allreduce(g, buf, PROBE_LARGE, &tl));
    double share = across ? 2.0 * (n - 1) / n : 2.0 * (n - 1) / n;
    double steps = across ? 2.0 * (n - 1) : 2;
    double rounds = log2((double)n) > 1 ? ceil(log2((double)n)) : 1;
    *beta = tl / (share * L);
    *alpha = ts / rounds - S * *beta;
    if (*alpha < 1e-6) *alpha = 1e-6;
    double b = (tl - steps * *alpha) / (share * L);
    if (b > 0) *beta = b;
    return SHOAL_OK;
}

shoal_result sh_plan_cluster_probe(shoal_comm *comm, sh_plan_cluster *out)
{
    memset(out, 0, sizeof *out);
    int rank = shoal_comm_rank(comm), local = shoal_comm_local_rank(comm);
    out->hosts = shoal_comm_nhosts(comm);
    out->ranks_per_host = shoal_comm_local_world(comm);
    /* a launcher that pins its ranks leaves each its own CPUs: the host has them all */
    int cores = sh_cpus_available() * out->ranks_per_host;
    out->cores = cores < sh_cpus_online() ? cores : sh_cpus_online();
    out->shm_alpha_s = SHM_ALPHA_S;
    out->net_alpha_s = NET_ALPHA_S;
    float *buf = NULL;
    SH_TRY(sh_calloc(PROBE_LARGE, sizeof *buf, (void **)&buf));
    shoal_comm *host = NULL, *leaders = NULL;
    double v[4] = {out->shm_alpha_s, 0, out->net_alpha_s, 0};
    shoal_result rc = shoal_comm_split(comm, rank - local, rank, &host);
    if (rc == SHOAL_OK) rc = shoal_comm_split(comm, local == 0 ? 0 : 1, rank, &leaders);
    if (rc == SHOAL_OK && out->ranks_per_host > 1) rc = probe_group(host, 0, buf, &v[0], &v[1]);
    if (rc == SHOAL_OK && local == 0 && out->hosts > 1) rc = probe_group(leaders, 1, buf, &v[2], &v[3]);
    if (rc == SHOAL_OK) rc = shoal_broadcast(comm, v, v, 4, SHOAL_FLOAT64, 0);
    shoal_comm_destroy(leaders);
    shoal_comm_destroy(host);
    free(buf);
    SH_TRY(rc);
    out->shm_alpha_s = v[0];
    out->shm_s_per_byte = v[1] > 0 ? v[1] : 1.0 / (SHM_OF_MEMCPY * 5e9);
    out->net_alpha_s = v[2];
    out->net_cpu_s_per_byte = out->hosts > 1 ? tcp_cpu_per_byte() : 0;
    out->net_s_per_byte = v[3] > 0 ? v[3] : 1.0 / 125e6;
    snprintf(out->shm, sizeof out->shm, out->ranks_per_host > 1 ? "probed" : "not used");
    snprintf(out->link, sizeof out->link, out->hosts > 1 ? "probed" : "not used");
    (void)rank;
    overrides(out);
    return SHOAL_OK;
}
