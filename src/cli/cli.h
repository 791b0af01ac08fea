/* cli.h — the subcommands of the shoal command line and what they share.
 * Not here: the work itself (library modules); a subcommand parses flags, calls the
 * library and turns the result into an exit code: 0 success, 1 failure, 2 wrong usage.
 * Proved by tests/cli/test_cli.c. */
#ifndef SH_CLI_H
#define SH_CLI_H

#include <stdint.h>

#include "nn/net.h"
#include "shoal/result.h"

#define SH_EXIT_OK 0
#define SH_EXIT_FAIL 1
#define SH_EXIT_USAGE 2

int sh_cmd_train(int argc, char **argv);
int sh_cmd_test(int argc, char **argv);
int sh_cmd_generate(int argc, char **argv);
int sh_cmd_time(int argc, char **argv);
int sh_cmd_launch(int argc, char **argv);
int sh_cmd_bench(int argc, char **argv);
int sh_cmd_env(int argc, char **argv);
int sh_cmd_plot(int argc, char **argv);
int sh_cmd_pretrain(int argc, char **argv);
int sh_cmd_sample(int argc, char **argv);

/* Print "shoal: <last error message>" to stderr (and, with SHOAL_LOG=debug, the source
 * locations) and return SH_EXIT_FAIL. */
int sh_cli_fail(shoal_result rc);
/* Print "shoal CMD: <message>; see 'shoal CMD --help'" and return SH_EXIT_USAGE. */
int sh_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Kernel threads for a one-process subcommand (test, time): --threads if given, else the
 * rule of sh_cpus_threads_per_rank with the ranks on this host the launcher names (args.c). */
int sh_cli_threads(int requested);

/* Flag parsing (args.c): "--name value" or "--name=value". Returns 1 when argv[*i] is
 * flag `name` and sets *val (advancing *i past a separate value), 0 when it is another
 * flag, -1 when the value is missing. */
int sh_cli_take_value(int argc, char **argv, int *i, const char *name, const char **val);
/* A whole decimal integer in [min, max]: 1 and *out set, else 0 (*out untouched). */
int sh_cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);
int sh_cli_parse_int(const char *s, int min, int max, int *out);

/* A subcommand's arguments read one at a time, for the helpers below (args.c):
 *
 *   sh_cli_args a = {"test", argc, argv, 1, 0};
 *   for (; a.i < argc; a.i++) {
 *       if (sh_cli_help(&a, usage_text)) return SH_EXIT_OK;
 *       if (sh_cli_arg_cfg(&a, &cfg) || sh_cli_flag_int(&a, "--batch", 1, 64, &batch)) {
 *           if (a.bad) return SH_EXIT_USAGE;
 *           continue;
 *       }
 *       return sh_cli_usage_error("test", "unknown option \"%s\"", argv[a.i]);
 *   }
 */
typedef struct {
    const char *cmd; /* "test": usage errors read "shoal test: ..." */
    int argc;
    char **argv;
    int i;           /* the argument being read; a flag's separate value moves it on */
    int bad;         /* a usage error was printed: the subcommand returns SH_EXIT_USAGE */
} sh_cli_args;

/* 1 when argv[i] is --help or -h, after printing usage to stdout. */
int sh_cli_help(const sh_cli_args *a, const char *usage);
/* 1 when argv[i] is not a flag (no leading '-'): the model file CFG goes to *cfg, or, when
 * *cfg is set already, "unexpected argument" is the usage error. 0 otherwise. */
int sh_cli_arg_cfg(sh_cli_args *a, const char **cfg);
/* 1 when argv[i] is flag `name` (sh_cli_take_value): its value goes to *out, or, when it is
 * missing, "NAME needs WHAT" is the usage error. 0 when argv[i] is another flag. */
int sh_cli_flag_str(sh_cli_args *a, const char *name, const char *what, const char **out);
/* The same for a whole number in [min, max]; a missing or bad value is the usage error
 * "NAME needs an integer in MIN..MAX" (sh_cli_flag_i64: "NAME needs an integer >= MIN"). */
int sh_cli_flag_int(sh_cli_args *a, const char *name, int min, int max, int *out);
int sh_cli_flag_i64(sh_cli_args *a, const char *name, int64_t min, int64_t max, int64_t *out);

/* What a one-process subcommand (test, time, generate) does to the net it built: `threads`
 * kernel threads, then the weights in FILE (a shoal checkpoint, or Darknet's FILE.weights;
 * NULL: the seed's stay). The errors of sh_snapshot_load_weights. */
shoal_result sh_cli_net_weights(sh_net *net, int threads, const char *weights);

#endif
