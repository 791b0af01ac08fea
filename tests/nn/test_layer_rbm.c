/* test_layer_rbm.c — proves src/nn/layer_rbm.c and the pretraining net of net_unlabelled.c:
 * the conditionals, free energy and pseudo-likelihood equal scikit-learn's BernoulliRBM's on
 * the same weights; CD-1 and CD-2 gradients (visible units sampled or not, Bernoulli and
 * Gaussian, persistent chains) average, over 50000 copies of one image, to the expectation
 * worked out by hand by enumerating every state of a 3 x 2 RBM; persistent CD at a batch of
 * ten over 100 x 40 units, its draws made certain, equals scikit-learn's _fit computed in
 * double, pass after pass; the sparsity term is exactly
 * Hinton's; a pretraining net trains only its [rbm] (the layers below get zero gradients and
 * no decay, its rate and momentum are the [rbm]'s, its cfg hash is its own) and CD-1 raises
 * the pseudo-likelihood of a small data set; in a net an [rbm] is a sigmoid [connected]
 * layer (finite differences); bad keys and .weights are refused naming what to do. Without
 * scikit-learn the comparison says so in one line. */
#include "nn_check.h"
#include "ref_check.h"

#include "nn/optim.h"
#include "nn/rbm.h"

enum { I = 3, K = 2, NV = 1 << I, NH = 1 << K };

/* Weights large enough that sampling a unit and taking its mean give clearly other chains. */
static const float W0[K * I] = {2.5f, -3.0f, 1.5f, -2.0f, 2.8f, 3.2f};
static const float B0[K] = {0.5f, -1.0f}, C0[I] = {-1.0f, 1.5f, 0.3f};
static const float V0[I] = {1, 0, 1};

static double sig(double a) { return 1.0 / (1.0 + exp(-a)); }
static double bern(double p, int on) { return on ? p : 1.0 - p; }

/* p(h_j = 1 | v), p(v_i = 1 | h) (Bernoulli) for states given as bit masks or values */
static void hmean(const double *v, double *h)
{
    for (int j = 0; j < K; j++) {
        double a = B0[j];
        for (int i = 0; i < I; i++) a += W0[j * I + i] * v[i];
        h[j] = sig(a);
    }
}
static void vinput(const double *h, double *a)
{
    for (int i = 0; i < I; i++) {
        a[i] = C0[i];
        for (int j = 0; j < K; j++) a[i] += W0[j * I + i] * h[j];
    }
}
static void bits(int mask, int n, double *out)
{
    for (int i = 0; i < n; i++) out[i] = (mask >> i) & 1;
}

/* The expected CD-k gradient from v0 by enumeration: hidden states start from h0's
 * distribution (or the all-zero persistent state), each step maps a distribution over h to
 * one over v (sampled visible units) or, with means, keeps mixtures of mean vectors (one per
 * hidden state) — enough for k = 1. */
