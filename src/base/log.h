/* log.h — log lines "[rank 3 host] comm: info: text" ("shoal: comm: info: text" before the
 * rank is known) at a level chosen by SHOAL_LOG.
 * Not here: errors (err.h) — logs add detail, they never hold the only copy of a reason.
 * Proved by tests/base/test_log.c. */
#ifndef SH_LOG_H
#define SH_LOG_H

typedef enum { SH_LOG_ERROR = 0, SH_LOG_WARN, SH_LOG_INFO, SH_LOG_DEBUG } sh_log_level;

/* Set who this process is, for the prefix; rank < 0 leaves the rank out. */
void sh_log_set_rank(int rank, const char *host);
/* The rank set above; -1 before (alone, or not yet known). For what one rank says for all. */
int sh_log_rank(void);
/* 1 when a line at this level for this subsystem would be printed. */
int sh_log_enabled(sh_log_level level, const char *subsys);
void sh_log(sh_log_level level, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define SH_LOG_E(sub, ...) sh_log(SH_LOG_ERROR, (sub), __VA_ARGS__)
#define SH_LOG_W(sub, ...) sh_log(SH_LOG_WARN, (sub), __VA_ARGS__)
#define SH_LOG_I(sub, ...) sh_log(SH_LOG_INFO, (sub), __VA_ARGS__)
#define SH_LOG_D(sub, ...) sh_log(SH_LOG_DEBUG, (sub), __VA_ARGS__)

#endif
