/* test_api.c — proves the public training API: shoal/net.h (src/nn/net_api.c) gives the
 * internal net's forward, loss, gradients, layers and Darknet draws bit for bit, names a bad
 * cfg with an error code and message, and refuses NULL and out-of-range arguments;
 * shoal/train.h (src/train/train_api.c, eval_api.c) trains alone, on text, and in every
 * layout on real ranks under shoal launch (this binary re-run as each rank, options by
 * name), its report's JSON read back; a stop request, the step hook, shoal_test_run and
 * shoal_net_load_weights; and examples/train_lenet.c, compiled against libshoal.a with only
 * -Iinclude, trains and prints its result. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "io/json.h"
#include "nn/darknet_weights.h"
#include "nn/net.h"
#include "shoal/net.h"
#include "shoal/train.h"
#include "train/tiny_data.h"
#include "lib/run.h"

static char dir[256], mlp[512], out[1 << 16];

static void forward_and_backward_match_the_internal_net(void)
{
    shoal_net_opts no;
    shoal_net_opts_default(&no);
    no.batch = 4;
    no.seed = 3;
    no.threads = 1;
    shoal_net *pub = NULL;
    sh_net *ref = NULL;
    CHECK_OK(shoal_net_load(mlp, &no, &pub));
    CHECK_OK(sh_net_load(mlp, 4, 3, &ref));
    if (!pub || !ref) goto done;
    sh_net_set_threads(ref, 1);
    int n = 0, c = 0, h = 0, w = 0, k = 0;
    CHECK_OK(shoal_net_input_shape(pub, &n, &c, &h, &w));
    CHECK(n == 4 && c == 1 && h == TINY_SIDE && w == TINY_SIDE, "input %dx%dx%dx%d", n, c, h, w);
    CHECK_OK(shoal_net_output_shape(pub, NULL, &k));
    CHECK(k == TINY_CLASSES, "classes %d", k);
    size_t np = 0, ng = 0;
    float *params = shoal_net_params(pub, &np);
    CHECK(params && np == sh_net_nparams(ref) && np > 0, "%zu parameters, internal %zu", np, sh_net_nparams(ref));
    CHECK(params && memcmp(params, sh_net_params(ref), np * sizeof(float)) == 0, "initial weights differ");
    float x[4 * TINY_SIDE * TINY_SIDE];
    int32_t y[4] = {0, 3, 1, 2};
    sh_rng rng;
    sh_rng_seed(&rng, 9);
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = sh_rng_float(&rng);
    const float *probs = NULL;
    CHECK_OK(shoal_net_forward(pub, x, 3, 1, &probs));
    CHECK_OK(sh_net_forward(ref, x, 3, 1));
    CHECK(probs && memcmp(probs, sh_net_output(ref), 3 * (size_t)k * sizeof(float)) == 0, "outputs differ");
    float loss = -1;
    CHECK_OK(shoal_net_backward(pub, y, &loss));
    float ref_loss = sh_net_loss(ref, y);
    CHECK_OK(sh_net_backward(ref, NULL, NULL));
    CHECK(loss == ref_loss && loss > 0, "loss %g, internal %g", (double)loss, (double)ref_loss);
    float *grads = shoal_net_grads(pub, &ng);
    CHECK(grads && ng == np && memcmp(grads, sh_net_grads(ref), ng * sizeof(float)) == 0, "gradients differ");
    /* a step through the public blocks changes the next forward */
    for (size_t i = 0; grads && params && i < np; i++) params[i] -= 0.5f * grads[i];
    CHECK_OK(shoal_net_forward(pub, x, 3, 1, NULL));
    float after = 0;
    CHECK_OK(shoal_net_backward(pub, y, &after));
    CHECK(after < loss, "a gradient step did not lower the loss: %g -> %g", (double)loss, (double)after);
done:
    shoal_net_destroy(pub);
    sh_net_destroy(ref);
}

