/* test_darknet_keys.c — proves that every key Darknet's parser (parser.c of the Debian
 * package's Darknet, 2018-09-14) reads in a section shoal supports is accepted at Darknet's
 * default value: the [net] keys, each layer's own keys and the keys parse_network_cfg reads
 * for every layer (truth, onlyforward, learning_rate, ...), one at a time in a net that builds;
 * that those shoal does not use are a warning once per file, not an error; and that the
 * values shoal cannot honour are refused naming the key (binary, xnor, noloss, shortcut,
 * alpha). The sections' own parsers live in src/nn/layer_*.c and net_config.c; the list of
 * keys shoal ignores in src/nn/cfg.c. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "check.h"
#include "nn/cfg.h"
#include "nn/net.h"

static const char base[] = "[net]\nbatch=2\nchannels=3\nheight=8\nwidth=8\n";

/* Keys of parse_net_options that a cfg could give besides the input shape (policy-specific
 * keys come with their policy), and writing.cfg's seen=. */
static const char *const net_keys[] = {
    "learning_rate=0.001", "momentum=0.9", "decay=0.0001", "subdivisions=1", "time_steps=1", "notruth=0",
    "random=0", "adam=0", "inputs=192", "max_crop=16", "min_crop=8", "max_ratio=2", "min_ratio=1", "center=0",
    "clip=0", "angle=0", "aspect=1", "saturation=1", "exposure=1", "hue=0", "policy=constant", "burn_in=0",
    "power=4", "max_batches=0", "seen=0", "adam=1\nB1=0.9\nB2=0.999\neps=0.0000001",
    "policy=step\nstep=100\nscale=0.5", "policy=steps\nsteps=10,20\nscales=.1,.1", "policy=exp\ngamma=0.9",
    "policy=sigmoid\ngamma=0.9\nstep=10"};

/* Every layer's keys at their defaults: parse_network_cfg's own, for any section. */
static const char *const layer_keys[] = {"truth=0", "onlyforward=0", "stopbackward=0", "dontsave=0", "dontload=0",
                                          "numload=0", "dontloadscales=0", "learning_rate=1", "smooth=0"};

typedef struct {
    const char *section, *before, *keys[16];
} section_keys;

static const section_keys sections[] = {
    {"convolutional", "", {"filters=2", "size=1", "stride=1", "pad=0", "padding=0", "groups=1", "activation=logistic",
                           "batch_normalize=0", "binary=0", "xnor=0", "flipped=0", "dot=0"}},
    {"deconvolutional", "", {"filters=2", "size=1", "stride=1", "activation=logistic", "batch_normalize=0", "pad=0",
                             "padding=0"}},
    {"local", "", {"filters=2", "size=1", "stride=1", "pad=0", "activation=logistic"}},
    {"connected", "", {"output=4", "activation=logistic", "batch_normalize=0"}},
    {"softmax", "[connected]\noutput=4\n", {"groups=1", "temperature=1", "spatial=0", "noloss=0"}},
    {"cost", "[connected]\noutput=4\n[softmax]\n", {"type=sse", "scale=1", "ratio=0", "noobj=1", "thresh=0"}},
    {"cost", "[connected]\noutput=4\n", {"type=smooth", "scale=1", "ratio=0", "noobj=1", "thresh=0"}},
    {"crop", "", {"crop_height=6", "crop_width=6", "flip=0", "angle=0", "saturation=1", "exposure=1", "noadjust=0",
                  "shift=0"}},
    {"reorg", "[convolutional]\nfilters=4\n", {"stride=2", "reverse=0", "flatten=0", "extra=0"}},
    {"maxpool", "", {"stride=2", "size=2", "padding=1"}},
    {"avgpool", "", {NULL}},
    {"dropout", "", {"probability=0.5"}},
    {"shortcut", "[convolutional]\nfilters=3\n[convolutional]\nfilters=3\n", {"from=-2", "activation=linear",
                                                                                 "alpha=1", "beta=1"}},
    {"route", "[convolutional]\nfilters=3\n", {"layers=-1"}},
    {"upsample", "", {"stride=2", "scale=1"}},
    {"rnn", "", {"output=4", "activation=logistic", "batch_normalize=0", "shortcut=0"}},
    {"gru", "", {"output=4", "batch_normalize=0", "form=darknet\ntanh=0"}},
    {"lstm", "", {"output=4", "batch_normalize=0"}},
    {"crnn", "", {"output_filters=2", "hidden_filters=2", "activation=logistic", "batch_normalize=0", "shortcut=0"}},
    {"normalization", "", {"alpha=0.0001", "beta=0.75", "kappa=1", "size=5"}},
};

