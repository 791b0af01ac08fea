/* test_api.c — proves the public training API: shoal/net.h (src/nn/net_api.c) gives the
 * internal net's forward, loss and gradients bit for bit, names a bad cfg with an error
 * code and message, and refuses NULL and out-of-range arguments; shoal/train.h
 * (src/train/train_api.c, job.c) trains alone and refuses bad options; and
 * examples/train_lenet.c, compiled against libshoal.a with only -Iinclude, trains and
 * prints its result. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
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
    CHECK_RC(shoal_net_backward(n, NULL, NULL), SHOAL_ERR_INVALID);
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
             "%s -pthread -ljpeg -lpng -lz -ldl -lm -lrt 2>&1", root, dir, root, lib);
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
    } else {
        printf("test_api: SHOAL_BIN unset: the example under shoal launch is skipped\n");
    }
    snprintf(cmd, sizeof cmd, "%s/train_lenet %s/no-such.cfg 2>&1", dir, dir);
    rc = sh_run(cmd);
    CHECK(rc == 1 && strstr(out, "no-such.cfg"), "a missing cfg: exit %d: %s", rc, out);
}

int main(void)
{
    check_begin("test_api", 120);
    if (tiny_make_dir(dir, sizeof dir) != 0) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    snprintf(mlp, sizeof mlp, "%s/mlp.cfg", dir);
    RUN(forward_and_backward_match_the_internal_net);
    RUN(bad_cfg_is_an_error_with_a_message);
    RUN(null_and_out_of_range_arguments_are_refused);
    RUN(train_run_alone_trains_and_refuses_bad_options);
    RUN(example_builds_against_the_public_headers_and_trains);
    char p[600];
    snprintf(p, sizeof p, "%s/train_lenet", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/bad.cfg", dir);
    unlink(p);
    tiny_remove_dir(dir);
    return check_end();
}
