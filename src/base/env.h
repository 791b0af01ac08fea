/* env.h — every environment variable shoal reads, in one table (env.c): name, default,
 * bounds, help. No other file calls getenv(); `shoal env` prints the table.
 * Proved by tests/base/test_env.c. */
#ifndef SH_ENV_H
#define SH_ENV_H

#include <stddef.h>
#include <stdio.h>
#include "shoal/result.h"

/* The variable's value, or its default from the table when unset or empty (may be NULL).
 * Asserts that the name is in the table: an unlisted variable is a shoal bug. */
const char *sh_env_str(const char *name);
/* 1 when the variable is set to a non-empty value. */
int sh_env_is_set(const char *name);
/* The value (or default) as an integer within the table's bounds. A non-number or a value
 * out of bounds is SHOAL_ERR_INVALID naming the variable, the value and the bounds. */
shoal_result sh_env_long(const char *name, long *out);
/* One row of the table, read-only: for `shoal env` and tests/base/test_env.c. */
typedef struct {
    const char *name;
    const char *def;     /* NULL: no default */
    long min, max;       /* bounds for integer variables; min > max: not an integer */
    const char *help;
} sh_env_var;
/* Row i of the table, or NULL past the last row. */
const sh_env_var *sh_env_var_at(size_t i);
/* Print the table: name, default, current value, help. */
void sh_env_print(FILE *f);

#endif