static void bad_cfg_is_an_error_with_a_message(void)
{
    shoal_net *n = (shoal_net *)&n; /* must come back NULL */
    char path[600];
    snprintf(path, sizeof path, "%s/no-such.cfg", dir);
    CHECK_RC(shoal_net_load(path, NULL, &n), SHOAL_ERR_IO);
    CHECK(n == NULL, "out not NULL after an error");
    CHECK(strstr(shoal_last_error_message(), "no-such.cfg") != NULL, "message: %s", shoal_last_error_message());
    snprintf(path, sizeof path, "%s/bad.cfg", dir);
    tiny_write_file(dir, "bad.cfg", "[net]\nwidth=8\nheight=8\nchannels=1\n[connected]\noutput=4\nfliters=3\n");
    CHECK_RC(shoal_net_load(path, NULL, &n), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error_message(), "bad.cfg:7") != NULL, "message: %s", shoal_last_error_message());
}

static void null_and_out_of_range_arguments_are_refused(void)
{
    shoal_net *n = NULL;
    CHECK_RC(shoal_net_load(NULL, NULL, &n), SHOAL_ERR_INVALID);
    CHECK_RC(shoal_net_load(mlp, NULL, NULL), SHOAL_ERR_INVALID);
    CHECK_RC(shoal_net_input_shape(NULL, NULL, NULL, NULL, NULL), SHOAL_ERR_INVALID);
    float one[TINY_SIDE * TINY_SIDE] = {0};
    CHECK_RC(shoal_net_forward(NULL, one, 1, 1, NULL), SHOAL_ERR_INVALID);
    size_t count = 7;
    CHECK(shoal_net_params(NULL, &count) == NULL && count == 0, "params of NULL");
    CHECK(shoal_net_grads(NULL, &count) == NULL && count == 0, "grads of NULL");
    shoal_net_destroy(NULL);
    shoal_net_opts no;
    shoal_net_opts_default(&no);
    no.batch = 2;
    no.threads = 1;
    CHECK_OK(shoal_net_load(mlp, &no, &n));
    if (!n) return;
    float x[2 * TINY_SIDE * TINY_SIDE] = {0};
    int32_t y[2] = {0, TINY_CLASSES}; /* the second is not a class */
    CHECK_RC(shoal_net_forward(n, NULL, 1, 1, NULL), SHOAL_ERR_INVALID);
    CHECK_RC(shoal_net_forward(n, x, 0, 1, NULL), SHOAL_ERR_INVALID);
    CHECK_RC(shoal_net_forward(n, x, 3, 1, NULL), SHOAL_ERR_INVALID);
    CHECK_RC(shoal_net_backward(n, y, NULL), SHOAL_ERR_INVALID); /* no forward yet */
    CHECK_OK(shoal_net_forward(n, x, 2, 0, NULL));
    CHECK_RC(shoal_net_backward(n, y, NULL), SHOAL_ERR_INVALID); /* inference forward */
    CHECK_OK(shoal_net_forward(n, x, 2, 1, NULL));
    CHECK_RC(shoal_net_backward(n, y, NULL), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(), "label 4 of image 1") != NULL, "%s", shoal_last_error_message());
    y[1] = 1;
    CHECK_OK(shoal_net_backward(n, y, NULL));
    shoal_net_destroy(n);
}

static void train_run_alone_trains_and_refuses_bad_options(void)
{
    shoal_train_opts o;
    shoal_train_opts_default(&o);
    shoal_train_report r;
    CHECK_RC(shoal_train_run(NULL, &r), SHOAL_ERR_INVALID);
    CHECK_RC(shoal_train_run(&o, &r), SHOAL_ERR_INVALID); /* no cfg_path */
    o.cfg_path = mlp;
    o.data_dir = dir;
    o.max_steps = 12;
    o.threads = 1;
    o.quiet = 1;
    o.consistency = "eventual";
    CHECK_RC(shoal_train_run(&o, &r), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(), "eventual") != NULL, "%s", shoal_last_error_message());
    o.consistency = NULL;
    o.layout = SHOAL_TRAIN_PARAM_SERVER; /* servers need ranks */
    CHECK_RC(shoal_train_run(&o, &r), SHOAL_ERR_INVALID);
    o.layout = SHOAL_TRAIN_DATA_PARALLEL;
    CHECK_OK(shoal_train_run(&o, &r));
    CHECK(r.steps == 12 && r.is_result && r.world == 1 && r.threads == 1, "steps %lld result %d world %d threads %d",
          (long long)r.steps, r.is_result, r.world, r.threads);
    CHECK(r.role && !strcmp(r.role, "alone"), "role %s", r.role ? r.role : "(null)");
    CHECK(r.test_accuracy >= 0 && r.test_accuracy <= 1 && r.test_loss > 0, "accuracy %g loss %g", r.test_accuracy,
          r.test_loss);
    CHECK_OK(shoal_train_run(&o, NULL));
}

