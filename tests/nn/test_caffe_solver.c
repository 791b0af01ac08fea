/* test_caffe_solver.c — proves src/nn/caffe/caffe_solver.c: each of Caffe's lr_policy values
 * (fixed, step, exp, inv, multistep, poly, sigmoid) gives, through shoal's [net] policy, the
 * rate Caffe's formula gives at iterations across the run; momentum, weight_decay, max_iter,
 * iter_size (as subdivisions) and Adam's settings reach [net]; a solver naming its net builds
 * it; and unmapped settings are refused naming the field. */
#include "caffe_check.h"
#include "nn/optim.h"

static const char *const tiny_net =
    "name: \"tiny\"\n"
    "layer { name: \"data\" type: \"Input\" top: \"data\" input_param { shape { dim: 4 dim: 1 dim: 2 dim: 2 } } }\n"
    "layer { name: \"fc\" type: \"InnerProduct\" bottom: \"data\" top: \"fc\" inner_product_param { num_output: 3 } }\n"
    "layer { name: \"p\" type: \"Softmax\" bottom: \"fc\" top: \"p\" }\n";

/* The [net] config of tiny_net under the solver text; 0 when it was refused (error kept). */
static int config_with(const char *solver_text, sh_net_config *out, shoal_result *rc_out)
{
    char net[256], solver[256];
    snprintf(net, sizeof net, "%s", cc_write("tiny.prototxt", tiny_net));
    snprintf(solver, sizeof solver, "%s", cc_write("solver.prototxt", solver_text));
    sh_caffe_use_solver(solver);
    sh_cfg *cfg = NULL;
    shoal_result rc = sh_cfg_load(net, &cfg);
    if (rc == SHOAL_OK) rc = sh_net_config_parse(sh_cfg_section_at(cfg, 0), out);
    sh_caffe_use_solver(NULL);
    sh_cfg_destroy(cfg);
    *rc_out = rc;
    return rc == SHOAL_OK;
}

/* Caffe's SGDSolver::GetLearningRate, written out: its parameters are floats (caffe.proto),
 * poly's ratio is computed in float (Dtype), the powers in double. */
static double caffe_rate(const char *policy, double base_d, double gamma_d, double power_d, long long stepsize,
                         const long long *stepvalue, int nsteps, long long max_iter, long long iter)
{
    double base = (float)base_d, gamma = (float)gamma_d, power = (float)power_d;
    if (!strcmp(policy, "fixed")) return base;
    if (!strcmp(policy, "step")) return base * pow(gamma, (double)(iter / stepsize));
    if (!strcmp(policy, "exp")) return base * pow(gamma, (double)iter);
    if (!strcmp(policy, "inv")) return base * pow(1.0 + gamma * (double)iter, -power);
    if (!strcmp(policy, "multistep")) {
        int k = 0;
        while (k < nsteps && iter >= stepvalue[k]) k++;
        return base * pow(gamma, k);
    }
    if (!strcmp(policy, "poly")) return base * pow(1.0 - (double)((float)iter / (float)max_iter), power);
    if (!strcmp(policy, "sigmoid")) return base * (1.0 / (1.0 + exp(-gamma * ((double)iter - (double)stepsize))));
    return -1;
}

static void policy_matches_caffe(const char *policy, double gamma, double power)
{
    const long long steps[3] = {300, 700, 900};
    char text[1024];
    snprintf(text, sizeof text,
             "net: \"ignored.prototxt\"\nbase_lr: 0.05\nlr_policy: \"%s\"\ngamma: %.9g\npower: %.9g\n"
             "stepsize: 250\nstepvalue: 300\nstepvalue: 700\nstepvalue: 900\nmax_iter: 1000\nmomentum: 0.9\n"
             "weight_decay: 0.0005\ntest_iter: 100\ntest_interval: 500\ndisplay: 100\nsnapshot: 5000\n"
             "snapshot_prefix: \"x\"\nsolver_mode: CPU\n", policy, gamma, power);
    sh_net_config c;
    shoal_result rc;
    if (!config_with(text, &c, &rc)) {
        CHECK(0, "lr_policy %s refused: %s", policy, shoal_last_error_message());
        return;
    }
    double worst = 0;
    const long long iters[] = {0, 1, 249, 250, 299, 300, 301, 500, 699, 700, 899, 900, 999};
    for (size_t i = 0; i < sizeof iters / sizeof iters[0]; i++) {
        double want = caffe_rate(policy, 0.05, gamma, power, 250, steps, 3, 1000, iters[i]);
        double got = sh_lr_at(&c.lr, iters[i]);
        worst = fmax(worst, fabs(got - want) / fmax(want, 1e-12));
    }
    CHECK(worst < 1e-5, "lr_policy %s: rate differs from Caffe's formula by %g (relative)", policy, worst);
    CHECK_NEAR(c.optim.momentum, 0.9, 1e-7);
    CHECK_NEAR(c.optim.decay, 0.0005, 1e-9);
    CHECK(c.max_batches == 1000, "max_iter -> max_batches %d", c.max_batches);
}

