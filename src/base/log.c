/* log.c — level and subsystem filtering from SHOAL_LOG, one line per call, rank prefix.
 * Not here: error messages (err.c).
 * Proved by tests/base/test_log.c. */
#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/env.h"

static int log_rank = -1;
static char log_host[64];
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static sh_log_level log_level = SH_LOG_WARN;
static char log_subsys[256]; /* comma-separated; empty: all */

static void log_init(void)
{
    const char *s = sh_env_str("SHOAL_LOG");
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s ? s : "warn");
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!strcmp(tok, "error")) log_level = SH_LOG_ERROR;
        else if (!strcmp(tok, "warn")) log_level = SH_LOG_WARN;
        else if (!strcmp(tok, "info")) log_level = SH_LOG_INFO;
        else if (!strcmp(tok, "debug")) log_level = SH_LOG_DEBUG;
        else {
            size_t len = strlen(log_subsys);
            snprintf(log_subsys + len, sizeof log_subsys - len, "%s%s", len ? "," : "", tok);
        }
    }
}

void sh_log_set_rank(int rank, const char *host)
{
    log_rank = rank;
    snprintf(log_host, sizeof log_host, "%s", host ? host : "");
}

int sh_log_rank(void) { return log_rank; }

static int subsys_on(const char *subsys)
{
    if (!log_subsys[0] || !subsys) return 1;
    size_t n = strlen(subsys);
    for (const char *p = log_subsys; (p = strstr(p, subsys)); p += n)
        if ((p == log_subsys || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

int sh_log_enabled(sh_log_level level, const char *subsys)
{
    pthread_once(&log_once, log_init);
    /* errors and warnings always show; the subsystem list narrows info and debug */
    return level <= log_level && (level <= SH_LOG_WARN || subsys_on(subsys));
}

void sh_log(sh_log_level level, const char *subsys, const char *fmt, ...)
{
    if (!sh_log_enabled(level, subsys)) return;
    static const char *names[] = {"error", "warn", "info", "debug"};
    char line[2048];
    int n;
    if (log_rank >= 0)
        n = snprintf(line, sizeof line, "[rank %d%s%s] %s: %s: ", log_rank, log_host[0] ? " " : "",
                     log_host, subsys ? subsys : "shoal", names[level]);
    else
        n = snprintf(line, sizeof line, "shoal: %s: %s: ", subsys ? subsys : "shoal",
                     names[level]);
    if (n < 0 || (size_t)n >= sizeof line) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* one fputs of the whole line keeps lines of concurrent threads apart */
    size_t len = strlen(line);
    if (len + 2 > sizeof line) len = sizeof line - 2;
    line[len] = '\n';
    line[len + 1] = 0;
    fputs(line, stderr);
}