/* The repository root: where include/shoal/train.h is, from the current directory or up
 * from this binary (build/tests/train/test_api). */
static int find_root(char *root, size_t nbytes)
{
    if (access("include/shoal/train.h", R_OK) == 0 && getcwd(root, nbytes)) return 0;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return -1;
    exe[len] = 0;
    for (int up = 0; up < 6; up++) {
        char *slash = strrchr(exe, '/');
        if (!slash) return -1;
        *slash = 0;
        char probe[PATH_MAX + 32];
        snprintf(probe, sizeof probe, "%s/include/shoal/train.h", exe);
        if (access(probe, R_OK) == 0) {
            snprintf(root, nbytes, "%s", exe);
            return 0;
        }
    }
    return -1;
}

static int sh_run(const char *cmd)
{
    return sh_test_run(cmd, out, sizeof out);
}

static void example_builds_against_the_public_headers_and_trains(void)
{
    if (check_under_san()) {
        printf("test_api: skipped the example under sanitizers (libshoal.a needs their runtime)\n");
        return;
    }
    char root[PATH_MAX], exe[PATH_MAX], lib[PATH_MAX + 32], cmd[4 * PATH_MAX];
    CHECK(find_root(root, sizeof root) == 0, "cannot find the repository root");
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return;
    exe[len] = 0;
    for (int up = 0; up < 3; up++) *strrchr(exe, '/') = 0; /* build/tests/train/test_api -> build */
    snprintf(lib, sizeof lib, "%s/libshoal.a", exe);
    CHECK(access(lib, R_OK) == 0, "no %s", lib);
    snprintf(cmd, sizeof cmd, "cc -std=c11 -Wall -Wextra -Werror -I%s/include -o %s/train_lenet %s/examples/train_lenet.c "
             "%s -pthread -lcrypto -ljpeg -lpng -lz -ldl -lm -lrt -lprotobuf-c 2>&1", root, dir, root, lib);
    int rc = sh_run(cmd);
    CHECK(rc == 0, "the example does not build with only -Iinclude: %s", out);
    if (rc != 0) return;
    snprintf(cmd, sizeof cmd, "env -u SHOAL_THREADS %s/train_lenet %s %s 16 2>&1", dir, mlp, dir);
    rc = sh_run(cmd);
    CHECK(rc == 0, "exit %d: %s", rc, out);
    CHECK(strstr(out, "input 1x8x8, 4 classes") != NULL, "%s", out);
    CHECK(strstr(out, "trained 16 steps (alone, rank 0 of 1") != NULL, "%s", out);
    CHECK(strstr(out, "test accuracy") != NULL, "%s", out);
    /* Under shoal launch the same program is two data-parallel ranks; rank 0 reports. */
    const char *bin = getenv("SHOAL_BIN");
    if (bin) {
        snprintf(cmd, sizeof cmd, "env -u SHOAL_THREADS %s launch -n 2 %s/train_lenet %s %s 8 2>&1", bin, dir, mlp,
                 dir);
        rc = sh_run(cmd);
        CHECK(rc == 0, "under shoal launch: exit %d: %s", rc, out);
        CHECK(strstr(out, "trained 8 steps (data-parallel rank, rank 0 of 2") != NULL, "%s", out);
        CHECK(!strstr(out, "rank 1 of 2"), "rank 1 reported too: %s", out);
        /* options by name: a pipeline of two stages, and the report as --json prints it */
        snprintf(cmd, sizeof cmd, "env -u SHOAL_THREADS %s launch -n 2 %s/train_lenet %s %s 8 pipeline=2 "
                 "micro_batches=2 json 2>&1", bin, dir, mlp, dir);
        rc = sh_run(cmd);
        CHECK(rc == 0 && strstr(out, "trained 8 steps (pipeline stage, rank 0 of 2") && strstr(out, "\"steps\":8,"),
              "a pipeline by name: exit %d: %s", rc, out);
    } else {
        printf("test_api: SHOAL_BIN unset: the example under shoal launch is skipped\n");
    }
    snprintf(cmd, sizeof cmd, "%s/train_lenet %s/no-such.cfg 2>&1", dir, dir);
    rc = sh_run(cmd);
    CHECK(rc == 1 && strstr(out, "no-such.cfg"), "a missing cfg: exit %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "%s/train_lenet %s %s 8 epoch=2 2>&1", dir, mlp, dir);
    rc = sh_run(cmd);
    CHECK(rc == 2 && strstr(out, "did you mean \"epochs\""), "a mistyped option: exit %d: %s", rc, out);
}


/* ---- the job's other layouts, each on real ranks under shoal launch ---- */

static const char deep_cfg[] = /* pairs of [connected] for tensor parallelism */
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\nmomentum=0.9\n"
    "\n[connected]\noutput=32\nactivation=relu\n"
    "\n[connected]\noutput=24\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

static const char convfc_cfg[] = /* convolutional layers before connected ones: hybrid */
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.05\nmomentum=0.9\n"
    "\n[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=relu\n"
    "\n[maxpool]\nsize=2\nstride=2\n"
    "\n[connected]\noutput=24\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

static const char char_cfg[] = /* a character model for text data */
    "[net]\ninputs=256\nbatch=4\ntime_steps=8\nlearning_rate=0.05\nmomentum=0.9\n"
    "[rnn]\nhidden=16\noutput=16\nactivation=tanh\n"
    "[connected]\noutput=256\nactivation=linear\n[softmax]\n";

/* `test_api --rank-job CFG NAME=VALUE...` under shoal launch: one rank of a job through the
 * public API only; every rank prints its role, the reporter the --json document. */
static int rank_job(int argc, char **argv)
{
    shoal_train_opts o;
    shoal_train_opts_default(&o);
    o.cfg_path = argv[2];
    for (int i = 3; i < argc; i++) {
        char name[64];
        const char *eq = strchr(argv[i], '=');
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - argv[i]) : (int)strlen(argv[i]), argv[i]);
        if (shoal_train_opts_set(&o, name, eq ? eq + 1 : NULL) != SHOAL_OK) {
            fprintf(stderr, "rank job: %s\n", shoal_last_error_message());
            return 2;
        }
    }
    static shoal_train_report r;
    static char json[SHOAL_TRAIN_REPORT_JSON_NBYTES];
    shoal_result rc = shoal_train_run(&o, &r);
    printf("ROLE %d of %d: %s, %s\n", r.rank, r.world, r.role ? r.role : "?", r.layout ? r.layout : "?");
    if (rc == SHOAL_OK && r.is_result && shoal_train_report_json(&r, json, sizeof json) == SHOAL_OK)
        printf("REPORT %s\n", json);
    if (rc != SHOAL_OK) fprintf(stderr, "rank job: %s\n", shoal_last_error_message());
    shoal_train_opts_fini(&o);
    return rc == SHOAL_OK ? 0 : 1;
}