static void expected_cd(int k, int sample_visible, int persistent, int gaussian, double *gw, double *gb, double *gc)
{
    double ph[NH], h0m[K], v0[I];
    for (int i = 0; i < I; i++) v0[i] = V0[i];
    hmean(v0, h0m);
    for (int s = 0; s < NH; s++) {
        double h[K];
        bits(s, K, h);
        ph[s] = persistent ? (s == 0) : bern(h0m[0], (int)h[0]) * bern(h0m[1], (int)h[1]);
    }
    memset(gw, 0, sizeof(double) * K * I);
    memset(gb, 0, sizeof(double) * K);
    memset(gc, 0, sizeof(double) * I);
    for (int step = 1; step <= k; step++) {
        double pv[NV] = {0}, next[NH] = {0};
        for (int s = 0; s < NH; s++) {
            double h[K], a[I];
            bits(s, K, h);
            vinput(h, a);
            if (!sample_visible) { /* the mean visible vector itself (k = 1 only) */
                double v[I], hk[K];
                for (int i = 0; i < I; i++) v[i] = gaussian ? a[i] : sig(a[i]);
                hmean(v, hk);
                for (int j = 0; j < K; j++)
                    for (int i = 0; i < I; i++) gw[j * I + i] += ph[s] * hk[j] * v[i];
                for (int j = 0; j < K; j++) gb[j] += ph[s] * hk[j];
                for (int i = 0; i < I; i++) gc[i] += ph[s] * v[i];
                continue;
            }
            for (int m = 0; m < NV; m++) {
                double v[I], p = ph[s];
                bits(m, I, v);
                for (int i = 0; i < I; i++) p *= bern(sig(a[i]), (int)v[i]);
                pv[m] += p;
            }
        }
        if (!sample_visible) break;
        for (int m = 0; m < NV; m++) {
            double v[I], hk[K];
            bits(m, I, v);
            hmean(v, hk);
            if (step == k) {
                for (int j = 0; j < K; j++)
                    for (int i = 0; i < I; i++) gw[j * I + i] += pv[m] * hk[j] * v[i];
                for (int j = 0; j < K; j++) gb[j] += pv[m] * hk[j];
                for (int i = 0; i < I; i++) gc[i] += pv[m] * v[i];
                continue;
            }
            for (int s = 0; s < NH; s++) {
                double h[K];
                bits(s, K, h);
                next[s] += pv[m] * bern(hk[0], (int)h[0]) * bern(hk[1], (int)h[1]);
            }
        }
        memcpy(ph, next, sizeof ph);
    }
    for (int j = 0; j < K; j++)
        for (int i = 0; i < I; i++) gw[j * I + i] -= h0m[j] * v0[i];
    for (int j = 0; j < K; j++) gb[j] -= h0m[j];
    for (int i = 0; i < I; i++) gc[i] -= v0[i];
}

/* A pretraining net over N copies of v0 with the weights above; its gradient after one pass. */
static sh_net *cd_net(const char *keys, int n, uint64_t seed, sh_cfg **cfg_out)
{
    char text[512];
    snprintf(text, sizeof text, "[net]\nbatch=%d\ninputs=%d\n[rbm]\noutput=%d\n%s", n, I, K, keys);
    sh_cfg *cfg = NULL;
    sh_net *net = NULL;
    *cfg_out = NULL;
    CHECK_OK(sh_cfg_parse(text, "rbm.cfg", &cfg));
    if (!cfg) return NULL;
    CHECK_OK(sh_net_create_pretrain(cfg, n, seed, 0, &net));
    if (!net) {
        sh_cfg_destroy(cfg);
        return NULL;
    }
    *cfg_out = cfg;
    sh_layer *l = sh_net_layer(net, 0);
    float *p = sh_net_params(net);
    memcpy(p + l->w_off, W0, sizeof W0);
    memcpy(p + l->b_off, B0, sizeof B0);
    memcpy(p + sh_rbm_visible_off(l), C0, sizeof C0);
    return net;
}

static void one_cd(const char *what, const char *keys, int k, int sample_visible, int persistent, int gaussian)
{
    enum { N = 50000 };
    sh_cfg *cfg = NULL;
    char text[512];
    snprintf(text, sizeof text, "[net]\nbatch=%d\ninputs=%d\n[rbm]\noutput=%d\n%s", N, I, K, keys);
    CHECK_OK(sh_cfg_parse(text, "rbm.cfg", &cfg));
    sh_net *n = NULL;
    if (cfg) CHECK_OK(sh_net_create_pretrain(cfg, N, 11, 0, &n));
    if (!n) {
        sh_cfg_destroy(cfg);
        return;
    }
    sh_layer *l = sh_net_layer(n, 0);
    float *p = sh_net_params(n);
    memcpy(p + l->w_off, W0, sizeof W0);
    memcpy(p + l->b_off, B0, sizeof B0);
    memcpy(p + sh_rbm_visible_off(l), C0, sizeof C0);
    float *x = malloc(sizeof(float) * N * I);
    for (int r = 0; r < N; r++) memcpy(x + r * I, V0, sizeof V0);
    sh_net_set_threads(n, 2);
    CHECK_OK(sh_net_forward(n, x, N, 1));
    (void)sh_net_loss(n, NULL);
    CHECK_OK(sh_net_backward(n, NULL, NULL));
    double gw[K * I], gb[K], gc[I];
    expected_cd(k, sample_visible, persistent, gaussian, gw, gb, gc);
    const float *g = sh_net_grads(n);
    double worst = 0;
    for (int i = 0; i < K * I; i++) worst = fmax(worst, fabs(g[l->w_off + i] - gw[i]));
    for (int j = 0; j < K; j++) worst = fmax(worst, fabs(g[l->b_off + j] - gb[j]));
    for (int i = 0; i < I; i++) worst = fmax(worst, fabs(g[sh_rbm_visible_off(l) + i] - gc[i]));
    CHECK(worst < 0.02, "%s: gradient differs from the hand computation by %g (dW[0] %g, expected %g)", what, worst,
          g[l->w_off], gw[0]);
    /* the persistent chain moved on to binary samples */
    int binary = 1, moved = 0;
    for (size_t i = 0; persistent && i < (size_t)N * K; i++) {
        binary &= l->state[i] == 0.0f || l->state[i] == 1.0f;
        moved |= l->state[i] != 0.0f;
    }
    CHECK(!persistent || (binary && moved), "%s: the persistent chain holds %s", what, binary ? "zeros" : "non-binary values");
    free(x);
    sh_net_destroy(n);
    sh_cfg_destroy(cfg);
}

