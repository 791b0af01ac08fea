/* err.h — raising and passing up errors: SH_FAIL, SH_TRY, SH_TRY_GOTO, SH_ASSERT.
 * Not here: the result enum (include/shoal/result.h), logging (log.h).
 * Proved by tests/base/test_err.c. */
#ifndef SH_ERR_H
#define SH_ERR_H

#include "shoal/result.h"

/* Store a formatted message and its file:line in the thread-local error buffer (replacing
 * what was there) and return rc. Use through SH_FAIL. */
shoal_result sh_fail(shoal_result rc, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Append one "from file:line" breadcrumb. Use through SH_TRY. */
void sh_err_trace(const char *file, int line);
/* Prefix the current message with context ("rank 2: "), keeping the rest. */
void sh_err_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prefix "rank R: " unless the message already starts with it (a lower layer, perhaps on
 * the communicator's thread, named the rank): every layer that knows its rank may call it,
 * and the message names the rank once. */
void sh_err_prefix_rank(int rank);
void sh_err_clear(void);
/* Abort with "shoal bug: expr at file:line". Our own invariants only. */
_Noreturn void sh_assert_fail(const char *expr, const char *file, int line);

#define SH_FAIL(rc, ...) sh_fail((rc), __FILE__, __LINE__, __VA_ARGS__)

#define SH_TRY(expr)                                                   \
    do {                                                               \
        shoal_result sh_try_rc_ = (expr);                              \
        if (sh_try_rc_ != SHOAL_OK) {                                  \
            sh_err_trace(__FILE__, __LINE__);                          \
            return sh_try_rc_;                                         \
        }                                                              \
    } while (0)

#define SH_TRY_GOTO(expr, rc, label)                                   \
    do {                                                               \
        (rc) = (expr);                                                 \
        if ((rc) != SHOAL_OK) {                                        \
            sh_err_trace(__FILE__, __LINE__);                          \
            goto label;                                                \
        }                                                              \
    } while (0)

#define SH_ASSERT(cond)                                                \
    do {                                                               \
        if (!(cond)) sh_assert_fail(#cond, __FILE__, __LINE__);        \
    } while (0)

#endif