/* The reporter's document in out, parsed; NULL when there is none. */
static sh_json *report_in(const char *text)
{
    const char *p = strstr(text, "REPORT {");
    if (!p) return NULL;
    char line[1 << 15];
    size_t n = strcspn(p + 7, "\n");
    snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line - 1 ? n : sizeof line - 1), p + 7);
    char err[160];
    return sh_json_parse(line, err, sizeof err);
}

typedef struct {
    const char *what, *cfg;
    int nranks;
    const char *opts;       /* NAME=VALUE ... */
    const char *layout;     /* report.layout on every rank */
    const char *role0;      /* rank 0's role */
    const char *json_key;   /* a key the layout adds to the document, or NULL */
} layout_case;

static void each_layout_trains_through_the_public_api_on_real_ranks(void)
{
    const char *bin = getenv("SHOAL_BIN");
    if (!bin || check_under_san()) {
        printf("test_api: %s: the layouts on real ranks are skipped\n", bin ? "sanitizers" : "SHOAL_BIN unset");
        return;
    }
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) return;
    self[len] = 0;
    const layout_case cases[] = {
        {"data parallel, compressed", "mlp.cfg", 2, "compress=fp16", "data-parallel", "data-parallel rank",
         "compression_ratio"},
        {"parameter servers", "mlp.cfg", 3, "ps servers=1 consistency=ssp", "parameter-server", "server", NULL},
        {"pipeline", "mlp.cfg", 2, "pipeline=2 micro-batches=2 profile", "pipeline", "pipeline stage", "pipeline"},
        {"tensor parallel", "deep.cfg", 2, "tensor-parallel=2", "tensor-parallel", "tensor-parallel rank", NULL},
        {"hybrid", "convfc.cfg", 2, "hybrid=broadcast", "hybrid", "hybrid rank", "activity_bytes_per_step"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const layout_case *c = &cases[i];
        char cmd[2 * PATH_MAX + 1024];
        snprintf(cmd, sizeof cmd, "cd %s && env -u SHOAL_THREADS %s launch -n %d %s --rank-job %s data=. "
                 "max-steps=8 threads=1 quiet seed=5 %s 2>&1", dir, bin, c->nranks, self, c->cfg, c->opts);
        int rc = sh_run(cmd);
        CHECK(rc == 0, "%s: exit %d: %s", c->what, rc, out);
        char role[128];
        snprintf(role, sizeof role, "ROLE 0 of %d: %s, %s", c->nranks, c->role0, c->layout);
        CHECK(strstr(out, role), "%s: no \"%s\" in %s", c->what, role, out);
        CHECK(sh_test_count(out, "ROLE ") == c->nranks, "%s: %d ranks said their role: %s", c->what,
              sh_test_count(out, "ROLE "), out);
        sh_json *d = report_in(out);
        CHECK(d != NULL, "%s: no report: %s", c->what, out);
        if (!d) continue;
        CHECK(sh_json_num(d, "steps", 0) == 8, "%s: steps %g", c->what, sh_json_num(d, "steps", 0));
        double acc = sh_json_num(d, "accuracy", -1);
        CHECK(acc >= 0 && acc <= 1 && sh_json_get(d, "history"), "%s: accuracy %g", c->what, acc);
        CHECK(!c->json_key || sh_json_get(d, c->json_key), "%s: no \"%s\" in the report: %s", c->what, c->json_key,
              out);
        CHECK(sh_test_count(out, "REPORT ") == 1, "%s: %d reports", c->what, sh_test_count(out, "REPORT "));
        sh_json_free(d);
    }
    /* an option the job refuses on every rank: one line each, exit 1, nothing trained */
    char cmd[2 * PATH_MAX + 1024];
    snprintf(cmd, sizeof cmd, "cd %s && %s launch -n 3 %s --rank-job mlp.cfg data=. tensor-parallel=2 max-steps=2 2>&1",
             dir, bin, self);
    int rc = sh_run(cmd);
    CHECK(rc != 0 && strstr(out, "--tensor-parallel 2") && !strstr(out, "REPORT"), "3 ranks, 2 per replica: exit %d: %s",
          rc, out);
}

