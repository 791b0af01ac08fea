/* check.h — the one small test harness: CHECK, CHECK_NEAR, RUN, a deadline and a summary.
 *
 *   static void adds_small_ints(void) { CHECK(1 + 1 == 2, "sum %d", 1 + 1); }
 *   int main(void) { check_begin("test_x", 60); RUN(adds_small_ints); return check_end(); }
 *
 * Every binary ends with "test_x: N passed, N failed" and exits non-zero on any failure.
 * check_begin arms a deadline: a hang prints which test hung and fails, never stalls CI. */
#ifndef SHOAL_CHECK_H
#define SHOAL_CHECK_H

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int check_passed, check_failed;
static const char *check_binary = "test";
static const char *volatile check_current = "(setup)";

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (cond) {                                                                   \
            check_passed++;                                                           \
        } else {                                                                      \
            check_failed++;                                                           \
            fprintf(stderr, "FAIL %s (%s:%d): %s: ", check_current, __FILE__, __LINE__, \
                    #cond);                                                           \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
        }                                                                             \
    } while (0)

/* |a - b| <= tol, printed with both values when it fails. */
#define CHECK_NEAR(a, b, tol)                                                         \
    do {                                                                              \
        double check_a_ = (double)(a), check_b_ = (double)(b);                        \
        CHECK(fabs(check_a_ - check_b_) <= (double)(tol), "%s = %.9g, %s = %.9g, tol %g", \
              #a, check_a_, #b, check_b_, (double)(tol));                             \
    } while (0)

/* A shoal call that must succeed; prints the library's error text when it does not. */
#define CHECK_OK(expr)                                                                \
    do {                                                                              \
        shoal_result check_rc_ = (expr);                                              \
        CHECK(check_rc_ == SHOAL_OK, "%s returned %s: %s", #expr,                     \
              shoal_result_name(check_rc_), shoal_last_error());                      \
    } while (0)

/* A shoal call that must fail with a given result. */
#define CHECK_RC(expr, want)                                                          \
    do {                                                                              \
        shoal_result check_rc_ = (expr);                                              \
        CHECK(check_rc_ == (want), "%s returned %s, want %s (error: %s)", #expr,      \
              shoal_result_name(check_rc_), shoal_result_name(want), shoal_last_error()); \
    } while (0)

#define RUN(fn)                                                                       \
    do {                                                                              \
        check_current = #fn;                                                          \
        int check_before_ = check_failed;                                             \
        fn();                                                                         \
        if (getenv("CHECK_VERBOSE") || check_failed != check_before_)                 \
            fprintf(stderr, "%s %s\n", check_failed == check_before_ ? "ok  " : "FAILED", #fn); \
    } while (0)

static void check_on_deadline(int sig)
{
    (void)sig;
    char msg[512];
    int n = snprintf(msg, sizeof msg, "FAIL %s: deadline passed (test hung)\n%s: %d passed, %d failed\n",
                     check_current, check_binary, check_passed, check_failed + 1);
    if (n > 0) (void)!write(2, msg, (size_t)n);
    _exit(1);
}

/* Start the binary: its name for the summary and a deadline in seconds for all its tests. */
static inline void check_begin(const char *binary, unsigned deadline_s)
{
    check_binary = binary;
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGALRM, check_on_deadline);
    alarm(deadline_s);
}

/* 1 when running under sanitizers (make test-san): skip slow sweeps, keep the logic. */
static inline int check_under_san(void)
{
    const char *s = getenv("SHOAL_TEST_SAN");
    return s && *s == '1';
}

static inline int check_end(void)
{
    alarm(0);
    fflush(stderr);
    printf("%s: %d passed, %d failed\n", check_binary, check_passed, check_failed);
    fflush(stdout);
    return check_failed ? 1 : 0;
}

#endif
