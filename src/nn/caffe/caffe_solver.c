/* caffe_solver.c — a Caffe solver .prototxt as shoal's [net] keys: base_lr, lr_policy with
 * its parameters (fixed, step, exp, inv, multistep, poly, sigmoid onto shoal's policies of
 * the same formulas), momentum, weight_decay, max_iter, iter_size (as subdivisions), the
 * solver type (SGD, Adam, AdaGrad); the net it names; and its run settings (snapshot,
 * random_seed) for the command line. Caffe's SGD puts the rate inside the momentum
 * (v = m v + lr g), shoal's outside (v = m v + g, w -= lr v): the same steps at a fixed rate.
 * Not here: the net (caffe_net.c), what the policies compute (lr_policy.c).
 * Proved by tests/nn/test_caffe_solver.c. */
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "nn/caffe/caffe_internal.h"

#define WHAT "solver"

int sh_caffe_is_solver(const sh_ptx *root)
{
    if (sh_ptx_count(root, "layer") || sh_ptx_count(root, "layers") || sh_ptx_count(root, "input")) return 0;
    const char *keys[] = {"net", "train_net", "net_param", "train_net_param", "base_lr", "lr_policy", "max_iter"};
    for (int i = 0; i < 7; i++)
        if (sh_ptx_count(root, keys[i])) return 1;
    return 0;
}

shoal_result sh_caffe_solver_net(sh_ptx *sv, char *path, size_t path_nbytes)
{
    const char *net = NULL, *train = NULL;
    path[0] = 0;
    SH_TRY(sh_ptx_str(sv, WHAT, "net", "", &net));
    SH_TRY(sh_ptx_str(sv, WHAT, "train_net", "", &train));
    if (sh_ptx_count(sv, "net_param") || sh_ptx_count(sv, "train_net_param"))
        return sh_ptx_fail(sv, 1, "%s: a net written inside the solver (net_param) is not read; put it in its own "
                           ".prototxt and name it with net: \"FILE\"", sh_ptx_path(sv));
    const char *name = train[0] ? train : net;
    if (!name[0])
        return sh_ptx_fail(sv, 1, "%s: the solver names no net (net: \"FILE.prototxt\"); add it, or give the net "
                           "first: shoal train NET.prototxt --solver %s", sh_ptx_path(sv), sh_ptx_path(sv));
    /* Caffe opens it from the current directory; a solver kept beside its net works too */
    snprintf(path, path_nbytes, "%s", name);
    if (name[0] != '/' && access(name, R_OK) != 0) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", sh_ptx_path(sv));
        char beside[2048];
        snprintf(beside, sizeof beside, "%s/%s", dirname(dir), name);
        if (access(beside, R_OK) == 0) snprintf(path, path_nbytes, "%s", beside);
    }
    return SHOAL_OK;
}

static shoal_result put(sh_cfg_section *net, const char *key, double v)
{
    char text[64];
    snprintf(text, sizeof text, "%.9g", v);
    return sh_cfg_add_key(net, key, text, 1);
}

static shoal_result fail_field(sh_ptx *sv, const char *field, const char *fmt, const char *value)
{
    sh_ptx_field *f = sh_ptx_nth(sv, field, 0);
    return sh_ptx_fail(sv, f ? f->line : 1, fmt, value);
}

