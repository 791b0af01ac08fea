/* main.c — `shoal SUBCOMMAND [options]`: finds the subcommand and runs it.
 * Not here: the subcommands (cmd_*.c).
 * Proved by tests/cli/test_cli.c. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "cli/cli.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} subcommand;

static const subcommand subcommands[] = {
    {"train", sh_cmd_train, "train a network from a .cfg model file"},
    {"test", sh_cmd_test, "measure a trained network's accuracy on the test set"},
    {"generate", sh_cmd_generate, "sample text from a trained character-level model"},
    {"pretrain", sh_cmd_pretrain, "pretrain a deep belief net's [rbm] layers, layer by layer, without labels"},
    {"sample", sh_cmd_sample, "images from an RBM / DBN (Gibbs sampling) or an autoencoder's reconstructions"},
    {"time", sh_cmd_time, "time forward and backward passes (per layer on request)"},
    {"launch", sh_cmd_launch, "start N local ranks of a command: shoal launch -n 4 -- CMD"},
    {"bench", sh_cmd_bench, "benchmark a collective, nccl-tests style"},
    {"plot", sh_cmd_plot, "draw runs' curves, a timeline's step breakdown or busbw vs size (SVG)"},
    {"env", sh_cmd_env, "list every environment variable shoal reads"},
};
#define NSUB (sizeof subcommands / sizeof subcommands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: shoal SUBCOMMAND [options]   (shoal SUBCOMMAND --help for its options)\n\n");
    for (size_t i = 0; i < NSUB; i++) fprintf(f, "  %-8s %s\n", subcommands[i].name, subcommands[i].help);
}

int sh_cli_fail(shoal_result rc)
{
    (void)rc;
    fprintf(stderr, "shoal: %s\n", shoal_last_error_message());
    if (sh_log_enabled(SH_LOG_DEBUG, "cli")) fprintf(stderr, "%s\n", shoal_last_error());
    return SH_EXIT_FAIL;
}

int sh_cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "shoal %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "; see 'shoal %s --help'\n", cmd);
    va_end(ap);
    return SH_EXIT_USAGE;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return SH_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return SH_EXIT_OK;
    }
    for (size_t i = 0; i < NSUB; i++)
        if (!strcmp(argv[1], subcommands[i].name)) return subcommands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "shoal: unknown subcommand \"%s\"\n", argv[1]);
    usage(stderr);
    return SH_EXIT_USAGE;
}