static void cd_k_matches_the_hand_computation(void)
{
    one_cd("CD-1, sampled visible", "sample_visible=1\n", 1, 1, 0, 0);
    one_cd("CD-2, sampled visible", "cd=2\nsample_visible=1\n", 2, 1, 0, 0);
    one_cd("CD-3, sampled visible", "cd=3\nsample_visible=1\n", 3, 1, 0, 0);
    one_cd("CD-1, mean visible", "", 1, 0, 0, 0);
    one_cd("CD-1, Gaussian mean visible", "visible=gaussian\n", 1, 0, 0, 1);
    one_cd("PCD-1 from the zero state", "persistent=1\nsample_visible=1\n", 1, 1, 1, 0);
}

static void sparsity_adds_hintons_term(void)
{
    sh_cfg *ca = NULL, *cb = NULL;
    sh_net *a = cd_net("", 64, 5, &ca), *b = cd_net("sparsity=0.05\nsparsity_cost=0.5\n", 64, 5, &cb);
    if (!a || !b) goto done;
    float x[64 * I];
    for (int r = 0; r < 64; r++)
        for (int i = 0; i < I; i++) x[r * I + i] = (float)((r + i) % 2);
    sh_net *nets[2] = {a, b};
    for (int t = 0; t < 2; t++) {
        CHECK_OK(sh_net_forward(nets[t], x, 64, 1));
        (void)sh_net_loss(nets[t], NULL);
        CHECK_OK(sh_net_backward(nets[t], NULL, NULL));
    }
    const sh_layer *l = sh_net_layer(a, 0);
    const float *out = l->out; /* h_0's means, the same in both */
    double worst = 0;
    for (int j = 0; j < K; j++) {
        double q = 0, mv[I] = {0};
        for (int r = 0; r < 64; r++) q += out[r * K + j] / 64.0;
        for (int r = 0; r < 64; r++)
            for (int i = 0; i < I; i++) mv[i] += x[r * I + i] / 64.0;
        double s = 0.5 * (q - 0.05);
        worst = fmax(worst, fabs(sh_net_grads(b)[l->b_off + j] - sh_net_grads(a)[l->b_off + j] - s));
        for (int i = 0; i < I; i++)
            worst = fmax(worst, fabs(sh_net_grads(b)[l->w_off + j * I + i] - sh_net_grads(a)[l->w_off + j * I + i] -
                                     s * mv[i]));
    }
    CHECK(worst < 1e-6, "the sparsity term differs from cost (q - p) by %g", worst);
done:
    sh_net_destroy(a);
    sh_net_destroy(b);
    sh_cfg_destroy(ca);
    sh_cfg_destroy(cb);
}

