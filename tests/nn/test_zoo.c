/* test_zoo.c — proves that shoal builds Darknet's model zoo (the classification models in
 * Debian's darknet package, /usr/share/darknet/cfg) as Darknet does: for each model, Darknet
 * itself prints its layer table (`darknet partial CFG "" /dev/stdout N`, which parses the cfg
 * and writes its weights) and shoal's layers must have the same output shapes, the same
 * convolution BFLOPs (grouped ones included), and the weights Darknet writes must have
 * exactly as many bytes as shoal's .weights file for the model (same parameter count); then
 * one forward runs and gives a probability distribution.
 * Where /usr/bin/darknet is missing, says so in one line and passes. By default a set of
 * models that covers every layer kind runs (well under 30 s); `test_zoo --all` runs them all.
 * darknet9000 (hierarchical softmax) runs forward; training it is refused with file:line.
 * Every cfg there of a kind shoal trains (classifiers, recurrent nets, writing.cfg's
 * regression) runs `shoal time` as shipped (batch 1); the others stop at their detection
 * layer ([region], [yolo], [detection]) naming it. writing, gru and rnn always; --all: all. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "check.h"
#include "lib/run.h"
#include "nn/darknet_weights.h"
#include "nn/layer.h"
#include "nn/net.h"

#define ZOO_DIR "/usr/share/darknet/cfg"
#define DARKNET "/usr/bin/darknet"

static char tmp[256];
static int run_all;

/* conv, max, avg, softmax, reorg (extra), res of equal and different shapes, grouped conv;
 * --all adds route, dropout, connected, crop, ramp, cost, WordTree softmax and nets without
 * softmax (each model costs Darknet a second or more to build and write). */
static const char *const quick[] = {"tiny", "go", "resnet18", "resnext50", "writing"};
static const char *const all[] = {
    "alexnet", "cifar", "cifar.test", "darknet", "darknet19", "darknet19_448", "darknet53",
    "darknet53_448", "darknet9000", "densenet201", "extraction", "extraction.conv", "extraction22k", "go",
    "go.test", "jnet-conv", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
    "resnext50", "resnext101-32x4d", "resnext152-32x4d", "strided", "tiny", "vgg-16",
    "vgg-conv", "writing"};

/* The zoo cfg with batch=1 and subdivisions=1 (Darknet allocates its batch), in tmp. */
static int copy_cfg(const char *model, char *path, size_t path_nbytes)
{
    char cmd[1024], out[64];
    snprintf(path, path_nbytes, "%s/%s.cfg", tmp, model);
    snprintf(cmd, sizeof cmd, "sed 's/^batch=.*/batch=1/;s/^subdivisions=.*/subdivisions=1/' "
             "%s/%s.cfg > %s", ZOO_DIR, model, path);
    return sh_test_run(cmd, out, sizeof out);
}

typedef struct {
    int have_shape, w, h, c; /* printed as W x H x C after "->" */
    long count;              /* the only size printed (connected, avg, softmax, ...), or -1 */
    char bflops[16];         /* conv: "%5.3f" of its BFLOPs, else "" */
    int is_route;
} dn_row;

/* One row of Darknet's layer table: "%5d " then the layer's own line. */
static void parse_row(const char *text, dn_row *r)
{
    memset(r, 0, sizeof *r);
    r->count = -1;
    r->is_route = strncmp(text, "route", 5) == 0;
    const char *arrow = strstr(text, "->"), *last;
    for (last = arrow; last && (last = strstr(last + 2, "->")) != NULL;) arrow = last;
    const char *p = arrow ? arrow + 2 : NULL;
    if (p && sscanf(p, " %d x %d x %d", &r->w, &r->h, &r->c) == 3) {
        r->have_shape = 1;
        if (strncmp(text, "Crop", 4) == 0) { /* Crop prints crop_height x crop_width x c */
            int t = r->w;
            r->w = r->h;
            r->h = t;
        }
    } else if (p) {
        r->count = strtol(p, NULL, 10);
    } else if (!r->is_route) { /* softmax, cost: the last number on the line */
        const char *q = text + strlen(text);
        while (q > text && (q[-1] < '0' || q[-1] > '9')) q--;
        while (q > text && q[-1] >= '0' && q[-1] <= '9') q--;
        /* none: Darknet printed a note there ("type: Using default 'sse'") */
        r->count = *q >= '0' && *q <= '9' ? strtol(q, NULL, 10) : -1;
    }
    const char *bf = strstr(text, "BFLOPs");
    if (bf && strncmp(text, "conv", 4) == 0) {
        const char *s = bf;
        while (s > text && s[-1] == ' ') s--;
        const char *e = s;
        while (s > text && s[-1] != ' ') s--;
        snprintf(r->bflops, sizeof r->bflops, "%.*s", (int)(e - s), s);
    }
}

