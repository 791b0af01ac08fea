/* test_trainer.c — proves src/train/trainer.c, step.c, eval.c and strategy.c: training
 * a tiny model learns, same seed and threads repeat bit for bit, stop and save requests,
 * planned step counts, and clear refusals of data that does not fit the model. */
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "check.h"
#include "train/tiny_data.h"
#include "train/trainer.h"

static char dir[256], mlp_cfg[512];

static void opts_for(sh_train_opts *o, const char *cfg)
{
    sh_train_opts_default(o);
    o->cfg_path = cfg;
    o->data_dir = dir;
    o->threads = 1;
    o->quiet = 1;
    o->seed = 7;
}

/* Train with o; copy the final parameters into a fresh malloc'd array (*params). */
static shoal_result train(const sh_train_opts *o, sh_train_report *r, float **params, size_t *n)
{
    sh_trainer *t = NULL;
    shoal_result rc = sh_trainer_create(o, &t);
    if (rc == SHOAL_OK) rc = sh_trainer_run(t, r);
    if (rc == SHOAL_OK && params) {
        sh_net *net = sh_trainer_net(t);
        *n = sh_net_nparams(net);
        *params = malloc(*n * sizeof(float));
        memcpy(*params, sh_net_params(net), *n * sizeof(float));
    }
    sh_trainer_destroy(t);
    return rc;
}

static void tiny_mlp_learns_the_bands(void)
{
    sh_train_opts o;
    opts_for(&o, mlp_cfg);
    o.epochs = 4;
    sh_train_report r;
    CHECK_OK(train(&o, &r, NULL, NULL));
    CHECK(r.test_accuracy > 0.9, "test accuracy %.3f after 4 epochs; chance is 0.25",
          r.test_accuracy);
    CHECK(r.steps == 4 * (TINY_TRAIN / 16), "steps %lld", (long long)r.steps);
    CHECK_NEAR(r.epochs, 4.0, 1e-9);
    CHECK(r.images_per_s > 0, "images/s %g", r.images_per_s);
    CHECK(r.peak_rss_nbytes > 0, "peak rss %zu", r.peak_rss_nbytes);
    CHECK(!r.stopped && r.saved_path[0] == 0, "stopped %d saved '%s'", r.stopped, r.saved_path);
}

static void loss_falls_during_training(void)
{
    sh_train_opts o;
    opts_for(&o, mlp_cfg);
    o.max_steps = 2;
    o.eval_each_epoch = 0;
    sh_train_report early, late;
    CHECK_OK(train(&o, &early, NULL, NULL));
    o.max_steps = 0;
    o.epochs = 3;
    CHECK_OK(train(&o, &late, NULL, NULL));
    CHECK(late.train_loss < 0.5 * early.train_loss, "train loss %.4f after 3 epochs vs %.4f "
          "after 2 steps", late.train_loss, early.train_loss);
    CHECK(late.test_loss < early.test_loss, "test loss %.4f vs %.4f", late.test_loss,
          early.test_loss);
}

static void same_seed_and_threads_repeat_bitwise(void)
{
    sh_train_opts o;
    opts_for(&o, mlp_cfg);
    o.epochs = 2;
    float *a = NULL, *b = NULL, *c = NULL;
    size_t na = 0, nb = 0, nc = 0;
    sh_train_report r;
    CHECK_OK(train(&o, &r, &a, &na));
    CHECK_OK(train(&o, &r, &b, &nb));
    o.seed = 8;
    CHECK_OK(train(&o, &r, &c, &nc));
    CHECK(a && b && c && na == nb && na == nc && na > 0, "param counts %zu %zu %zu", na, nb, nc);
    if (a && b && c && na == nb && na == nc) {
        CHECK(memcmp(a, b, na * sizeof(float)) == 0, "two runs with seed 7 differ");
        CHECK(memcmp(a, c, na * sizeof(float)) != 0, "seeds 7 and 8 gave the same weights");
    }
    free(a);
    free(b);
    free(c);
}

static void two_threads_repeat_bitwise_too(void)
{
    sh_train_opts o;
    opts_for(&o, mlp_cfg);
    o.threads = 2;
    o.max_steps = 20;
    float *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    sh_train_report r;
    CHECK_OK(train(&o, &r, &a, &na));
    CHECK_OK(train(&o, &r, &b, &nb));
    CHECK(a && b && na == nb && memcmp(a, b, na * sizeof(float)) == 0,
          "two runs with 2 threads differ");
    free(a);
    free(b);
}

static void max_steps_and_epochs_plan_the_run(void)
{
    sh_train_opts o;
    opts_for(&o, mlp_cfg);
    o.max_steps = 5;
    o.eval_each_epoch = 0;
    sh_trainer *t = NULL;
    CHECK_OK(sh_trainer_create(&o, &t));
    if (t) CHECK(sh_trainer_steps_planned(t) == 5, "planned %lld", (long long)sh_trainer_steps_planned(t));
    sh_trainer_destroy(t);
    o.max_steps = 0;
    o.epochs = 0; /* the cfg's max_batches */
    CHECK_OK(sh_trainer_create(&o, &t));
    if (t) CHECK(sh_trainer_steps_planned(t) == 1000, "planned %lld", (long long)sh_trainer_steps_planned(t));
    sh_trainer_destroy(t);
    o.epochs = 3;
    o.batch = 32;
    CHECK_OK(sh_trainer_create(&o, &t));
    if (t) CHECK(sh_trainer_steps_planned(t) == 3 * TINY_TRAIN / 32, "planned %lld",
                 (long long)sh_trainer_steps_planned(t));
    if (t) CHECK(strcmp(sh_trainer_default_save_path(t), "mlp.ckpt") == 0, "default path %s",
                 sh_trainer_default_save_path(t));
    sh_trainer_destroy(t);
}