static void every_policy_matches_caffes_formula(void)
{
    policy_matches_caffe("fixed", 0, 0);
    policy_matches_caffe("step", 0.5, 0);
    policy_matches_caffe("exp", 0.998, 0);
    policy_matches_caffe("inv", 0.0001, 0.75);
    policy_matches_caffe("multistep", 0.3, 0);
    policy_matches_caffe("poly", 0, 1.5);
    policy_matches_caffe("sigmoid", 0.01, 0);
}

static void iter_size_adam_and_refusals(void)
{
    sh_net_config c;
    shoal_result rc;
    if (config_with("base_lr: 0.001\nlr_policy: \"fixed\"\niter_size: 3\ntype: \"Adam\"\nmomentum: 0.8\n"
                    "momentum2: 0.99\ndelta: 1e-6\n", &c, &rc)) {
        CHECK(c.batch == 12 && c.subdivisions == 3, "iter_size 3: batch %d subdivisions %d", c.batch, c.subdivisions);
        CHECK(c.optim.kind == SH_OPTIM_ADAM, "Adam");
        CHECK_NEAR(c.optim.beta1, 0.8, 1e-7);
        CHECK_NEAR(c.optim.beta2, 0.99, 1e-7);
        CHECK_NEAR(c.optim.eps, 1e-6, 1e-12);
    } else {
        CHECK(0, "Adam solver refused: %s", shoal_last_error_message());
    }
    const char *bad[][2] = {
        {"base_lr: 0.01\nlr_policy: \"cosine\"\n", "lr_policy \"cosine\""},
        {"base_lr: 0.01\nlr_policy: \"fixed\"\nregularization_type: \"L1\"\n", "regularization_type L1"},
        {"base_lr: 0.01\nlr_policy: \"step\"\ngamma: 0.1\n", "needs stepsize"},
        {"base_lr: 0.01\nlr_policy: \"fixed\"\ntype: \"RMSProp\"\n", "RMSPROP"},
        {"base_lr: 0.01\nlr_policy: \"fixed\"\nclip_gradients: 10\n", "clip_gradients"},
        {"base_lr: 0.01\nlr_policy: \"fixed\"\nwarmup: 10\n", "solver.prototxt:3: solver: field warmup"},
        {"lr_policy: \"fixed\"\n", "no base_lr"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(!config_with(bad[i][0], &c, &rc) && rc == SHOAL_ERR_FORMAT, "accepted: %s", bad[i][0]);
        CHECK(strstr(shoal_last_error_message(), bad[i][1]), "error lacks \"%s\": %s", bad[i][1],
              shoal_last_error_message());
    }
}

/* shoal train SOLVER.prototxt: the solver names its net (beside it) and brings its rates. */
static void solver_names_its_net(void)
{
    cc_write("tiny.prototxt", tiny_net);
    char solver[256];
    snprintf(solver, sizeof solver, "%s",
             cc_write("s.prototxt", "net: \"tiny.prototxt\"\nbase_lr: 0.02\nlr_policy: \"fixed\"\nmax_iter: 7\n"
                                    "snapshot: 3\nsnapshot_prefix: \"snap\"\n"));
    sh_net *net = cc_net(solver, 0);
    if (net) {
        CHECK(sh_net_nclasses(net) == 3, "the solver's net was built");
        CHECK_NEAR(sh_net_get_config(net)->lr.base_lr, 0.02, 1e-9);
        sh_net_destroy(net);
    }
    sh_caffe_run run;
    CHECK_OK(sh_caffe_solver_run(solver, &run));
    CHECK(run.snapshot == 3 && !strcmp(run.prefix, "snap") && run.max_iter == 7, "run settings: snapshot %lld "
          "prefix %s max_iter %lld", run.snapshot, run.prefix, run.max_iter);
}

int main(void)
{
    check_begin("test_caffe_solver", 60);
    cc_mkdir();
    RUN(every_policy_matches_caffes_formula);
    RUN(iter_size_adam_and_refusals);
    RUN(solver_names_its_net);
    cc_rmdir();
    return check_end();
}