static void text_data_trains_alone_in_bits_per_character(void)
{
    shoal_train_opts o;
    shoal_train_opts_default(&o);
    char cfg[600], text[600];
    snprintf(cfg, sizeof cfg, "%s/char.cfg", dir);
    snprintf(text, sizeof text, "%s/text.txt", dir);
    o.cfg_path = cfg;
    CHECK_OK(shoal_train_opts_set(&o, "data", text));
    CHECK_OK(shoal_train_opts_set(&o, "max-steps", "6"));
    CHECK_OK(shoal_train_opts_set(&o, "threads", "1"));
    CHECK_OK(shoal_train_opts_set(&o, "quiet", NULL));
    static shoal_train_report r;
    CHECK_OK(shoal_train_run(&o, &r));
    CHECK(r.text == 1 && r.steps == 6 && r.test_bpc > 0 && fabs(r.test_bpc - r.test_loss / M_LN2) < 1e-9,
          "text %d steps %lld bpc %g loss %g", r.text, (long long)r.steps, r.test_bpc, r.test_loss);
    static char json[SHOAL_TRAIN_REPORT_JSON_NBYTES];
    CHECK_OK(shoal_train_report_json(&r, json, sizeof json));
    char err[160];
    sh_json *d = sh_json_parse(json, err, sizeof err);
    CHECK(d && fabs(sh_json_num(d, "test_bpc", 0) - r.test_bpc) < 1e-6 && sh_json_num(d, "chars_per_s", 0) > 0,
          "%s", json);
    sh_json_free(d);
    shoal_train_opts_fini(&o);
}

/* ---- a run's report, the stop request, the hooks, shoal_test_run ---- */

static int64_t hook_steps[64];
static int hook_calls, hook_rank = -1;