static void stop_request_saves_after_the_current_step(void)
{
    sh_train_opts o;
    opts_for(&o, mlp_cfg);
    o.epochs = 5;
    char path[600];
    snprintf(path, sizeof path, "%s/stop.ckpt", dir);
    o.save_path = path;
    volatile sig_atomic_t stop = 1, save = 0;
    o.stop_requested = &stop;
    o.save_requested = &save;
    sh_train_report r;
    CHECK_OK(train(&o, &r, NULL, NULL));
    CHECK(r.stopped == 1, "stopped %d", r.stopped);
    CHECK(r.steps == 1, "stopped after %lld steps, want 1", (long long)r.steps);
    CHECK(strcmp(r.saved_path, path) == 0, "saved '%s'", r.saved_path);
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_size > 0, "no checkpoint at %s", path);
}

static void save_request_saves_and_continues(void)
{
    sh_train_opts o;
    opts_for(&o, mlp_cfg);
    o.max_steps = 6;
    o.eval_each_epoch = 0;
    char path[600];
    snprintf(path, sizeof path, "%s/hup.ckpt", dir);
    o.save_path = path;
    volatile sig_atomic_t stop = 0, save = 1;
    o.stop_requested = &stop;
    o.save_requested = &save;
    sh_train_report r;
    unlink(path);
    CHECK_OK(train(&o, &r, NULL, NULL));
    CHECK(!r.stopped && r.steps == 6, "stopped %d steps %lld", r.stopped, (long long)r.steps);
    CHECK(save == 0, "the request was not cleared");
    struct stat st;
    CHECK(stat(path, &st) == 0, "no checkpoint at %s", path);
}

static void diverging_loss_stops_with_a_clear_error(void)
{
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/hot.cfg", dir);
    tiny_write_file(dir, "hot.cfg",
                    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=1e6\n"
                    "momentum=0.9\n\n[connected]\noutput=16\nactivation=linear\n"
                    "\n[connected]\noutput=16\nactivation=linear\n"
                    "\n[connected]\noutput=4\nactivation=linear\n\n[softmax]\n\n[cost]\n");
    sh_train_opts o;
    opts_for(&o, cfg);
    o.max_steps = 300; /* NaN weights appear within ~100 steps; the scan is every 100 */
    sh_train_report r;
    CHECK_RC(train(&o, &r, NULL, NULL), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(), "diverged") &&
              strstr(shoal_last_error_message(), "learning_rate"),
          "message: %s", shoal_last_error_message());
}

static void dataset_that_does_not_fit_is_refused(void)
{
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/wide.cfg", dir);
    tiny_write_file(dir, "wide.cfg",
                    "[net]\nbatch=4\nwidth=10\nheight=10\nchannels=1\nlearning_rate=0.1\n"
                    "\n[connected]\noutput=4\nactivation=linear\n\n[softmax]\n");
    sh_train_opts o;
    opts_for(&o, cfg);
    sh_trainer *t = NULL;
    CHECK_RC(sh_trainer_create(&o, &t), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(), "8x8") != NULL &&
              strstr(shoal_last_error_message(), "100") != NULL,
          "message: %s", shoal_last_error_message());
    CHECK(t == NULL, "trainer returned on error");
}

static void missing_dataset_is_refused(void)
{
    sh_train_opts o;
    opts_for(&o, mlp_cfg);
    o.data_dir = "/nonexistent/shoal-data";
    sh_trainer *t = NULL;
    shoal_result rc = sh_trainer_create(&o, &t);
    CHECK(rc != SHOAL_OK && t == NULL, "rc %s", shoal_result_name(rc));
    CHECK(strstr(shoal_last_error_message(), "/nonexistent/shoal-data") != NULL, "message: %s",
          shoal_last_error_message());
}

int main(void)
{
    check_begin("test_trainer", 120);
    if (tiny_make_dir(dir, sizeof dir)) {
        CHECK(0, "could not write the tiny dataset");
        return check_end();
    }
    snprintf(mlp_cfg, sizeof mlp_cfg, "%s/mlp.cfg", dir);
    RUN(tiny_mlp_learns_the_bands);
    RUN(loss_falls_during_training);
    RUN(same_seed_and_threads_repeat_bitwise);
    RUN(two_threads_repeat_bitwise_too);
    RUN(max_steps_and_epochs_plan_the_run);
    RUN(stop_request_saves_after_the_current_step);
    RUN(save_request_saves_and_continues);
    RUN(diverging_loss_stops_with_a_clear_error);
    RUN(dataset_that_does_not_fit_is_refused);
    RUN(missing_dataset_is_refused);
    tiny_remove_dir(dir);
    return check_end();
}