static shoal_result apply_policy(sh_ptx *sv, sh_cfg_section *net, long long max_iter)
{
    const char *policy = NULL;
    double gamma = 0, power = 0;
    long long stepsize = 0;
    SH_TRY(sh_ptx_str(sv, WHAT, "lr_policy", "", &policy));
    SH_TRY(sh_ptx_float(sv, WHAT, "gamma", 0, &gamma));
    SH_TRY(sh_ptx_float(sv, WHAT, "power", 0, &power));
    SH_TRY(sh_ptx_int(sv, WHAT, "stepsize", 0, 0, 1LL << 40, &stepsize));
    sh_ptx_skip(sv, "stepvalue"); /* read below for multistep; the other policies ignore it, as Caffe */
    int need_step = 0, need_gamma = 0;
    if (!policy[0]) return sh_ptx_fail(sv, 1, "solver: no lr_policy; give one of fixed, step, exp, inv, multistep, "
                                       "poly, sigmoid");
    if (!strcmp(policy, "fixed")) {
        SH_TRY(sh_cfg_add_key(net, "policy", "constant", 1));
    } else if (!strcmp(policy, "step")) {
        SH_TRY(sh_cfg_add_key(net, "policy", "step", 1));
        SH_TRY(put(net, "step", (double)stepsize));
        SH_TRY(put(net, "scale", gamma));
        need_step = need_gamma = 1;
    } else if (!strcmp(policy, "exp")) {
        SH_TRY(sh_cfg_add_key(net, "policy", "exp", 1));
        SH_TRY(put(net, "gamma", gamma));
        need_gamma = 1;
    } else if (!strcmp(policy, "inv")) {
        SH_TRY(sh_cfg_add_key(net, "policy", "inv", 1));
        SH_TRY(put(net, "gamma", gamma));
        SH_TRY(put(net, "power", power));
        need_gamma = 1;
    } else if (!strcmp(policy, "multistep")) {
        int n = sh_ptx_count(sv, "stepvalue");
        if (n == 0) return sh_ptx_fail(sv, 1, "solver: lr_policy multistep needs stepvalue (one line per step)");
        char steps[512] = "", scales[512] = "";
        size_t a = 0, b = 0;
        for (int i = 0; i < n; i++) {
            long long v = 0;
            SH_TRY(sh_ptx_int_at(sv, WHAT, "stepvalue", i, 0, 1 << 30, &v));
            a += (size_t)snprintf(steps + a, sizeof steps - a, "%s%lld", i ? "," : "", v);
            b += (size_t)snprintf(scales + b, sizeof scales - b, "%s%.9g", i ? "," : "", gamma);
        }
        if (a >= sizeof steps || b >= sizeof scales)
            return sh_ptx_fail(sv, 1, "solver: %d stepvalues are more than shoal keeps", n);
        SH_TRY(sh_cfg_add_key(net, "policy", "steps", 1));
        SH_TRY(sh_cfg_add_key(net, "steps", steps, 1));
        SH_TRY(sh_cfg_add_key(net, "scales", scales, 1));
        need_gamma = 1;
    } else if (!strcmp(policy, "poly")) {
        if (max_iter <= 0) return sh_ptx_fail(sv, 1, "solver: lr_policy poly needs max_iter (the rate reaches 0 there)");
        SH_TRY(sh_cfg_add_key(net, "policy", "poly", 1));
        SH_TRY(put(net, "power", power));
    } else if (!strcmp(policy, "sigmoid")) {
        /* Caffe: 1 / (1 + exp(-gamma (iter - stepsize))); shoal's (Darknet's) has +gamma */
        SH_TRY(sh_cfg_add_key(net, "policy", "sigmoid", 1));
        SH_TRY(put(net, "gamma", -gamma));
        SH_TRY(put(net, "step", (double)stepsize));
        need_step = need_gamma = 1;
    } else {
        return fail_field(sv, "lr_policy", "solver: lr_policy \"%s\" is not one of fixed, step, exp, inv, multistep, "
                          "poly, sigmoid", policy);
    }
    if (need_step && stepsize <= 0)
        return fail_field(sv, "lr_policy", "solver: lr_policy %s needs stepsize > 0", policy);
    if (need_gamma && !sh_ptx_count(sv, "gamma"))
        return fail_field(sv, "lr_policy", "solver: lr_policy %s needs gamma", policy);
    return SHOAL_OK;
}

static const char *const solver_types[] = {"SGD", "NESTEROV", "ADAGRAD", "RMSPROP", "ADADELTA", "ADAM"};

static shoal_result apply_type(sh_ptx *sv, sh_cfg_section *net, double momentum)
{
    const char *type = NULL;
    int old = 0;
    SH_TRY(sh_ptx_str(sv, WHAT, "type", "SGD", &type));
    SH_TRY(sh_ptx_enum(sv, WHAT, "solver_type", solver_types, 6, 0, &old));
    double delta = 1e-8, momentum2 = 0.999;
    SH_TRY(sh_ptx_float(sv, WHAT, "delta", 1e-8, &delta));
    SH_TRY(sh_ptx_float(sv, WHAT, "momentum2", 0.999, &momentum2));
    sh_ptx_skip(sv, "rms_decay");
    int kind = old;
    if (sh_ptx_count(sv, "type")) {
        kind = -1;
        const char *names[] = {"SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam"};
        for (int i = 0; i < 6; i++)
            if (!strcmp(type, names[i])) kind = i;
        if (kind < 0) return fail_field(sv, "type", "solver: type \"%s\" is not one of SGD, Adam, AdaGrad", type);
    }
    if (kind == 0) {
        SH_TRY(put(net, "momentum", momentum));
    } else if (kind == 5) {
        SH_TRY(sh_cfg_add_key(net, "optimizer", "adam", 1));
        SH_TRY(put(net, "B1", momentum));
        SH_TRY(put(net, "B2", momentum2));
        SH_TRY(put(net, "eps", delta));
    } else if (kind == 2) {
        SH_TRY(sh_cfg_add_key(net, "optimizer", "adagrad", 1));
        SH_TRY(put(net, "eps", delta));
    } else {
        return fail_field(sv, sh_ptx_count(sv, "type") ? "type" : "solver_type", "solver: type %s is not mapped: "
                          "shoal's optimizers are SGD (with momentum), Adam and AdaGrad", solver_types[kind]);
    }
    return SHOAL_OK;
}