static void model_matches_darknet(const char *model)
{
    char cfg[512], cmd[2048], out[256], table[600];
    if (copy_cfg(model, cfg, sizeof cfg) != 0) {
        CHECK(0, "%s: could not copy the cfg", model);
        return;
    }
    snprintf(table, sizeof table, "%s/%s.table", tmp, model);
    snprintf(cmd, sizeof cmd, "%s partial %s '' /dev/stdout 1000000 2>%s | wc -c", DARKNET, cfg,
             table);
    int rc = sh_test_run(cmd, out, sizeof out);
    long long dn_bytes = atoll(out);
    CHECK(rc == 0 && dn_bytes > 16, "%s: darknet partial: exit %d, %s", model, rc, out);
    sh_net *net = NULL;
    shoal_result r = sh_net_load(cfg, 1, 1, &net);
    CHECK(r == SHOAL_OK, "%s: shoal: %s", model, shoal_last_error());
    if (r != SHOAL_OK) return;
    CHECK((long long)sh_darknet_weights_nbytes(net) == dn_bytes,
          "%s: shoal's .weights would be %llu bytes, Darknet wrote %lld (parameter counts "
          "differ)", model, (unsigned long long)sh_darknet_weights_nbytes(net), dn_bytes);
    FILE *f = fopen(table, "r");
    CHECK(f != NULL, "%s: no table", model);
    int rows = 0, bad = 0;
    char line[1024];
    while (f && fgets(line, sizeof line, f)) {
        int idx, at = 0;
        if (sscanf(line, " %d %n", &idx, &at) != 1 || at == 0) continue;
        line[strcspn(line, "\n")] = 0;
        if (idx != rows || idx >= sh_net_nlayers(net)) {
            CHECK(0, "%s: Darknet's row %d (\"%s\") but shoal has %d layers", model, idx, line,
                  sh_net_nlayers(net));
            bad++;
            break;
        }
        rows++;
        dn_row d;
        parse_row(line + at, &d);
        int c, h, w;
        sh_net_layer_shape(net, idx, &c, &h, &w);
        long count = (long)c * h * w;
        int ok = d.have_shape ? (d.w == w && d.h == h && d.c == c)
                              : (d.count < 0 || d.count == count);
        if (ok && d.bflops[0]) {
            char mine[16];
            snprintf(mine, sizeof mine, "%5.3f", 2.0 * sh_net_layer_flops(net, idx) / 1e9);
            const char *m = mine;
            while (*m == ' ') m++;
            ok = strcmp(m, d.bflops) == 0;
        }
        if (!ok && bad++ < 3)
            CHECK(0, "%s: layer %d (%s): shoal %dx%dx%d (C x H x W), %.3f BFLOPs; Darknet: %s",
                  model, idx, sh_net_layer_name(net, idx), c, h, w,
                  2.0 * sh_net_layer_flops(net, idx) / 1e9, line + at);
    }
    if (f) fclose(f);
    CHECK(rows == sh_net_nlayers(net), "%s: Darknet printed %d layers, shoal has %d", model,
          rows, sh_net_nlayers(net));
    CHECK(bad == 0, "%s: %d layers differ from Darknet's table", model, bad);
    /* and it runs: one forward at batch 1, a probability distribution out */
    size_t nin = (size_t)sh_net_input_count(net);
    float *x = malloc(nin * sizeof *x);
    for (size_t i = 0; x && i < nin; i++) x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
    sh_net_set_threads(net, 2);
    CHECK(x && sh_net_forward(net, x, 1, 0) == SHOAL_OK, "%s: forward: %s", model, shoal_last_error());
    double sum = 0;
    for (int k = 0; x && k < sh_net_nclasses(net); k++) sum += sh_net_output(net)[k];
    int tree = 0; /* a WordTree softmax sums to 1 in each group */
    for (int i = 0; i < sh_net_nlayers(net); i++) tree |= sh_net_layer(net, i)->tree_groups > 0;
    CHECK(!sh_net_has_softmax(net) || tree || fabs(sum - 1.0) < 1e-3, "%s: outputs sum to %g", model, sum);
    free(x);
    if (getenv("CHECK_VERBOSE"))
        fprintf(stderr, "  %s: %d layers, %lld weight bytes as Darknet\n", model, rows, dn_bytes);
    sh_net_destroy(net);
}