static void formulas_match_scikit_learn(void)
{
    if (!ref_have_python("sklearn")) {
        printf("test_layer_rbm: /usr/bin/python3 has no sklearn; comparison with scikit-learn skipped\n");
        return;
    }
    enum { R = 9, IN = 20, H = 7 };
    sh_net *n = ref_net("[net]\nbatch=9\ninputs=20\n[rbm]\noutput=7\n", R, 3);
    if (!n) return;
    const sh_layer *l = sh_net_layer(n, 0);
    float *p = sh_net_params(n);
    ref_random(p, sh_net_nparams(n), 8, -1, 1);
    float v[R * IN], h[R * H], flip[R];
    int iflip[R];
    ref_random(v, R * IN, 9, 0, 1);
    for (int i = 0; i < R * IN; i += 3) v[i] = v[i] > 0.5f; /* binary and grey values both */
    ref_random(h, R * H, 10, 0, 1);
    for (int r = 0; r < R; r++) iflip[r] = (r * 7 + 3) % IN, flip[r] = (float)iflip[r];
    int words[3] = {R, IN, H};
    ref_case rc;
    if (!ref_open(&rc, "rbm", words, 3)) return;
    ref_put(&rc, p + l->w_off, (size_t)H * IN);
    ref_put(&rc, p + l->b_off, H);
    ref_put(&rc, p + sh_rbm_visible_off(l), IN);
    ref_put(&rc, v, R * IN);
    ref_put(&rc, flip, R);
    ref_put(&rc, h, R * H);
    size_t got = 0;
    float *ref = ref_run(&rc, "rbm", &got);
    CHECK(got == R * H + R * IN + 2 * R, "reference gave %zu floats", got);
    if (ref && got == R * H + R * IN + 2 * R) {
        float hm[R * H], vm[R * IN], fe[R], pl[R];
        double fe_d[R], pl_d[R];
        sh_rbm_hidden_mean(l, p, v, R, hm);
        sh_rbm_visible_mean(l, p, h, R, vm);
        sh_rbm_free_energy(l, p, v, R, fe_d);
        sh_rbm_pseudo_likelihood(l, p, v, R, iflip, pl_d);
        for (int r = 0; r < R; r++) fe[r] = (float)fe_d[r], pl[r] = (float)pl_d[r];
        ref_compare("hidden means (_mean_hiddens)", hm, ref, R * H, 1e-6);
        ref_compare("visible means (_sample_visibles' p)", vm, ref + R * H, R * IN, 1e-6);
        ref_compare("free energy (_free_energy)", fe, ref + R * H + R * IN, R, 1e-5);
        ref_compare("pseudo-likelihood (score_samples)", pl, ref + R * H + R * IN + R, R, 1e-5);
    }
    free(ref);
    sh_net_destroy(n);
}

static void pretraining_net_trains_its_rbm_alone(void)
{
    const char *text = "[net]\nbatch=16\ninputs=12\nlearning_rate=0.003\nmomentum=0.95\ndecay=0.1\n"
                       "[connected]\noutput=10\nactivation=logistic\n"
                       "[rbm]\noutput=6\nlearning_rate=0.2\nmomentum=0.3\ndecay=0.001\n"
                       "[rbm]\noutput=4\n[connected]\noutput=3\nactivation=linear\n[softmax]\n";
    sh_cfg *cfg = NULL;
    CHECK_OK(sh_cfg_parse(text, "dbn.cfg", &cfg));
    sh_net *whole = NULL, *n = NULL, *n2 = NULL;
    if (cfg) CHECK_OK(sh_net_create(cfg, 16, 4, &whole));
    if (cfg) CHECK_OK(sh_net_create_pretrain(cfg, 16, 4, 1, &n));
    if (cfg) CHECK_OK(sh_net_create_pretrain(cfg, 16, 4, 2, &n2));
    if (!whole || !n || !n2) goto done;
    int rbms[8];
    CHECK(sh_net_rbm_layers(whole, rbms) == 2 && rbms[0] == 1 && rbms[1] == 2, "the [rbm] layers");
    CHECK(sh_net_pretraining(n) == 1 && sh_net_pretraining(whole) == -1, "pretraining layer");
    CHECK(!sh_net_has_labels(n) && sh_net_has_labels(whole), "a pretraining net has no labels");
    CHECK(sh_net_cfg_hash(n) != sh_net_cfg_hash(whole) && sh_net_cfg_hash(n) != sh_net_cfg_hash(n2),
          "each pretraining stage has its own hash");
    /* its parameters are the whole net's first layers', drawn from the same seed */
    CHECK(sh_net_nparams(n) < sh_net_nparams(whole) &&
          !memcmp(sh_net_params(n), sh_net_params(whole), sh_net_nparams(n) * sizeof(float)),
          "the pretraining net holds the whole net's first layers");
    const sh_net_config *c = sh_net_get_config(n);
    CHECK(c->lr.base_lr == 0.2f && c->optim.momentum == 0.3f && c->optim.decay == 0.001f &&
          c->optim.kind == SH_OPTIM_SGD && c->lr.kind == SH_LR_CONSTANT, "the [rbm]'s own update");
    int nr = 0;
    const sh_param_range *r = sh_net_param_ranges(n, &nr);
    const sh_layer *l = sh_net_layer(n, 1);
    CHECK(nr == 2 && r[0].offset == l->w_off && r[0].decay && !r[1].decay, "only the [rbm]'s weights decay");
    float x[16 * 12];
    ref_random(x, sizeof x / sizeof x[0], 3, 0, 1);
    CHECK_OK(sh_net_forward(n, x, 16, 1));
    float loss = sh_net_loss(n, NULL);
    memset(sh_net_grads(n), 0x7f, sh_net_nparams(n) * sizeof(float));
    CHECK_OK(sh_net_backward(n, NULL, NULL));
    int zero = 1;
    for (size_t i = 0; i < l->param_off; i++) zero &= sh_net_grads(n)[i] == 0.0f;
    CHECK(zero, "the layer below the [rbm] gets zero gradients");
    /* the loss is minus the pseudo-likelihood of the first layer's features (inference) */
    CHECK_OK(sh_net_forward(whole, x, 16, 0));
    const float *feat = sh_net_layer(whole, 0)->out;
    double pl[16], sum = 0;
    sh_rbm_pseudo_likelihood(l, sh_net_params(n), feat, 16, NULL, pl);
    for (int i = 0; i < 16; i++) sum -= pl[i] / 16;
    CHECK(fabs(loss - sum) < 1e-4 * (1 + fabs(sum)), "loss %g, minus the pseudo-likelihood %g", loss, sum);
    CHECK(sh_net_correct(n, NULL) == 0, "no correct answers without labels");
done:
    sh_net_destroy(whole);
    sh_net_destroy(n);
    sh_net_destroy(n2);
    sh_cfg_destroy(cfg);
}