shoal_result sh_caffe_solver_apply(sh_ptx *sv, sh_cfg_section *net, int *iter_size)
{
    double base_lr = 0, momentum = 0, decay = 0, clip = -1;
    long long max_iter = 0, iter = 1;
    const char *reg = NULL;
    if (!sh_ptx_count(sv, "base_lr")) return sh_ptx_fail(sv, 1, "solver: no base_lr; add base_lr: 0.01 (or another)");
    SH_TRY(sh_ptx_float(sv, WHAT, "base_lr", 0, &base_lr));
    if (!(base_lr >= 0 && base_lr < 1e6)) return fail_field(sv, "base_lr", "solver: base_lr %s is out of range", "");
    SH_TRY(sh_ptx_float(sv, WHAT, "momentum", 0, &momentum));
    SH_TRY(sh_ptx_float(sv, WHAT, "weight_decay", 0, &decay));
    SH_TRY(sh_ptx_int(sv, WHAT, "max_iter", 0, 0, 1LL << 31, &max_iter));
    SH_TRY(sh_ptx_int(sv, WHAT, "iter_size", 1, 1, 1 << 20, &iter));
    SH_TRY(sh_ptx_float(sv, WHAT, "clip_gradients", -1, &clip));
    SH_TRY(sh_ptx_str(sv, WHAT, "regularization_type", "L2", &reg));
    if (clip >= 0) return fail_field(sv, "clip_gradients", "solver: clip_gradients is not mapped%s; remove it", "");
    if (strcmp(reg, "L2"))
        return fail_field(sv, "regularization_type", "solver: regularization_type %s is not mapped: shoal's decay is "
                          "L2", reg);
    if (!(momentum >= 0 && momentum < 1))
        return fail_field(sv, "momentum", "solver: momentum must be in [0, 1)%s", "");
    SH_TRY(put(net, "learning_rate", base_lr));
    SH_TRY(put(net, "decay", decay));
    if (max_iter > 0) SH_TRY(put(net, "max_batches", (double)max_iter));
    SH_TRY(apply_policy(sv, net, max_iter));
    SH_TRY(apply_type(sv, net, momentum));
    *iter_size = (int)iter;
    /* the run's settings (sh_caffe_solver_run) and what shoal has no use for */
    const char *run[] = {"net", "train_net", "test_net", "test_iter", "test_interval", "test_compute_loss",
                         "test_initialization", "test_state", "train_state", "display", "average_loss", "snapshot",
                         "snapshot_prefix", "snapshot_diff", "snapshot_format", "snapshot_after_train",
                         "solver_mode", "device_id", "random_seed", "debug_info", "layer_wise_reduce", "eval_type",
                         "ap_version"};
    for (size_t i = 0; i < sizeof run / sizeof run[0]; i++) sh_ptx_skip(sv, run[i]);
    char field[256];
    int line = 0;
    if (sh_ptx_first_unread(sv, field, sizeof field, &line))
        return sh_ptx_fail(sv, line, "solver: field %s is not mapped by shoal; remove it", field);
    return SHOAL_OK;
}

shoal_result sh_caffe_solver_run(const char *model_path, sh_caffe_run *out)
{
    memset(out, 0, sizeof *out);
    out->random_seed = -1;
    const char *path = sh_caffe_solver_path();
    sh_ptx *sv = NULL;
    if (path) {
        SH_TRY(sh_ptx_load(path, &sv));
    } else if (model_path && sh_caffe_is_prototxt(model_path)) {
        SH_TRY(sh_ptx_load(model_path, &sv));
        if (!sh_caffe_is_solver(sv)) {
            sh_ptx_destroy(sv);
            return SHOAL_OK;
        }
    } else {
        return SHOAL_OK;
    }
    const char *prefix = NULL;
    shoal_result rc = sh_ptx_int(sv, WHAT, "snapshot", 0, 0, 1LL << 40, &out->snapshot);
    if (rc == SHOAL_OK) rc = sh_ptx_int(sv, WHAT, "test_interval", 0, 0, 1LL << 40, &out->test_interval);
    if (rc == SHOAL_OK) rc = sh_ptx_int(sv, WHAT, "random_seed", -1, -1, 1LL << 62, &out->random_seed);
    if (rc == SHOAL_OK) rc = sh_ptx_int(sv, WHAT, "max_iter", 0, 0, 1LL << 31, &out->max_iter);
    if (rc == SHOAL_OK) rc = sh_ptx_str(sv, WHAT, "snapshot_prefix", "", &prefix);
    if (rc == SHOAL_OK) snprintf(out->prefix, sizeof out->prefix, "%s", prefix);
    sh_ptx_destroy(sv);
    return rc;
}
