/* test_net_config.c — proves src/nn/net_config.c: the [net] section's keys and Darknet's
 * defaults, each learning-rate policy and optimizer, inputs= for vector models, the picture
 * keys (crops, colour, mean/std) and their defaults, the errors for bad or contradictory
 * values, the batch read from a file alone; and that every example model builds into a
 * network with the parameter count it states. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "check.h"
#include "nn/cfg.h"
#include "nn/net.h"

#define CHECK_HAS(hay, needle) \
    CHECK(strstr((hay), (needle)) != NULL, "\"%s\" not in: %s", (needle), (hay))

/* Parse text's [net]; returns the result, fills *out on success. */
static shoal_result net_of(const char *text, sh_net_config *out)
{
    sh_cfg *c = NULL;
    shoal_result rc = sh_cfg_parse(text, "n.cfg", &c);
    if (rc == SHOAL_OK) rc = sh_net_config_parse(sh_cfg_section_at(c, 0), out);
    sh_cfg_destroy(c);
    return rc;
}

static void count_defaulted(void *ctx, const char *sec, int line, const char *key)
{
    (void)sec, (void)line, (void)key;
    (*(int *)ctx)++;
}

static void missing_keys_get_darknet_defaults(void)
{
    sh_cfg *cfg = NULL;
    CHECK_OK(sh_cfg_parse("[net]\nwidth=28\nheight=28\nchannels=1\n", "n.cfg", &cfg));
    if (!cfg) return;
    sh_net_config c;
    CHECK_OK(sh_net_config_parse(sh_cfg_section_at(cfg, 0), &c));
    CHECK(c.batch == 1 && c.subdivisions == 1, "batch %d subdivisions %d", c.batch, c.subdivisions);
    CHECK(c.width == 28 && c.height == 28 && c.channels == 1, "shape");
    CHECK_NEAR(c.lr.base_lr, 0.001f, 0);
    CHECK_NEAR(c.optim.momentum, 0.9f, 0);
    CHECK_NEAR(c.optim.decay, 0.0001f, 0);
    CHECK(c.lr.kind == SH_LR_CONSTANT && c.optim.kind == SH_OPTIM_SGD, "constant, sgd");
    CHECK_NEAR(c.lr.power, 4, 0);
    CHECK(c.lr.burn_in == 0 && c.max_batches == 0 && c.lr.max_batches == 0, "burn_in, max");
    int n = 0;
    sh_cfg_each_defaulted(cfg, count_defaulted, &n);
    /* batch subdivisions time_steps learning_rate policy burn_in power max_batches momentum
     * decay adam optimizer; the pictures' min_crop max_crop test_resize flip aspect angle
     * hue saturation exposure */
    CHECK(n == 21, "defaulted keys: %d", n);
    CHECK(c.time_steps == 1, "time_steps %d", c.time_steps);
    sh_cfg_destroy(cfg);
}

