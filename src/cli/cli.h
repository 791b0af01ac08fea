/* cli.h — the subcommands of the shoal command line and what they share.
 * Not here: the work itself (library modules); a subcommand parses flags, calls the
 * library and turns the result into an exit code: 0 success, 1 failure, 2 wrong usage.
 * Flags: each subcommand's table (flags.h). Only the public headers (include/shoal) reach the library;
 * base/ and io/ serve the program's own plumbing (errors, environment, clocks, charts).
 * Proved by tests/cli/test_cli.c. */
#ifndef SH_CLI_H
#define SH_CLI_H

#include <stdint.h>

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

/* A whole decimal integer in [min, max]: 1 and *out set, else 0 (*out untouched). */
int sh_cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);

#endif