/* Persistent CD at scikit-learn's shape of pass, a batch of 10 over 100 visible and 40 hidden
 * units (past whole vectors of 16), with weights of +-60 and biases of +-30 so that every unit's
 * input is at least 30 from 0: the draws are then certain and three passes, the chain carried
 * from one to the next, must give (h_k^T v_k - h_0^T v_0) / N, the biases' means and the next
 * chain exactly as a double computation of sklearn's _fit does. */
static void persistent_cd_of_a_batch_matches_double(void)
{
    enum { N = 10, VI = 100, HK = 40, PASSES = 3 };
    sh_cfg *cfg = NULL;
    sh_net *n = NULL;
    CHECK_OK(sh_cfg_parse("[net]\nbatch=10\ninputs=100\n[rbm]\noutput=40\npersistent=1\nsample_visible=1\n"
                          "momentum=0\ndecay=0\n", "p.cfg", &cfg));
    if (cfg) CHECK_OK(sh_net_create_pretrain(cfg, N, 3, 0, &n));
    if (!n) {
        sh_cfg_destroy(cfg);
        return;
    }
    sh_layer *l = sh_net_layer(n, 0);
    float *p = sh_net_params(n), *w = p + l->w_off, *b = p + l->b_off, *c = p + sh_rbm_visible_off(l);
    srand(17);
    for (int i = 0; i < HK * VI; i++) w[i] = rand() % 2 ? 60.0f : -60.0f;
    for (int j = 0; j < HK; j++) b[j] = rand() % 2 ? 30.0f : -30.0f;
    for (int i = 0; i < VI; i++) c[i] = rand() % 2 ? 30.0f : -30.0f;
    static float x[PASSES][N * VI];
    for (int t = 0; t < PASSES; t++)
        for (int i = 0; i < N * VI; i++) x[t][i] = (float)(rand() % 2);
    static double hs[N * HK], vk[N * VI], hk[N * HK], h0[N * HK]; /* the chain starts at zeros */
    memset(hs, 0, sizeof hs);
    for (int t = 0; t < PASSES; t++) {
        for (int r = 0; r < N; r++) {
            for (int i = 0; i < VI; i++) {
                double a = c[i];
                for (int j = 0; j < HK; j++) a += hs[r * HK + j] * w[j * VI + i];
                vk[r * VI + i] = a > 0; /* sampled: its mean is within e^-30 of 0 or 1 */
            }
            for (int j = 0; j < HK; j++) {
                double a0 = b[j], ak = b[j];
                for (int i = 0; i < VI; i++) {
                    a0 += (double)x[t][r * VI + i] * w[j * VI + i];
                    ak += vk[r * VI + i] * w[j * VI + i];
                }
                h0[r * HK + j] = 1.0 / (1.0 + exp(-a0));
                hk[r * HK + j] = 1.0 / (1.0 + exp(-ak));
            }
        }
        CHECK_OK(sh_net_forward(n, x[t], N, 1));
        (void)sh_net_loss(n, NULL);
        CHECK_OK(sh_net_backward(n, NULL, NULL));
        const float *g = sh_net_grads(n);
        double worst = 0;
        for (int j = 0; j < HK; j++)
            for (int i = 0; i < VI; i++) {
                double want = 0;
                for (int r = 0; r < N; r++)
                    want += hk[r * HK + j] * vk[r * VI + i] - h0[r * HK + j] * x[t][r * VI + i];
                worst = fmax(worst, fabs(g[l->w_off + (size_t)j * VI + i] - want / N));
            }
        for (int j = 0; j < HK; j++) {
            double want = 0;
            for (int r = 0; r < N; r++) want += hk[r * HK + j] - h0[r * HK + j];
            worst = fmax(worst, fabs(g[l->b_off + j] - want / N));
        }
        for (int i = 0; i < VI; i++) {
            double want = 0;
            for (int r = 0; r < N; r++) want += vk[r * VI + i] - x[t][r * VI + i];
            worst = fmax(worst, fabs(g[sh_rbm_visible_off(l) + i] - want / N));
        }
        CHECK(worst < 1e-5, "pass %d: the gradient differs from sklearn's _fit in double by %g", t, worst);
        int chain = 0;
        for (int i = 0; i < N * HK; i++) {
            hs[i] = hk[i] > 0.5;
            chain += l->state[i] != (float)hs[i];
        }
        CHECK(chain == 0, "pass %d: %d of the persistent chain's units differ from sklearn's h_samples_", t, chain);
    }
    sh_net_destroy(n);
    sh_cfg_destroy(cfg);
}

