/* cmd_generate.c — `shoal generate CFG --weights FILE`: text sampled one byte at a time from a
 * trained character-level net, as `darknet rnn generate`: the seed text is fed first (its
 * bytes printed as they are), then each sampled byte is printed and fed back.
 * Not here: the layers and their carried state (src/nn), loading weights (src/train/snapshot.c).
 * Proved by tests/cli/test_train_text.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "cli/cli.h"
#include "nn/cfg.h"
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
    "  --threads N        kernel threads (default 1)\n"
    "  --help             this text\n";

/* A byte drawn from p (NBYTES probabilities) sharpened by temperature: p^(1/T), renormalised. */
static int draw(const float *p, double temperature, sh_rng *rng)
{
    double w[NBYTES], sum = 0;
    for (int i = 0; i < NBYTES; i++) {
        w[i] = p[i] > 0 ? exp(log((double)p[i]) / temperature) : 0;
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

static shoal_result generate(const char *cfg_path, const char *weights, const char *seed,
                             long length, double temperature, uint64_t sample_seed, int threads)
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
    float x[NBYTES];
    size_t nseed = strlen(seed);
    int next = 0;
    for (long i = 0; i < (long)nseed + length; i++) {
        int byte = i < (long)nseed ? (unsigned char)seed[i] : next;
        putchar(byte);
        memset(x, 0, sizeof x);
        x[byte] = 1.0f;
        SH_TRY_GOTO(sh_net_forward(net, x, 1, 0), rc, done);
        next = draw(sh_net_output(net), temperature, &rng);
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
    const char *cfg = NULL, *weights = NULL, *seed = "\n";
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
            sh_cli_flag_int(&a, "--threads", 1, 1024, &threads)) {
            if (a.bad) return SH_EXIT_USAGE;
            continue;
        }
        int got = sh_cli_take_value(argc, argv, &a.i, "--temperature", &v);
        if (got == 0) return sh_cli_usage_error("generate", "unknown option \"%s\"", argv[a.i]);
        char *end = NULL;
        temperature = got < 0 ? 0 : strtod(v, &end);
        if (got < 0 || !end || *end || !(temperature > 0) || temperature > 1e6)
            return sh_cli_usage_error("generate", "--temperature needs a number above 0");
    }
    if (!cfg) return sh_cli_usage_error("generate", "missing the model file CFG");
    if (!weights) return sh_cli_usage_error("generate", "missing --weights FILE");
    shoal_result rc = generate(cfg, weights, seed, (long)length, temperature,
                               (uint64_t)sample_seed, threads);
    return rc == SHOAL_OK ? SH_EXIT_OK : sh_cli_fail(rc);
}