static void count_steps(void *ctx, int rank, int64_t step)
{
    (void)ctx;
    if (hook_calls < 64) hook_steps[hook_calls] = step;
    hook_calls++;
    hook_rank = rank;
}

static void report_json_and_hooks_follow_the_run(void)
{
    shoal_train_opts o;
    shoal_train_opts_default(&o);
    o.cfg_path = mlp;
    o.data_dir = dir;
    o.max_steps = 12;
    o.threads = 1;
    o.quiet = 1;
    o.profile = 1;
    o.before_step = count_steps;
    static shoal_train_report r;
    CHECK_OK(shoal_train_run(&o, &r));
    CHECK(hook_calls == 12 && hook_rank == 0, "before_step called %d times (rank %d)", hook_calls, hook_rank);
    for (int i = 0; i < hook_calls && i < 12; i++) CHECK(hook_steps[i] == i, "call %d saw step %lld", i, (long long)hook_steps[i]);
    CHECK(r.has_profile && r.profile.step_ms > 0 && r.profile.forward_ms > 0, "profile %d: step %g ms", r.has_profile,
          r.profile.step_ms);
    CHECK(r.layout && !strcmp(r.layout, "data-parallel") && r.nhistory >= 1 && r.peak_rss_mb > 1, "layout %s, %d "
          "evaluations, %g MB", r.layout ? r.layout : "(null)", r.nhistory, r.peak_rss_mb);
    static char json[SHOAL_TRAIN_REPORT_JSON_NBYTES];
    CHECK_OK(shoal_train_report_json(&r, json, sizeof json));
    char err[160];
    sh_json *d = sh_json_parse(json, err, sizeof err);
    CHECK(d != NULL, "%s: %s", err, json);
    if (!d) return;
    CHECK(sh_json_num(d, "steps", 0) == 12 && fabs(sh_json_num(d, "accuracy", -1) - r.test_accuracy) < 1e-6 &&
          fabs(sh_json_num(d, "test_loss", -1) - r.test_loss) < 1e-6 && sh_json_num(d, "threads", 0) == 1,
          "%s", json);
    const sh_json *h = sh_json_get(d, "history");
    CHECK(h && (int)h->n == r.nhistory && sh_json_num(&h->items[h->n - 1], "step", 0) == 12, "%s", json);
    sh_json_free(d);
}

static void stop_request_ends_the_run_saved_after_one_step(void)
{
    shoal_train_opts o;
    shoal_train_opts_default(&o);
    char save[600];
    snprintf(save, sizeof save, "%s/stop.ckpt", dir);
    o.cfg_path = mlp;
    o.data_dir = dir;
    o.max_steps = 12;
    o.threads = 1;
    o.quiet = 1;
    o.save_path = save;
    static shoal_train_report r;
    shoal_train_request_stop(); /* as a SIGINT handler would, before the first step ends */
    CHECK_OK(shoal_train_run(&o, &r));
    CHECK(r.stopped == 1 && r.steps == 1 && !strcmp(r.saved_path, save) && access(save, R_OK) == 0,
          "stopped %d after %lld steps, saved \"%s\"", r.stopped, (long long)r.steps, r.saved_path);
    CHECK_OK(shoal_train_run(&o, &r)); /* the request was spent */
    CHECK(r.stopped == 0 && r.steps == 12, "the next run: stopped %d after %lld steps", r.stopped, (long long)r.steps);
    unlink(save);
}