static int builds(const char *text, char *why, size_t why_nbytes)
{
    sh_cfg *cfg = NULL;
    sh_net *n = NULL;
    shoal_result rc = sh_cfg_parse(text, "k.cfg", &cfg);
    if (rc == SHOAL_OK) rc = sh_net_create(cfg, 2, 1, &n);
    snprintf(why, why_nbytes, "%s", rc == SHOAL_OK ? "" : shoal_last_error_message());
    sh_net_destroy(n);
    sh_cfg_destroy(cfg);
    return rc == SHOAL_OK;
}

static void every_darknet_key_of_a_supported_section_is_accepted(void)
{
    char text[2048], why[1024];
    for (size_t i = 0; i < sizeof net_keys / sizeof net_keys[0]; i++) {
        snprintf(text, sizeof text, "[net]\nbatch=2\nchannels=3\nheight=8\nwidth=8\n%s\n[connected]\noutput=2\n",
                 net_keys[i]);
        CHECK(builds(text, why, sizeof why), "[net] %s: %s", net_keys[i], why);
    }
    int tried = 0;
    for (size_t s = 0; s < sizeof sections / sizeof sections[0]; s++) {
        const section_keys *k = &sections[s];
        /* all of the section's keys at once, then each generic key with them */
        size_t len = (size_t)snprintf(text, sizeof text, "%s%s[%s]\n", base, k->before, k->section);
        for (int j = 0; k->keys[j]; j++) len += (size_t)snprintf(text + len, sizeof text - len, "%s\n", k->keys[j]);
        CHECK(builds(text, why, sizeof why), "[%s] with all its keys: %s", k->section, why);
        tried++;
        for (size_t g = 0; g < sizeof layer_keys / sizeof layer_keys[0]; g++) {
            char one[2100];
            snprintf(one, sizeof one, "%s%s\n", text, layer_keys[g]);
            CHECK(builds(one, why, sizeof why), "[%s] %s: %s", k->section, layer_keys[g], why);
        }
    }
    CHECK(tried == (int)(sizeof sections / sizeof sections[0]), "sections tried");
}

static void values_shoal_cannot_honour_are_refused_naming_the_key(void)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"[convolutional]\nbinary=1\n", "[convolutional] binary=1 (binarised weights) is not supported"},
        {"[convolutional]\nxnor=1\n", "[convolutional] xnor=1"},
        {"[connected]\noutput=3\n[softmax]\nnoloss=1\n", "[softmax] noloss=1"},
        {"[rnn]\noutput=3\nshortcut=1\n", "[rnn] shortcut=1"},
        {"[crnn]\noutput=2\nshortcut=1\n", "[crnn] shortcut=1"},
        {"[crnn]\noutput=2\noutput_filters=2\n", "not both spellings"},
        {"[convolutional]\nfilters=3\n[convolutional]\nfilters=3\n[shortcut]\nfrom=-2\nalpha=0.5\n",
         "[shortcut] alpha=0.5 is not supported"},
        {"[reorg]\nstride=2\n", "[reorg] stride=2 needs channels divisible by 4"},
    };
    char text[1024], why[1024];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(text, sizeof text, "%s%s", base, cases[i].text);
        CHECK(!builds(text, why, sizeof why) && strstr(why, cases[i].want), "%s: %s", cases[i].want, why);
    }
}

/* writing.cfg as Debian ships it: seen=0 in [net] is a warning, said once. */
static void writing_cfg_builds_with_one_warning(void)
{
    const char *path = "/usr/share/darknet/cfg/writing.cfg";
    if (access(path, R_OK) != 0) {
        printf("test_darknet_keys: %s missing (Debian's darknet package): skipped\n", path);
        return;
    }
    char log_path[] = "/tmp/shoal_keys_log_XXXXXX";
    int fd = mkstemp(log_path);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    sh_net *n = NULL;
    shoal_result rc = sh_net_load(path, 1, 1, &n);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char log[4096] = {0};
    lseek(fd, 0, SEEK_SET);
    ssize_t got = read(fd, log, sizeof log - 1);
    log[got > 0 ? got : 0] = 0;
    close(fd);
    unlink(log_path);
    CHECK(rc == SHOAL_OK, "writing.cfg: %s", shoal_last_error());
    CHECK(strstr(log, "writing.cfg:10: [net] ignoring Darknet key \"seen\"") && strstr(log, "warn"), "log: %s", log);
    CHECK(n && sh_net_is_regression(n), "writing.cfg ends in a regression [cost]");
    sh_net_destroy(n);
}

int main(void)
{
    check_begin("test_darknet_keys", 60);
    RUN(every_darknet_key_of_a_supported_section_is_accepted);
    RUN(values_shoal_cannot_honour_are_refused_naming_the_key);
    RUN(writing_cfg_builds_with_one_warning);
    return check_end();
}