static void zoo_models_have_darknets_shapes_and_parameter_counts(void)
{
    const char *const *list = run_all ? all : quick;
    size_t n = run_all ? sizeof all / sizeof all[0] : sizeof quick / sizeof quick[0];
    for (size_t i = 0; i < n; i++) model_matches_darknet(list[i]);
}

/* darknet9000's softmax over a WordTree (data/9k.tree) builds and runs forward; training
 * it is refused at its line, naming the key. */
static void hierarchical_softmax_runs_but_training_is_refused(void)
{
    sh_net *net = NULL;
    CHECK_OK(sh_net_load(ZOO_DIR "/darknet9000.cfg", 1, 1, &net));
    if (!net) return;
    CHECK(sh_net_nclasses(net) == 9418, "9k classes: %d", sh_net_nclasses(net));
    CHECK_RC(sh_net_check_trainable(net), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "darknet9000.cfg:199: [softmax] tree=") != NULL, "error: %s",
          shoal_last_error());
    sh_net_destroy(net);
}

/* `shoal time CFG --batch 1` on a zoo file as shipped: 0 and its timing line, or, for a
 * detection model, exit 1 naming the detection section. */
static void zoo_file_runs_shoal_time(const char *path)
{
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "%s time %s --batch 1 --iterations 1 --threads 2 2>&1", sh_test_shoal_bin(), path);
    int rc = sh_test_run(cmd, out, sizeof out);
    int detection = strstr(out, "[region] is a Darknet layer") || strstr(out, "[yolo] is a Darknet layer") ||
                    strstr(out, "[detection] is a Darknet layer");
    const char *name = strrchr(path, '/') + 1;
    /* yolo9000 and yolov3-openimages set batch twice in [net]; they are detection models too */
    int twice = strstr(out, "duplicate key \"batch\"") && strncmp(name, "yolo", 4) == 0;
    CHECK((rc == 0 && strstr(out, "Average Forward-Backward")) || (rc == 1 && (detection || twice)),
          "%s: exit %d: %s", path, rc, out);
    if (getenv("CHECK_VERBOSE")) fprintf(stderr, "  shoal time %s: %s\n", name, rc == 0 ? "ran" : "detection: refused");
}

static void trainable_zoo_files_run_shoal_time(void)
{
    static const char *const always[] = {"writing", "gru", "rnn"};
    char path[512];
    if (!run_all) {
        for (size_t i = 0; i < sizeof always / sizeof always[0]; i++) {
            snprintf(path, sizeof path, "%s/%s.cfg", ZOO_DIR, always[i]);
            zoo_file_runs_shoal_time(path);
        }
        return;
    }
    char cmd[256], list[8192];
    snprintf(cmd, sizeof cmd, "ls %s/*.cfg", ZOO_DIR);
    CHECK(sh_test_run(cmd, list, sizeof list) == 0, "ls %s", ZOO_DIR);
    int n = 0;
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n"), n++) zoo_file_runs_shoal_time(line);
    CHECK(n >= 40, "%d zoo files", n);
}

int main(int argc, char **argv)
{
    run_all = argc > 1 && strcmp(argv[1], "--all") == 0;
    check_begin("test_zoo", run_all ? 1800 : 120);
    if (access(DARKNET, X_OK) != 0 || access(ZOO_DIR "/tiny.cfg", R_OK) != 0) {
        printf("test_zoo: %s or %s missing (Debian's darknet package): skipped\n", DARKNET,
               ZOO_DIR);
        return check_end();
    }
    snprintf(tmp, sizeof tmp, "/tmp/shoal-zoo-XXXXXX");
    if (!mkdtemp(tmp)) {
        CHECK(0, "mkdtemp failed");
        return check_end();
    }
    RUN(zoo_models_have_darknets_shapes_and_parameter_counts);
    RUN(hierarchical_softmax_runs_but_training_is_refused);
    RUN(trainable_zoo_files_run_shoal_time);
    char cmd[512], out[64];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    (void)sh_test_run(cmd, out, sizeof out);
    return check_end();
}
