/* cmd_generate.c — `shoal generate CFG --weights FILE`: text sampled one byte at a time from a
 * trained character-level net, as `darknet rnn generate`: the seed text is fed first (its
 * bytes printed as they are), then each sampled byte is printed and fed back. `--sampler
 * darknet` draws as `darknet rnn generate -srand N` does: glibc's rand() (base/glibc_rand.h,
 * so any libc gives it) seeded with N and advanced past the draws Darknet spends building the net,
 * its temperature softmax, its 0.0001 cut-off and its cumulative subtraction.
 * Not here: the layers and their carried state (src/nn), loading weights (src/train/snapshot.c).
 * Proved by tests/cli/test_train_text.c. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/glibc_rand.h"
#include "base/util.h"
#include "cli/cli.h"
#include "nn/cfg.h"
#include "nn/darknet_weights.h"
#include "nn/net.h"

#define NBYTES 256 /* one-hot over bytes, as darknet rnn */

static const char usage_text[] =
    "usage: shoal generate CFG --weights FILE [options]\n"
    "\n"
    "Sample text from a character-level model trained by shoal train CFG --data FILE.txt\n"
    "(256 one-hot inputs, 256 outputs; examples/char-lstm.cfg): the seed is fed one byte at a\n"
    "time, then each byte drawn from the net's output is printed and fed back, the recurrent\n"
    "state carried from byte to byte.\n"
    "\n"
    "  --weights FILE     the weights (a checkpoint of the same CFG; required)\n"
    "  --seed TEXT        text to start from (default: a newline)\n"
    "  --length N         bytes to generate after the seed (default 1000)\n"
    "  --temperature T    divide the logits by T: below 1 is safer, above 1 wilder\n"
    "                     (default 0.7, as darknet)\n"
    "  --sample-seed N    seed of the random draws (default 1: the same text every time)\n"
    "  --sampler S        shoal (default) or darknet: draw exactly as darknet rnn generate\n"
    "                     -srand N does (its rand(), cut-off and order; the seed then\n"
    "                     defaults to darknet's two newlines) for the same text from the\n"
    "                     same .weights file\n"
    "  --threads N        kernel threads (default 1)\n"
    "  --help             this text\n";

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

static shoal_result generate(const char *cfg_path, const char *weights, const char *seed,
                             long length, double temperature, uint64_t sample_seed, int threads,
                             int darknet)
{
    shoal_result rc = SHOAL_OK;
    sh_cfg *cfg = NULL;
    sh_net *net = NULL;
    SH_TRY(sh_cfg_load(cfg_path, &cfg));
    /* one stream, one step per forward: each byte sees the state the last one left */
    SH_TRY_GOTO(sh_net_create_steps(cfg, 1, 1, 1, &net), rc, done);
    if (sh_net_input_count(net) != NBYTES || sh_net_nclasses(net) != NBYTES) {
        rc = SH_FAIL(SHOAL_ERR_INVALID,
                     "%s takes %d inputs and gives %d outputs; generate needs a character model "
                     "with 256 of each (inputs=256 in [net], a last layer of output=256)",
                     cfg_path, sh_net_input_count(net), sh_net_nclasses(net));
        goto done;
    }
    SH_TRY_GOTO(sh_cli_net_weights(net, threads, weights), rc, done);
    sh_rng rng;
    sh_rng_seed(&rng, sample_seed);
    sh_glibc_rand dn = {{0}, 0};
    if (darknet) {
        int64_t draws = sh_darknet_init_draws(net);
        if (draws < 0) {
            rc = SH_FAIL(SHOAL_ERR_INVALID, "--sampler darknet: %s has a layer Darknet builds "
                         "otherwise (only [rnn], [lstm], [gru] form=darknet, [connected] and "
                         "layers without weights match its random draws); use --sampler shoal", cfg_path);
            goto done;
        }
        sh_glibc_rand_seed(&dn, (uint32_t)sample_seed);
        for (int64_t k = 0; k < draws; k++) (void)sh_glibc_rand_next(&dn);
    }
    float x[NBYTES];
    /* Darknet feeds byte 0 first when the seed is empty, and prints it */
    size_t nseed = darknet && !*seed ? 1 : strlen(seed);
    int next = 0;
    for (long i = 0; i < (long)nseed + length; i++) {
        int byte = i < (long)nseed ? (unsigned char)seed[i] : next;
        putchar(byte);
        memset(x, 0, sizeof x);
        x[byte] = 1.0f;
        SH_TRY_GOTO(sh_net_forward(net, x, 1, 0), rc, done);
        if (!darknet)
            next = draw(sh_net_output(net), temperature, &rng);
        else if (i + 1 >= (long)nseed) /* Darknet draws nothing while it reads the seed */
            next = draw_darknet(sh_net_output(net), (float)temperature, &dn);
    }
    putchar('\n');
    fflush(stdout);
done:
    sh_net_destroy(net);
    sh_cfg_destroy(cfg);
    return rc;
}

int sh_cmd_generate(int argc, char **argv)
{
    const char *cfg = NULL, *weights = NULL, *seed = NULL, *sampler = "shoal";
    int64_t length = 1000, sample_seed = 1;
    int threads = 1;
    double temperature = 0.7;
    sh_cli_args a = {"generate", argc, argv, 1, 0};
    for (; a.i < argc; a.i++) {
        const char *v = NULL;
        if (sh_cli_help(&a, usage_text)) return SH_EXIT_OK;
        if (sh_cli_arg_cfg(&a, &cfg) || sh_cli_flag_str(&a, "--weights", "a value", &weights) ||
            sh_cli_flag_str(&a, "--seed", "a value", &seed) ||
            sh_cli_flag_i64(&a, "--length", 0, 1L << 40, &length) ||
            sh_cli_flag_i64(&a, "--sample-seed", 0, INT64_MAX, &sample_seed) ||
            sh_cli_flag_str(&a, "--sampler", "shoal or darknet", &sampler) ||
            sh_cli_flag_int(&a, "--threads", 1, 1024, &threads)) {
            if (a.bad) return SH_EXIT_USAGE;
            continue;
        }
        int got = sh_cli_take_value(argc, argv, &a.i, "--temperature", &v);
        if (got == 0) return sh_cli_usage_error("generate", "unknown option \"%s\"", argv[a.i]);
        char *end = NULL;
        temperature = got < 0 ? 0 : strtod(v, &end);
        if (got < 0 || !end || *end || !(temperature > 0) || temperature > 1e6)
            return sh_cli_usage_error("generate", "--temperature needs a number above 0 and at most 1e6");
    }
    if (strcmp(sampler, "shoal") && strcmp(sampler, "darknet"))
        return sh_cli_usage_error("generate", "--sampler needs shoal or darknet, not \"%s\"",
                                  sampler);
    int darknet = !strcmp(sampler, "darknet");
    if (!cfg) return sh_cli_usage_error("generate", "missing the model file CFG");
    if (!weights) return sh_cli_usage_error("generate", "missing --weights FILE");
    if (!seed) seed = darknet ? "\n\n" : "\n"; /* each program's default */
    shoal_result rc = generate(cfg, weights, seed, (long)length, temperature,
                               (uint64_t)sample_seed, threads, darknet);
    return rc == SHOAL_OK ? SH_EXIT_OK : sh_cli_fail(rc);
}
