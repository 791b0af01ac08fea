/* cmd_generate.c — `shoal generate CFG --weights FILE`: text sampled one byte at a time from a
 * trained character-level net, as `darknet rnn generate`: the seed text is fed first (its
 * bytes printed as they are), then each sampled byte is printed and fed back. `--sampler
 * darknet` draws as `darknet rnn generate -srand N` does: glibc's rand() (base/glibc_rand.h,
 * so any libc gives it) seeded with N and advanced past the draws Darknet spends building the net,
 * its temperature softmax, its 0.0001 cut-off and its cumulative subtraction.
 * Not here: the layers and their carried state (src/nn, through shoal/net.h), parsing (flags.c).
 * Proved by tests/cli/test_train_text.c. */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/glibc_rand.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "shoal/net.h"

#define NBYTES 256 /* one-hot over bytes, as darknet rnn */

static const char usage_text[] =
    "usage: shoal generate CFG --weights FILE [options]\n"
    "\n"
    "Sample text from a character-level model trained by shoal train CFG --data FILE.txt\n"
    "(256 one-hot inputs, 256 outputs; examples/char-lstm.cfg): the text of --prime is fed one\n"
    "byte at a time, then each byte drawn from the net's output is printed and fed back, the\n"
    "recurrent state carried from byte to byte. --sample-seed seeds the draws.\n";

/* A byte drawn from p (NBYTES probabilities) sharpened by temperature: p^(1/T), renormalised,
 * computed as exp((log p - log max p) / T) so that a low T cannot underflow every weight. */
static int draw(const float *p, double temperature, sh_rng *rng)
{
    double w[NBYTES], sum = 0, top = 0;
    for (int i = 0; i < NBYTES; i++)
        if (p[i] > top) top = p[i];
    if (!(top > 0)) return 0;
    double log_top = log(top);
    for (int i = 0; i < NBYTES; i++) {
        w[i] = p[i] > 0 ? exp((log((double)p[i]) - log_top) / temperature) : 0;
        sum += w[i];
    }
    double u = (double)sh_rng_float(rng) * sum, acc = 0;
    for (int i = 0; i < NBYTES; i++) {
        acc += w[i];
        if (u < acc) return i;
    }
    for (int i = NBYTES - 1; i > 0; i--) /* rounding left u at the end: the last possible byte */
        if (w[i] > 0) return i;
    return 0;
}

/* Darknet's draw (examples/rnn.c test_char_rnn, utils.c sample_array) from the net's
 * probabilities p: its softmax at temperature T in float (log p differs from the logits by a
 * constant), probabilities below 0.0001 set to 0, the rest scaled by 1/sum, then a uniform r
 * = rand()/RAND_MAX in float minus each probability in turn until r <= 0. */
static int draw_darknet(const float *p, float temperature, sh_glibc_rand *g)
{
    float a[NBYTES], largest = -FLT_MAX, sum = 0;
    for (int i = 0; i < NBYTES; i++) {
        a[i] = p[i] > 0 ? logf(p[i]) : -INFINITY;
        if (a[i] > largest) largest = a[i];
    }
    for (int i = 0; i < NBYTES; i++) {
        a[i] = (float)exp(a[i] / temperature - largest / temperature);
        sum += a[i];
    }
    for (int i = 0; i < NBYTES; i++) a[i] /= sum;
    float total = 0;
    for (int i = 0; i < NBYTES; i++) {
        if (a[i] < .0001) a[i] = 0;
        total += a[i];
    }
    float scale = (float)(1. / total);
    for (int i = 0; i < NBYTES; i++) a[i] *= scale;
    float r = (float)sh_glibc_rand_next(g) / (float)SH_GLIBC_RAND_MAX;
    for (int i = 0; i < NBYTES; i++) {
        r -= a[i];
        if (r <= 0) return i;
    }
    return NBYTES - 1;
}

typedef struct {
    const char *cfg, *weights, *seed, *sampler;
    int64_t length, sample_seed;
    int threads, darknet;
    double temperature;
} gen_opts;

/* One stream, one step per forward: each byte sees the state the last one left. */
static shoal_result load_char_net(const gen_opts *o, shoal_net **out)
{
    shoal_net_opts no;
    shoal_net_opts_default(&no);
    no.batch = 1;
    no.time_steps = 1;
    no.threads = o->threads;
    SH_TRY(shoal_net_load(o->cfg, &no, out));
    int c = 0, h = 0, w = 0, k = 0;
    shoal_net_input_shape(*out, NULL, &c, &h, &w);
    shoal_net_output_shape(*out, NULL, &k);
    shoal_result rc = SHOAL_OK;
    if (c * h * w != NBYTES || k != NBYTES)
        rc = SH_FAIL(SHOAL_ERR_INVALID, "%s takes %d inputs and gives %d outputs; generate needs a character model "
                     "with 256 of each (inputs=256 in [net], a last layer of output=256)", o->cfg, c * h * w, k);
    if (rc == SHOAL_OK) rc = shoal_net_load_weights(*out, o->weights);
    if (rc != SHOAL_OK) {
        shoal_net_destroy(*out);
        *out = NULL;
    }
    return rc;
}

/* Darknet's generator: glibc's rand() seeded with N and advanced past the draws Darknet
 * spends building the net. */
static shoal_result darknet_rand(const gen_opts *o, const shoal_net *net, sh_glibc_rand *g)
{
    int64_t draws = shoal_net_darknet_init_draws(net);
    if (draws < 0)
        return SH_FAIL(SHOAL_ERR_INVALID, "--sampler darknet: %s has a layer Darknet builds otherwise (only [rnn], "
                       "[lstm], [gru] form=darknet, [connected] and layers without weights match its random draws); "
                       "use --sampler shoal", o->cfg);
    sh_glibc_rand_seed(g, (uint32_t)o->sample_seed);
    for (int64_t k = 0; k < draws; k++) (void)sh_glibc_rand_next(g);
    return SHOAL_OK;
}