static void reads_every_key_it_knows(void)
{
    sh_net_config c;
    CHECK_OK(net_of("[network]\nbatch=128\nsubdivisions=4\nwidth=32\nheight=24\nchannels=3\n"
                    "learning_rate=0.1\nmomentum=0.95\ndecay=0.0005\npolicy=step\nstep=100\n"
                    "scale=0.5\nburn_in=50\npower=2\nmax_batches=1000\n",
                    &c));
    CHECK(c.batch == 128 && c.subdivisions == 4, "batch is images per optimizer step");
    CHECK(c.width == 32 && c.height == 24 && c.channels == 3, "shape");
    CHECK(c.lr.kind == SH_LR_STEP && c.lr.step == 100 && c.lr.burn_in == 50, "step policy");
    CHECK_NEAR(c.lr.scale, 0.5f, 0);
    CHECK_NEAR(c.lr.power, 2, 0);
    CHECK_NEAR(c.lr.base_lr, 0.1f, 0);
    CHECK_NEAR(c.optim.momentum, 0.95f, 0);
    CHECK_NEAR(c.optim.decay, 0.0005f, 0);
    CHECK(c.max_batches == 1000 && c.lr.max_batches == 1000, "max_batches");
    CHECK_RC(net_of("[net]\nbatch=10\nsubdivisions=4\ninputs=3\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "n.cfg:3: [net] batch=10 is not a multiple of subdivisions=4");
}

static void inputs_alone_makes_a_vector_input(void)
{
    sh_net_config c;
    CHECK_OK(net_of("[net]\ninputs=256\n", &c));
    CHECK(c.channels == 256 && c.width == 1 && c.height == 1, "c %d h %d w %d", c.channels,
          c.height, c.width);
    CHECK_OK(net_of("[net]\ninputs=12\nwidth=2\nheight=2\nchannels=3\n", &c));
    CHECK_RC(net_of("[net]\ninputs=13\nwidth=2\nheight=2\nchannels=3\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "n.cfg:2: [net] inputs=13 but width*height*channels = 12");
    CHECK_RC(net_of("[net]\nbatch=1\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "set all three");
    CHECK_RC(net_of("[net]\nwidth=28\nheight=28\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "channels=0");
}

static void every_policy_reads_its_own_keys(void)
{
    sh_net_config c;
    CHECK_OK(net_of("[net]\ninputs=1\npolicy=steps\nsteps=-1,100,2000\nscales=.1,10,.1\n", &c));
    CHECK(c.lr.kind == SH_LR_STEPS && c.lr.nsteps == 3 && c.lr.steps[0] == -1 &&
              c.lr.steps[2] == 2000,
          "steps");
    CHECK_NEAR(c.lr.scales[1], 10, 0);
    CHECK_OK(net_of("[net]\ninputs=1\npolicy=exp\ngamma=0.99\n", &c));
    CHECK(c.lr.kind == SH_LR_EXP, "exp");
    CHECK_NEAR(c.lr.gamma, 0.99f, 0);
    CHECK_OK(net_of("[net]\ninputs=1\npolicy=poly\npower=1\nmax_batches=500\n", &c));
    CHECK(c.lr.kind == SH_LR_POLY && c.lr.max_batches == 500, "poly");
    CHECK_OK(net_of("[net]\ninputs=1\npolicy=inv\ngamma=0.0001\npower=0.75\n", &c));
    CHECK(c.lr.kind == SH_LR_INV, "inv");
    CHECK_NEAR(c.lr.power, 0.75f, 0);
    CHECK_OK(net_of("[net]\ninputs=1\npolicy=sigmoid\ngamma=0.1\nstep=300\n", &c));
    CHECK(c.lr.kind == SH_LR_SIGMOID && c.lr.step == 300, "sigmoid");
    CHECK_OK(net_of("[net]\ninputs=1\npolicy=step\n", &c));
    CHECK(c.lr.step == 1, "Darknet's step default is 1");
    CHECK_NEAR(c.lr.scale, 1, 0);
    CHECK_OK(net_of("[net]\ninputs=1\npolicy=exp\n", &c));
    CHECK_NEAR(c.lr.gamma, 1, 0);
}

static void bad_policies_are_refused_with_the_list(void)
{
    sh_net_config c;
    CHECK_RC(net_of("[net]\ninputs=1\npolicy=cosine\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(),
              "n.cfg:3: [net] unknown policy \"cosine\"; use one of constant, step, steps, exp, "
              "poly, inv, sigmoid");
    CHECK_RC(net_of("[net]\ninputs=1\npolicy=random\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "policy=random is not supported");
    CHECK_RC(net_of("[net]\ninputs=1\npolicy=steps\nsteps=10,20\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "needs steps= and scales=");
    CHECK_RC(net_of("[net]\ninputs=1\npolicy=steps\nsteps=10,20\nscales=.1\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "n.cfg:5: [net] 2 steps but 1 scales");
    CHECK_RC(net_of("[net]\ninputs=1\npolicy=steps\nsteps=20,10\nscales=.1,.1\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "must not decrease");
    CHECK_RC(net_of("[net]\ninputs=1\npolicy=poly\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "max_batches > 0");
    CHECK_RC(net_of("[net]\ninputs=1\npolicy=steps\nsteps=10\nscales=.1\nstep=5\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "n.cfg:6: [net] step is not used by policy=steps");
    CHECK_RC(net_of("[net]\ninputs=1\ngamma=0.5\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "gamma is not used by policy=constant");
    CHECK_RC(net_of("[net]\ninputs=1\nlearning_rate=-1\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "learning_rate=-1: out of range");
}

static void optimizers_from_adam_flag_or_optimizer_key(void)
{
    sh_net_config c;
    CHECK_OK(net_of("[net]\ninputs=1\nadam=1\n", &c));
    CHECK(c.optim.kind == SH_OPTIM_ADAM, "adam=1");
    CHECK_NEAR(c.optim.beta1, 0.9f, 0);
    CHECK_NEAR(c.optim.beta2, 0.999f, 0);
    CHECK_NEAR(c.optim.eps, 1e-7f, 0);
    CHECK_OK(net_of("[net]\ninputs=1\noptimizer=adam\nB1=0.8\nB2=0.99\neps=1e-8\n", &c));
    CHECK(c.optim.kind == SH_OPTIM_ADAM, "optimizer=adam");
    CHECK_NEAR(c.optim.beta1, 0.8f, 0);
    CHECK_NEAR(c.optim.beta2, 0.99f, 0);
    CHECK_NEAR(c.optim.eps, 1e-8f, 0);
    CHECK_OK(net_of("[net]\ninputs=1\nadam=1\noptimizer=adam\n", &c));
    CHECK_OK(net_of("[net]\ninputs=1\noptimizer=adagrad\n", &c));
    CHECK(c.optim.kind == SH_OPTIM_ADAGRAD, "adagrad");
    CHECK_NEAR(c.optim.eps, 1e-10f, 0);
    CHECK_OK(net_of("[net]\ninputs=1\noptimizer=sgd\nmomentum=0\n", &c));
    CHECK(c.optim.kind == SH_OPTIM_SGD && c.optim.momentum == 0, "sgd");
    CHECK_RC(net_of("[net]\ninputs=1\nadam=1\noptimizer=sgd\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "adam=1 contradicts optimizer=sgd");
    CHECK_RC(net_of("[net]\ninputs=1\noptimizer=rmsprop\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "unknown optimizer \"rmsprop\"; use sgd, adagrad or adam");
    CHECK_RC(net_of("[net]\ninputs=1\nB1=0.5\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "B1 is not used by optimizer=sgd");
    CHECK_RC(net_of("[net]\ninputs=1\nmomentum=1.2\n", &c), SHOAL_ERR_FORMAT);
}

static void unknown_keys_fail_and_augmentation_keys_pass(void)
{
    sh_net_config c;
    CHECK_RC(net_of("[net]\ninputs=1\nlearning_rat=0.1\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(),
              "n.cfg:3: [net] unknown key \"learning_rat\"; did you mean \"learning_rate\"?");
    CHECK_RC(net_of("[net]\ninputs=1\nmomentun=0.1\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "did you mean \"momentum\"?");
    CHECK_RC(net_of("[net]\ninputs=1\nbacth=2\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "did you mean \"batch\"?");
    CHECK_OK(net_of("[net]\ninputs=1\nhue=.1\nsaturation=1.5\nexposure=1.5\nangle=7\naspect=.75\n"
                    "jitter=.3\nmax_crop=448\nmin_crop=128\nflip=1\nmosaic=1\n",
                    &c));
}

static void picture_keys_resolve_their_defaults_and_refuse_bad_values(void)
{
    sh_net_config c;
    CHECK_OK(net_of("[net]\nwidth=32\nheight=24\nchannels=3\n", &c));
    const sh_net_pictures *p = &c.pictures;
    CHECK(p->min_crop == 32 && p->max_crop == 32 && p->test_resize == 32 && p->flip == 1, "defaults %d %d %d %d",
          p->min_crop, p->max_crop, p->test_resize, p->flip);
    CHECK(p->aspect == 1 && p->angle == 0 && p->hue == 0 && p->saturation == 1 && p->exposure == 1, "colour");
    CHECK(p->mean[2] == 0 && p->std[2] == 1, "mean %g std %g", (double)p->mean[2], (double)p->std[2]);
    CHECK_OK(net_of("[net]\nwidth=224\nheight=224\nchannels=3\nmin_crop=256\ntest_resize=256\nflip=0\n"
                    "mean=0.485,0.456,0.406\nstd=0.229,0.224,0.225\n", &c));
    CHECK(p->min_crop == 256 && p->max_crop == 256 && p->test_resize == 256 && p->flip == 0, "set %d %d %d %d",
          p->min_crop, p->max_crop, p->test_resize, p->flip);
    CHECK_NEAR(p->mean[1], 0.456f, 0);
    CHECK_NEAR(p->std[2], 0.225f, 0);
    CHECK_OK(net_of("[net]\nwidth=28\nheight=28\nchannels=1\nmean=0.5\nstd=0.25\nmax_crop=40\n", &c));
    CHECK(p->min_crop == 28 && p->max_crop == 40, "max_crop alone: %d..%d", p->min_crop, p->max_crop);
    CHECK_NEAR(p->mean[0], 0.5f, 0);
    CHECK_NEAR(p->std[0], 0.25f, 0);
    CHECK_RC(net_of("[net]\nwidth=32\nheight=32\nchannels=3\nmin_crop=64\nmax_crop=48\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "n.cfg:6:");
    CHECK_RC(net_of("[net]\nwidth=32\nheight=32\nchannels=3\nmean=0.1,0.2\n", &c), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "one per channel (3)");
    CHECK_RC(net_of("[net]\nwidth=32\nheight=32\nchannels=3\nstd=0.2,0,0.2\n", &c), SHOAL_ERR_FORMAT);
    CHECK_RC(net_of("[net]\nwidth=32\nheight=32\nchannels=3\nflip=2\n", &c), SHOAL_ERR_FORMAT);
}

/* The example models' [net] sections, and Darknet's own files when installed. */
static void example_and_darknet_net_sections_parse(void)
{
    static const char *examples[] = {"examples/lenet.cfg", "examples/mlp.cfg",
                                     "examples/mlp-wide.cfg", "examples/resnet-small.cfg",
                                     "examples/resnet18.cfg"};
    for (size_t i = 0; i < sizeof examples / sizeof examples[0]; i++) {
        sh_cfg *cfg = NULL;
        sh_net_config c;
        CHECK_OK(sh_cfg_load(examples[i], &cfg));
        if (!cfg) continue;
        CHECK_OK(sh_net_config_parse(sh_cfg_section_at(cfg, 0), &c));
        sh_cfg_destroy(cfg);
    }
    sh_cfg *cfg = NULL;
    sh_net_config c;
    CHECK_OK(sh_cfg_load("examples/lenet.cfg", &cfg));
    if (cfg) {
        CHECK_OK(sh_net_config_parse(sh_cfg_section_at(cfg, 0), &c));
        CHECK(c.batch == 64 && c.width == 28 && c.height == 28 && c.channels == 1, "lenet input");
        CHECK_NEAR(c.lr.base_lr, 0.01f, 0);
        CHECK_NEAR(c.optim.momentum, 0.9f, 0);
        CHECK_NEAR(c.optim.decay, 0.0005f, 0);
        CHECK(c.max_batches == 4685, "5 epochs of 937 steps");
        sh_cfg_destroy(cfg);
    }
    cfg = NULL;
    if (sh_cfg_load("/usr/share/darknet/cfg/resnet18.cfg", &cfg) == SHOAL_OK) {
        CHECK_OK(sh_net_config_parse(sh_cfg_section_at(cfg, 0), &c));
        CHECK(c.lr.kind == SH_LR_POLY && c.lr.burn_in == 1000 && c.max_batches == 800000,
              "darknet resnet18 [net]");
        sh_cfg_destroy(cfg);
    }
}

/* Each example builds into a network (batch 2) with the parameter count its comment states:
 * LeNet 520 + 25,050 + 400,500 + 5,010; ResNet-18 is torchvision's 11,689,512. */
static void example_models_build_with_expected_parameter_counts(void)
{
    static const struct {
        const char *path;
        size_t nparams;
        int nclasses;
    } models[] = {
        {"examples/lenet.cfg", 431080, 10},
        {"examples/mlp.cfg", 535818, 10},
        {"examples/mlp-wide.cfg", 10304010, 10},
        {"examples/resnet-small.cfg", 121274, 10},
        {"examples/resnet18.cfg", 11689512, 1000},
    };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        sh_net *n = NULL;
        CHECK_OK(sh_net_load(models[i].path, 2, 1, &n));
        if (!n) continue;
        CHECK(sh_net_batch(n) == 2, "%s: batch %d", models[i].path, sh_net_batch(n));
        CHECK(sh_net_nparams(n) == models[i].nparams, "%s: %zu parameters, want %zu",
              models[i].path, sh_net_nparams(n), models[i].nparams);
        CHECK(sh_net_nclasses(n) == models[i].nclasses, "%s: %d classes", models[i].path,
              sh_net_nclasses(n));
        if (models[i].nclasses == 1000) {
            /* the last stage ends at 512 x 7 x 7, as in the paper */
            int c = 0, h = 0, w = 0, at = -1;
            for (int l = 0; l < sh_net_nlayers(n); l++)
                if (strncmp(sh_net_layer_name(n, l), "avgpool", 7) == 0) at = l - 1;
            if (at >= 0) sh_net_layer_shape(n, at, &c, &h, &w);
            CHECK(c == 512 && h == 7 && w == 7, "resnet18 before avgpool: %dx%dx%d", c, h, w);
        }
        sh_net_destroy(n);
    }
}

/* The README's example error, end to end through a layer's parser. */
static void misspelt_layer_key_fails_with_did_you_mean(void)
{
    sh_cfg *cfg = NULL;
    CHECK_OK(sh_cfg_parse("[net]\nbatch=2\nwidth=8\nheight=8\nchannels=1\n\n"
                          "[convolutional]\nfilter=4\nsize=3\nactivation=relu\n",
                          "train.cfg", &cfg));
    if (!cfg) return;
    sh_net *n = NULL;
    CHECK_RC(sh_net_create(cfg, 0, 1, &n), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(),
              "train.cfg:8: [convolutional] unknown key \"filter\"; did you mean \"filters\"?");
    CHECK(n == NULL, "no net on error");
    sh_cfg_destroy(cfg);
}

/* The [net] batch from a file, its layers never built (a broken layer is no error here). */
static void batch_is_read_from_the_file_alone(void)
{
    char path[] = "/tmp/test_net_config_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "temp file");
    if (fd < 0) return;
    FILE *f = fdopen(fd, "w");
    fputs("[net]\nbatch=24\nwidth=8\nheight=8\nchannels=1\n\n[convolutional]\nfilter=4\n", f);
    fclose(f);
    int batch = -1;
    CHECK_OK(sh_net_cfg_batch(path, &batch));
    CHECK(batch == 24, "batch %d", batch);
    f = fopen(path, "w");
    fputs("[convolutional]\nfilters=4\n", f);
    fclose(f);
    CHECK_RC(sh_net_cfg_batch(path, &batch), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "must start with [net]");
    f = fopen(path, "w");
    fputs("[net]\nbatch=2\nwidth=8\nheight=8\nchannels=1\nbtach=3\n", f);
    fclose(f);
    CHECK_RC(sh_net_cfg_batch(path, &batch), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "btach");
    remove(path);
    CHECK(sh_net_cfg_batch(path, &batch) != SHOAL_OK && batch == 0, "a missing file is an error");
}

int main(void)
{
    check_begin("test_net_config", 20);
    RUN(batch_is_read_from_the_file_alone);
    RUN(missing_keys_get_darknet_defaults);
    RUN(reads_every_key_it_knows);
    RUN(inputs_alone_makes_a_vector_input);
    RUN(every_policy_reads_its_own_keys);
    RUN(bad_policies_are_refused_with_the_list);
    RUN(optimizers_from_adam_flag_or_optimizer_key);
    RUN(unknown_keys_fail_and_augmentation_keys_pass);
    RUN(picture_keys_resolve_their_defaults_and_refuse_bad_values);
    RUN(example_and_darknet_net_sections_parse);
    RUN(example_models_build_with_expected_parameter_counts);
    RUN(misspelt_layer_key_fails_with_did_you_mean);
    return check_end();
}