static void test_run_measures_the_saved_weights(void)
{
    shoal_train_opts o;
    shoal_train_opts_default(&o);
    char save[600], other[600];
    snprintf(save, sizeof save, "%s/tested.ckpt", dir);
    snprintf(other, sizeof other, "%s/other.cfg", dir);
    o.cfg_path = mlp;
    o.data_dir = dir;
    o.epochs = 2;
    o.threads = 1;
    o.quiet = 1;
    o.save_path = save;
    static shoal_train_report r;
    CHECK_OK(shoal_train_run(&o, &r));
    shoal_test_opts t;
    shoal_test_opts_default(&t);
    t.cfg_path = mlp;
    t.weights_path = save;
    t.data_dir = dir;
    t.threads = 1;
    shoal_test_report tr;
    CHECK_OK(shoal_test_run(&t, &tr));
    CHECK(fabs(tr.accuracy - r.test_accuracy) < 1e-9 && fabs(tr.loss - r.test_loss) < 1e-6 && tr.count == TINY_TEST &&
          tr.text == 0 && tr.threads == 1, "test %g (loss %g, %lld images), training said %g (%g)", tr.accuracy, tr.loss,
          (long long)tr.count, r.test_accuracy, r.test_loss);
    t.cfg_path = other;
    CHECK_RC(shoal_test_run(&t, &tr), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error_message(), "another model"), "%s", shoal_last_error_message());
    t.cfg_path = mlp;
    t.weights_path = NULL;
    CHECK_RC(shoal_test_run(&t, &tr), SHOAL_ERR_INVALID);
    CHECK_RC(shoal_test_run(NULL, &tr), SHOAL_ERR_INVALID);
    CHECK_RC(shoal_test_run(&t, NULL), SHOAL_ERR_INVALID);
    /* the same checkpoint into public nets built from two seeds: the same weights after */
    shoal_net_opts no;
    shoal_net_opts_default(&no);
    shoal_net *a = NULL, *b = NULL, *c = NULL;
    no.seed = 1;
    CHECK_OK(shoal_net_load(mlp, &no, &a));
    no.seed = 2;
    CHECK_OK(shoal_net_load(mlp, &no, &b));
    CHECK_OK(shoal_net_load(other, &no, &c));
    size_t np = 0;
    const float *pa = shoal_net_params(a, &np), *pb = shoal_net_params(b, NULL);
    CHECK(pa && pb && memcmp(pa, pb, np * sizeof *pa) != 0, "two seeds, the same weights");
    CHECK_OK(shoal_net_load_weights(a, save));
    CHECK_OK(shoal_net_load_weights(b, save));
    CHECK(pa && pb && memcmp(pa, pb, np * sizeof *pa) == 0, "the checkpoint's weights differ between the nets");
    char missing[600];
    snprintf(missing, sizeof missing, "%s/missing.ckpt", dir);
    shoal_result rc = shoal_net_load_weights(a, missing);
    CHECK((rc == SHOAL_ERR_IO || rc == SHOAL_ERR_FORMAT) && strstr(shoal_last_error_message(), "missing.ckpt"),
          "a missing file: %s", shoal_last_error_message());
    CHECK_RC(shoal_net_load_weights(c, save), SHOAL_ERR_FORMAT);
    CHECK_RC(shoal_net_load_weights(NULL, save), SHOAL_ERR_INVALID);
    CHECK_RC(shoal_net_load_weights(a, NULL), SHOAL_ERR_INVALID);
    shoal_net_destroy(a);
    shoal_net_destroy(b);
    shoal_net_destroy(c);
    unlink(save);
}

/* ---- net.h's layer times, backward from the outputs' sum, time steps, Darknet's draws ---- */