/* CD-1 for 300 steps on two patterns: the pseudo-likelihood rises well above the start's. */
static void cd_raises_the_pseudo_likelihood(void)
{
    sh_cfg *cfg = NULL;
    sh_net *n = NULL;
    CHECK_OK(sh_cfg_parse("[net]\nbatch=20\ninputs=16\n[rbm]\noutput=8\nmomentum=0.5\nlearning_rate=0.1\n", "r.cfg",
                          &cfg));
    if (cfg) CHECK_OK(sh_net_create_pretrain(cfg, 20, 1, 0, &n));
    sh_optim *o = NULL;
    int nr = 0;
    if (n) {
        const sh_param_range *r = sh_net_param_ranges(n, &nr);
        CHECK_OK(sh_optim_create(&sh_net_get_config(n)->optim, sh_net_nparams(n), r, nr, &o));
    }
    float x[20 * 16];
    for (int r = 0; r < 20; r++)
        for (int i = 0; i < 16; i++) x[r * 16 + i] = (float)(r % 2 ? i < 8 : i % 2);
    float first = 0, last = 0;
    for (int step = 0; o && step < 300; step++) {
        CHECK_OK(sh_net_forward(n, x, 20, 1));
        last = sh_net_loss(n, NULL);
        if (!step) first = last;
        CHECK_OK(sh_net_backward(n, NULL, NULL));
        sh_optim_step(o, sh_net_params(n), sh_net_grads(n), 0.1f);
    }
    CHECK(last < 0.3f * first, "minus the pseudo-likelihood %g -> %g", first, last);
    sh_optim_destroy(o);
    sh_net_destroy(n);
    sh_cfg_destroy(cfg);
}

