/* err.c — the thread-local error buffer behind SH_FAIL / SH_TRY and shoal_last_error().
 * Not here: printing errors to the user (src/cli), log lines (log.c).
 * Proved by tests/base/test_err.c. */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Messages longer than the buffer are cut on purpose: an error must never overrun. */
#if defined(__GNUC__) && !defined(__clang__) /* clang has no such warning */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

/* Big enough for a message and a few dozen breadcrumbs; longer text is cut, never overrun. */
#define ERR_BUF_NBYTES 4096

static _Thread_local char err_msg[ERR_BUF_NBYTES];   /* message + " (file:line)" */
static _Thread_local size_t err_msg_nbytes;          /* length of the message part alone */
static _Thread_local char err_full[ERR_BUF_NBYTES];  /* message, location, breadcrumbs */

static const char *base_name(const char *path)
{
    const char *s = strstr(path, "src/");
    return s ? s : path;
}

shoal_result sh_fail(shoal_result rc, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    err_msg_nbytes = (size_t)n < sizeof err_msg ? (size_t)n : sizeof err_msg - 1;
    snprintf(err_full, sizeof err_full, "%s (%s:%d)", err_msg, base_name(file), line);
    return rc;
}

void sh_err_trace(const char *file, int line)
{
    size_t len = strlen(err_full);
    if (len + 1 < sizeof err_full)
        snprintf(err_full + len, sizeof err_full - len, "\n  from %s:%d", base_name(file), line);
}

void sh_err_prefix(const char *fmt, ...)
{
    char pre[512], tmp[ERR_BUF_NBYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    snprintf(tmp, sizeof tmp, "%s%s", pre, err_msg);
    memcpy(err_msg, tmp, sizeof err_msg);
    err_msg[sizeof err_msg - 1] = 0;
    err_msg_nbytes = strlen(err_msg);
    snprintf(tmp, sizeof tmp, "%s%s", pre, err_full);
    memcpy(err_full, tmp, sizeof err_full);
    err_full[sizeof err_full - 1] = 0;
}

void sh_err_prefix_rank(int rank)
{
    char pre[32];
    int n = snprintf(pre, sizeof pre, "rank %d: ", rank);
    /* The text itself says so: it survives the copy from the communicator's thread. */
    if (n > 0 && !strncmp(err_msg, pre, (size_t)n)) return;
    sh_err_prefix("%s", pre);
}

void sh_err_clear(void)
{
    err_msg[0] = 0;
    err_full[0] = 0;
    err_msg_nbytes = 0;
}

const char *shoal_last_error(void) { return err_full; }

const char *shoal_last_error_message(void) { return err_msg; }

const char *shoal_result_name(shoal_result rc)
{
    switch (rc) {
    case SHOAL_OK: return "SHOAL_OK";
    case SHOAL_ERR_INVALID: return "SHOAL_ERR_INVALID";
    case SHOAL_ERR_NOMEM: return "SHOAL_ERR_NOMEM";
    case SHOAL_ERR_IO: return "SHOAL_ERR_IO";
    case SHOAL_ERR_TIMEOUT: return "SHOAL_ERR_TIMEOUT";
    case SHOAL_ERR_PEER: return "SHOAL_ERR_PEER";
    case SHOAL_ERR_MISMATCH: return "SHOAL_ERR_MISMATCH";
    case SHOAL_ERR_FORMAT: return "SHOAL_ERR_FORMAT";
    case SHOAL_ERR_BROKEN: return "SHOAL_ERR_BROKEN";
    case SHOAL_ERR_INTERNAL: return "SHOAL_ERR_INTERNAL";
    case SHOAL_ERR_INTERRUPTED: return "SHOAL_ERR_INTERRUPTED";
    case SHOAL_ERR_UNSUPPORTED: return "SHOAL_ERR_UNSUPPORTED";
    }
    return "SHOAL_ERR_UNKNOWN";
}

void sh_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "shoal bug: assertion \"%s\" failed at %s:%d\n", expr, base_name(file), line);
    fflush(stderr);
    abort();
}