static void layer_times_sum_backward_steps_and_draws_match_the_internal_net(void)
{
    shoal_net_opts no;
    shoal_net_opts_default(&no);
    no.batch = 4;
    no.threads = 1;
    shoal_net *pub = NULL;
    sh_net *ref = NULL;
    CHECK_OK(shoal_net_load(mlp, &no, &pub));
    CHECK_OK(sh_net_load(mlp, 4, 1, &ref));
    if (!pub || !ref) return;
    sh_net_set_threads(ref, 1);
    int nl = shoal_net_nlayers(pub);
    CHECK(nl == sh_net_nlayers(ref) && nl > 2, "%d layers, internal %d", nl, sh_net_nlayers(ref));
    for (int i = 0; i < nl; i++) {
        const char *name = NULL;
        CHECK_OK(shoal_net_layer_times(pub, i, &name, NULL, NULL));
        CHECK(name && !strcmp(name, sh_net_layer_name(ref, i)), "layer %d named %s", i, name ? name : "(null)");
    }
    size_t np = 0;
    shoal_net_params(pub, &np);
    CHECK_RC(shoal_net_layer_times(pub, nl, NULL, NULL, NULL), SHOAL_ERR_INVALID);
    CHECK_RC(shoal_net_layer_times(pub, -1, NULL, NULL, NULL), SHOAL_ERR_INVALID);
    CHECK_RC(shoal_net_layer_times(NULL, 0, NULL, NULL, NULL), SHOAL_ERR_INVALID);
    CHECK(shoal_net_nlayers(NULL) == 0, "layers of NULL");
    float x[4 * TINY_SIDE * TINY_SIDE];
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = (float)(i % 7) * 0.125f;
    CHECK_OK(shoal_net_forward(pub, x, 4, 1, NULL));
    CHECK_OK(shoal_net_backward(pub, NULL, NULL)); /* from sum(outputs): no labels */
    CHECK_OK(sh_net_forward(ref, x, 4, 1));
    sh_net_loss_sum(ref);
    CHECK_OK(sh_net_backward(ref, NULL, NULL));
    CHECK(memcmp(shoal_net_grads(pub, NULL), sh_net_grads(ref), np * sizeof(float)) == 0,
          "backward from the sum differs from the internal net's");
    double fwd = -1, bwd = -1;
    CHECK_OK(shoal_net_layer_times(pub, 0, NULL, &fwd, &bwd));
    CHECK(fwd >= 0 && bwd >= 0 && fwd + bwd > 0, "layer 0 took %g and %g ms", fwd, bwd);
    CHECK(shoal_net_darknet_init_draws(pub) == sh_darknet_init_draws(ref) && shoal_net_darknet_init_draws(pub) > 0,
          "draws %lld, internal %lld", (long long)shoal_net_darknet_init_draws(pub),
          (long long)sh_darknet_init_draws(ref));
    CHECK(shoal_net_darknet_init_draws(NULL) == -1, "draws of NULL");
    shoal_net_destroy(pub);
    sh_net_destroy(ref);
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/char.cfg", dir);
    const int steps[][3] = {{1, 1, 1}, {2, 3, 6}, {0, 0, 32}}; /* batch, time_steps -> rows */
    for (int i = 0; i < 3; i++) {
        no.batch = steps[i][0];
        no.time_steps = steps[i][1];
        CHECK_OK(shoal_net_load(cfg, &no, &pub));
        int n = 0;
        shoal_net_input_shape(pub, &n, NULL, NULL, NULL);
        CHECK(n == steps[i][2], "batch %d, time_steps %d: %d rows, want %d", steps[i][0], steps[i][1], n, steps[i][2]);
        shoal_net_destroy(pub);
        pub = NULL;
    }
    no.time_steps = -1;
    CHECK_RC(shoal_net_load(cfg, &no, &pub), SHOAL_ERR_INVALID);
    snprintf(cfg, sizeof cfg, "%s/conv.cfg", dir);
    no.time_steps = 0;
    CHECK_OK(shoal_net_load(cfg, &no, &pub));
    CHECK(shoal_net_darknet_init_draws(pub) == -1, "a [convolutional] net has Darknet draws");
    shoal_net_destroy(pub);
}

/* The text of a small book, repeated: a text file to train a character model on. */
static int write_text(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/text.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    for (int i = 0; i < 200; i++) fputs("the quick brown fox jumps over the lazy dog. ", f);
    return fclose(f);
}

int main(int argc, char **argv)
{
    if (argc > 2 && !strcmp(argv[1], "--rank-job")) return rank_job(argc, argv);
    check_begin("test_api", 300);
    if (tiny_make_dir(dir, sizeof dir) != 0 || tiny_write_file(dir, "deep.cfg", deep_cfg) ||
        tiny_write_file(dir, "convfc.cfg", convfc_cfg) || tiny_write_file(dir, "char.cfg", char_cfg) || write_text()) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    snprintf(mlp, sizeof mlp, "%s/mlp.cfg", dir);
    RUN(forward_and_backward_match_the_internal_net);
    RUN(bad_cfg_is_an_error_with_a_message);
    RUN(null_and_out_of_range_arguments_are_refused);
    RUN(layer_times_sum_backward_steps_and_draws_match_the_internal_net);
    RUN(train_run_alone_trains_and_refuses_bad_options);
    RUN(report_json_and_hooks_follow_the_run);
    RUN(stop_request_ends_the_run_saved_after_one_step);
    RUN(test_run_measures_the_saved_weights);
    RUN(text_data_trains_alone_in_bits_per_character);
    RUN(each_layout_trains_through_the_public_api_on_real_ranks);
    RUN(example_builds_against_the_public_headers_and_trains);
    char p[600];
    snprintf(p, sizeof p, "%s/train_lenet", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/bad.cfg", dir);
    unlink(p);
    tiny_remove_dir(dir);
    return check_end();
}