static void in_a_net_it_is_a_sigmoid_connected_layer(void)
{
    tn_gradcheck_cfg("rbm", "[net]\nbatch=4\ninputs=6\n[rbm]\noutput=5\n[rbm]\noutput=4\nvisible=gaussian\n"
                     "[connected]\noutput=3\nactivation=linear\n[softmax]\n", 4, 14, 1e-2, 1e-4, 2e-2);
    sh_net *a = ref_net("[net]\nbatch=3\ninputs=6\n[rbm]\noutput=5\n[softmax]\n", 3, 9);
    sh_net *b = ref_net("[net]\nbatch=3\ninputs=6\n[connected]\noutput=5\n[softmax]\n", 3, 9);
    if (a && b) {
        const sh_layer *la = sh_net_layer(a, 0), *lb = sh_net_layer(b, 0);
        CHECK(la->param_count == lb->param_count + 6, "W, b and c: %zu", la->param_count);
        memcpy(sh_net_params(b), sh_net_params(a), lb->param_count * sizeof(float));
        float x[18];
        int32_t y[3] = {0, 1, 2};
        ref_random(x, 18, 4, 0, 1);
        CHECK_OK(sh_net_forward(a, x, 3, 1));
        CHECK_OK(sh_net_forward(b, x, 3, 1));
        CHECK(!memcmp(sh_net_output(a), sh_net_output(b), 15 * sizeof(float)), "forward equals [connected]'s");
        (void)sh_net_loss(a, y);
        memset(sh_net_grads(a), 0x7f, sh_net_nparams(a) * sizeof(float));
        CHECK_OK(sh_net_backward(a, NULL, NULL));
        int zero = 1;
        for (int i = 0; i < 6; i++) zero &= sh_net_grads(a)[sh_rbm_visible_off(la) + i] == 0.0f;
        CHECK(zero, "the visible biases take no gradient in a net");
    }
    sh_net_destroy(a);
    sh_net_destroy(b);
}

static void refuse(const char *keys, const char *want)
{
    char text[256];
    snprintf(text, sizeof text, "[net]\ninputs=4\n[rbm]\noutput=2\n%s", keys);
    sh_cfg *cfg = NULL;
    sh_net *n = NULL;
    CHECK_OK(sh_cfg_parse(text, "bad.cfg", &cfg));
    CHECK_RC(sh_net_create(cfg, 1, 1, &n), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), want) != NULL, "%s: error: %s", keys, shoal_last_error());
    sh_net_destroy(n);
    sh_cfg_destroy(cfg);
}

static void bad_keys_and_darknet_files_are_refused(void)
{
    refuse("activation=relu\n", "bad.cfg:5: [rbm] activation=relu: an [rbm]'s hidden units are logistic");
    refuse("batch_normalize=1\n", "bad.cfg:5: [rbm] an [rbm] has no batch normalization");
    refuse("visible=poisson\n", "bad.cfg:5: [rbm] visible=poisson: use binary");
    refuse("cd=0\n", "bad.cfg:5: [rbm] cd=0");
    sh_net *n = ref_net("[net]\ninputs=4\n[rbm]\noutput=2\n", 1, 1);
    if (n) {
        CHECK_RC(sh_darknet_weights_check(n), SHOAL_ERR_INVALID);
        CHECK(strstr(shoal_last_error(), "rbm") != NULL, "error: %s", shoal_last_error());
        sh_cfg *cfg = NULL;
        sh_net *p = NULL;
        CHECK_OK(sh_cfg_parse("[net]\ninputs=4\n[connected]\noutput=2\n", "c.cfg", &cfg));
        CHECK_RC(sh_net_create_pretrain(cfg, 1, 1, 0, &p), SHOAL_ERR_INVALID);
        CHECK(strstr(shoal_last_error(), "layer 0 is not an [rbm]") != NULL, "error: %s", shoal_last_error());
        sh_cfg_destroy(cfg);
    }
    sh_net_destroy(n);
}

int main(void)
{
    check_begin("test_layer_rbm", 120);
    ref_begin();
    RUN(formulas_match_scikit_learn);
    RUN(cd_k_matches_the_hand_computation);
    RUN(persistent_cd_of_a_batch_matches_double);
    RUN(sparsity_adds_hintons_term);
    RUN(pretraining_net_trains_its_rbm_alone);
    RUN(cd_raises_the_pseudo_likelihood);
    RUN(in_a_net_it_is_a_sigmoid_connected_layer);
    RUN(bad_keys_and_darknet_files_are_refused);
    ref_end();
    return check_end();
}
