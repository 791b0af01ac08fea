/* cli_usage_checks.h — `shoal train` refusing flags that do not go together: each case exits 2
 * with one line naming the clash, as a static function over check.h's counters (each test
 * binary counts the CHECKs as its own, as layout_checks.h's).
 * Not here: running the binary (run.h), which flags clash (each test's table).
 * Used by tests/cli/test_train_ps_layouts.c and test_train_stragglers.c. */
#ifndef SH_TEST_CLI_USAGE_CHECKS_H
#define SH_TEST_CLI_USAGE_CHECKS_H

#include <stdio.h>
#include <string.h>

#include "check.h"
#include "lib/run.h"

typedef struct {
    const char *args, *want; /* the flags after the head; a piece of the one line it prints */
} usage_case;

/* `shoal train HEAD ARGS` in dir for each of the n cases: exit 2, one line holding want.
 * out (out_nbytes) holds the last run's output. One CHECK a case. */
static inline void check_usage_errors(const char *dir, const char *head, const usage_case *bad, size_t n, char *out,
                                      size_t out_nbytes)
{
    for (size_t i = 0; i < n; i++) {
        char args[512];
        snprintf(args, sizeof args, "%s %s", head, bad[i].args);
        int rc = sh_test_shoal_in(dir, "", "train", args, out, out_nbytes);
        CHECK(rc == 2 && strstr(out, bad[i].want) && sh_test_count(out, "\n") == 1, "%s: exit %d: %s", bad[i].args,
              rc, out);
    }
}

#endif