static shoal_result generate(const gen_opts *o)
{
    shoal_net *net = NULL;
    SH_TRY(load_char_net(o, &net));
    shoal_result rc = SHOAL_OK;
    sh_rng rng;
    sh_rng_seed(&rng, (uint64_t)o->sample_seed);
    sh_glibc_rand dn = {{0}, 0};
    if (o->darknet) rc = darknet_rand(o, net, &dn);
    float x[NBYTES];
    /* Darknet feeds byte 0 first when the seed is empty, and prints it */
    size_t nseed = o->darknet && !*o->seed ? 1 : strlen(o->seed);
    int next = 0;
    for (long i = 0; rc == SHOAL_OK && i < (long)nseed + (long)o->length; i++) {
        int byte = i < (long)nseed ? (unsigned char)o->seed[i] : next;
        putchar(byte);
        memset(x, 0, sizeof x);
        x[byte] = 1.0f;
        const float *p = NULL;
        rc = shoal_net_forward(net, x, 1, 0, &p);
        if (rc != SHOAL_OK) break;
        if (!o->darknet)
            next = draw(p, o->temperature, &rng);
        else if (i + 1 >= (long)nseed) /* Darknet draws nothing while it reads the seed */
            next = draw_darknet(p, (float)o->temperature, &dn);
    }
    if (rc == SHOAL_OK) putchar('\n');
    fflush(stdout);
    shoal_net_destroy(net);
    return rc;
}

static int set_cfg(void *dst, const char *arg, const char *cmd)
{
    gen_opts *o = dst;
    if (o->cfg) return sh_cli_usage_error(cmd, "unexpected argument \"%s\"", arg);
    o->cfg = arg;
    return 0;
}

static int set_temperature(void *dst, const sh_flag *f, const char *spelled, const char *v, const char *cmd)
{
    gen_opts *o = dst;
    char *end = NULL;
    o->temperature = strtod(v, &end);
    if (!end || *end || !(o->temperature > 0) || o->temperature > 1e6)
        return sh_cli_usage_error(cmd, "--temperature needs a number above 0 and at most 1e6");
    return 0;
}

#define AT(field) offsetof(gen_opts, field)

static const sh_flag flags[] = {
    {"weights", 0, "FILE", SH_FLAG_STR, AT(weights), 0, 0, "Options",
     "the weights (a checkpoint of the same CFG, or Darknet's FILE.weights; required)", NULL, NULL, NULL},
    {"prime", 0, "TEXT", SH_FLAG_STR, AT(seed), 0, 0, "Options", "text to start from (default: a newline)", NULL,
     NULL, NULL},
    {"seed", 0, "TEXT", SH_FLAG_STR, AT(seed), 0, 0, "Options",
     "the same as --prime, as darknet rnn generate calls it (-seed); the random seed is --sample-seed", NULL, NULL,
     NULL},
    {"length", 0, "N", SH_FLAG_I64, AT(length), 0, 1LL << 40, "Options",
     "bytes to generate after the seed (default 1000)", NULL, NULL, NULL},
    {"temperature", 0, "T", SH_FLAG_CALL, 0, 0, 0, "Options",
     "divide the logits by T: below 1 is safer, above 1 wilder (default 0.7, as darknet)",
     "a number above 0", NULL, set_temperature},
    {"sample-seed", 0, "N", SH_FLAG_I64, AT(sample_seed), 0, INT64_MAX, "Options",
     "seed of the random draws (default 1: the same text every time)", NULL, NULL, NULL},
    {"sampler", 0, "S", SH_FLAG_STR, AT(sampler), 0, 0, "Options",
     "shoal (default) or darknet: draw exactly as darknet rnn generate -srand N does (its rand(), cut-off "
     "and order; --prime then defaults to darknet's two newlines) for the same text from the same .weights "
     "file", "shoal or darknet", NULL, NULL},
    {"threads", 0, "N", SH_FLAG_INT, AT(threads), 1, 1024, "Options", "kernel threads (default 1)", NULL, NULL,
     NULL},
};

static const sh_flag_table table = {
    .cmd = "generate", .usage = usage_text, .flags = flags, .nflags = sizeof flags / sizeof flags[0],
    .style = SH_FLAGS_NEEDS, .positional = set_cfg,
};

int sh_cmd_generate(int argc, char **argv)
{
    gen_opts o = {.sampler = "shoal", .length = 1000, .sample_seed = 1, .threads = 1, .temperature = 0.7};
    int code = sh_flags_parse(&table, argc, argv, 1, &o, NULL);
    if (code) return code == SH_FLAGS_HELP ? SH_EXIT_OK : code;
    if (strcmp(o.sampler, "shoal") && strcmp(o.sampler, "darknet"))
        return sh_cli_usage_error("generate", "--sampler needs shoal or darknet, not \"%s\"", o.sampler);
    o.darknet = !strcmp(o.sampler, "darknet");
    if (!o.cfg) return sh_cli_usage_error("generate", "missing the model file CFG");
    if (!o.weights) return sh_cli_usage_error("generate", "missing --weights FILE");
    if (!o.seed) o.seed = o.darknet ? "\n\n" : "\n"; /* each program's default */
    shoal_result rc = generate(&o);
    return rc == SHOAL_OK ? SH_EXIT_OK : sh_cli_fail(rc);
}
