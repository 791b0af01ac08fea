/* run.h — run a shell command from a test and capture what it prints: the tests that drive
 * the `shoal` binary (or mpirun, a compiler) as a user would.
 * Not here: forking ranks with communicators (ranks.h).
 * Used by tests/cli/, tests/comm/test_mpi_*.c and tests/train/test_api.c. */
#ifndef SH_TEST_RUN_H
#define SH_TEST_RUN_H

#include <stddef.h>

/* Run cmd through /bin/sh; its standard output (add "2>&1" to cmd for stderr too), up to
 * out_nbytes - 1 bytes, lands NUL-terminated in out; the rest is read and dropped, so a
 * long output does not end the command with SIGPIPE. Returns the exit status, or -1 when
 * the command could not start or did not exit normally (killed by a signal). */
int sh_test_run(const char *cmd, char *out, size_t out_nbytes);

/* The shoal binary under test: $SHOAL_BIN, else build/shoal. */
const char *sh_test_shoal_bin(void);

/* `shoal CMD ARGS` (CMD: "train", "test", ...) run in directory dir with env before it
 * (variable assignments such as "SHOAL_TIMEOUT=3000", or ""); stdout and stderr land in
 * out. Returns what sh_test_run does. */
int sh_test_shoal_in(const char *dir, const char *env, const char *cmd, const char *args, char *out,
                     size_t out_nbytes);

/* The size of dir/name in bytes; -1 when there is no such file. */
long long sh_test_file_nbytes(const char *dir, const char *name);

/* How many times s stands in text (overlapping places counted). */
int sh_test_count(const char *text, const char *s);

/* The number after the first "key": in text (shoal's --json output); -1 when key is absent. */
double sh_test_json_number(const char *text, const char *key);

/* The first of count consecutive TCP ports that are free now, picked at random below the
 * kernel's ephemeral range (so no test's outgoing connection takes one meanwhile): for a
 * test that must name its ports (a master port, SHOAL_PORT_RANGE, several mpirun jobs). */
int sh_test_free_ports(int count);

#endif
