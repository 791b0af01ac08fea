/* test_progress.c — proves src/io/progress.c: the line's format, durations, rate and ETA from
 * the moving window, plain lines every K steps when not on a terminal, and the live line's
 * carriage returns when on one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <pty.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/util.h"
#include "check.h"
#include "io/progress.h"

static void line_has_every_field_in_order(void)
{
    sh_progress_view v = {.epoch = 2, .epochs = 5, .step = 430, .steps = 937, .loss = 0.41234,
                          .acc = 0.8624, .img_per_s = 3150.4, .eta_s = 72};
    char buf[256];
    size_t n = sh_progress_format(&v, buf, sizeof buf);
    const char *want = "epoch 2/5  step 430/937  loss 0.4123  acc 86.2%  3150 img/s  ETA 1m12s";
    CHECK(strcmp(buf, want) == 0, "got \"%s\"", buf);
    CHECK(n == strlen(want), "length %zu", n);
    /* unknown values are left out rather than shown as zeros */
    v = (sh_progress_view){.epoch = 1, .epochs = 0, .step = 3, .steps = 0, .loss = NAN,
                           .acc = -1, .img_per_s = 0, .eta_s = -1};
    sh_progress_format(&v, buf, sizeof buf);
    CHECK(strcmp(buf, "epoch 1  step 3") == 0, "got \"%s\"", buf);
    /* a short buffer truncates like snprintf, never overruns */
    char small[12];
    memset(small, 'x', sizeof small);
    v = (sh_progress_view){.epoch = 2, .epochs = 5, .step = 430, .steps = 937, .loss = 1,
                           .acc = -1, .eta_s = -1};
    n = sh_progress_format(&v, small, sizeof small);
    CHECK(n == 11 && small[11] == 0 && strncmp(small, "epoch 2/5  ", 11) == 0, "got \"%s\" %zu",
          small, n);
}

static void durations_read_like_a_person_writes_them(void)
{
    char b[32];
    struct {
        double s;
        const char *want;
    } cases[] = {{0, "0s"},       {44.6, "45s"},        {59.4, "59s"},     {72, "1m12s"},
                 {3599, "59m59s"}, {3600, "1h00m"},     {7380, "2h03m"},   {90000, "1d01h"},
                 {-1, "?"},        {INFINITY, "?"},     {NAN, "?"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sh_progress_format_duration(cases[i].s, b, sizeof b);
        CHECK(strcmp(b, cases[i].want) == 0, "%g s -> \"%s\", want \"%s\"", cases[i].s, b,
              cases[i].want);
    }
}

/* Count lines and find the last one in a memory stream's text. */
static int count_char(const char *s, char c)
{
    int n = 0;
    for (; *s; s++) n += *s == c;
    return n;
}

static void plain_output_prints_every_k_steps_and_epoch_end(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    sh_progress_opts o;
    sh_progress_opts_default(&o);
    o.epochs = 2, o.steps_per_epoch = 25, o.images_per_step = 64, o.log_every_steps = 10;
    o.out = f; /* not a terminal: is_tty = -1 must pick plain lines */
    sh_progress *p = NULL;
    CHECK_OK(sh_progress_create(&o, &p));
    if (!p) return;
    /* 0.02 s per step: 3200 img/s; ETA after the first epoch's step 10 = 40 steps * 0.02 s */
    uint64_t t = 1000000000ull;
    for (int e = 0; e < 2; e++) {
        for (int s = 0; s < 25; s++) {
            t += 20000000ull;
            sh_progress_step_at(p, t, e, s, 1.0 / (1 + s), 0.5);
        }
        sh_progress_epoch_end(p, e == 0 ? "test acc 80.0%" : NULL);
    }
    sh_progress_destroy(p);
    fclose(f);
    /* steps 10, 20, 25 of each epoch, plus one epoch summary */
    CHECK(count_char(text, '\n') == 7, "lines: %d\n%s", count_char(text, '\n'), text);
    CHECK(strchr(text, '\r') == NULL && strchr(text, '\033') == NULL, "no terminal codes");
    CHECK(strstr(text, "epoch 1/2  step 10/25  loss 0.1000  acc 50.0%  3200 img/s  ETA 0s") ==
                  NULL &&
              strstr(text, "epoch 1/2  step 10/25  loss 0.1000  acc 50.0%  3200 img/s  ETA 1s\n"),
          "step 10 line:\n%s", text);
    CHECK(strstr(text, "epoch 1: test acc 80.0%\n") != NULL, "epoch summary:\n%s", text);
    CHECK(strstr(text, "epoch 2/2  step 25/25  loss 0.0400  acc 50.0%  3200 img/s  ETA 0s\n"),
          "last line:\n%s", text);
    free(text);
}

static void rate_follows_a_slowdown_through_the_window(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    sh_progress_opts o;
    sh_progress_opts_default(&o);
    o.epochs = 1, o.steps_per_epoch = 1000, o.images_per_step = 100, o.log_every_steps = 100;
    o.out = f, o.is_tty = 0;
    sh_progress *p = NULL;
    CHECK_OK(sh_progress_create(&o, &p));
    if (!p) return;
    uint64_t t = 0;
    /* 10 ms per step, then 100 ms per step: after 100 slow steps the window shows only them */
    for (int s = 0; s < 200; s++) {
        t += s < 100 ? 10000000ull : 100000000ull;
        sh_progress_step_at(p, t, 0, s, 0.5, NAN);
    }
    sh_progress_destroy(p);
    fclose(f);
    CHECK(strstr(text, "step 100/1000  loss 0.5000  10000 img/s  ETA 9s\n") != NULL,
          "fast phase:\n%s", text);
    CHECK(strstr(text, "step 200/1000  loss 0.5000  1000 img/s  ETA 1m20s\n") != NULL,
          "slow phase:\n%s", text);
    free(text);
}

/* --max-steps ends the last epoch early and --time-limit ends the run: the line counts to
 * where the run stops, not to the epoch's end. */
static void counts_to_where_the_run_stops(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    sh_progress_opts o;
    sh_progress_opts_default(&o);
    o.epochs = 2, o.steps_per_epoch = 25, o.last_step = 30, o.images_per_step = 10, o.log_every_steps = 5;
    o.out = f, o.is_tty = 0;
    sh_progress *p = NULL;
    CHECK_OK(sh_progress_create(&o, &p));
    if (!p) return;
    uint64_t t = 0; /* 100 ms a step: 10 steps left are 1 s */
    for (int s = 0; s < 30; s++) {
        t += 100000000ull;
        sh_progress_step_at(p, t, s / 25, s % 25, 0.5, NAN);
    }
    sh_progress_destroy(p);
    fclose(f);
    CHECK(strstr(text, "epoch 1/2  step 20/25  loss 0.5000  100 img/s  ETA 1s\n") != NULL, "first epoch:\n%s", text);
    CHECK(strstr(text, "epoch 2/2  step 5/5  loss 0.5000  100 img/s  ETA 0s\n") != NULL, "last epoch:\n%s", text);
    CHECK(strstr(text, "epoch 1/2  step 5/25  loss 0.5000  100 img/s  ETA 3s") != NULL && !strstr(text, "/2  step 5/25  loss 0.5000  100 img/s  ETA 0s"),
          "the last epoch counts to step 30:\n%s", text);
    free(text);

    text = NULL;
    f = open_memstream(&text, &len);
    sh_progress_opts_default(&o);
    o.epochs = 1, o.steps_per_epoch = 1000, o.images_per_step = 10, o.log_every_steps = 10;
    o.time_limit_s = 3, o.out = f, o.is_tty = 0;
    p = NULL;
    CHECK_OK(sh_progress_create(&o, &p));
    if (!p) return;
    t = sh_now_ns(); /* the limit counts from create */
    for (int s = 0; s < 10; s++) {
        t += 100000000ull;
        sh_progress_step_at(p, t, 0, s, 0.5, NAN);
    }
    sh_progress_destroy(p);
    fclose(f);
    CHECK(strstr(text, "step 10/1000  loss 0.5000  100 img/s  ETA 2s\n") != NULL,
          "ETA by the time limit (1 s of 3 gone), not by 990 steps:\n%s", text);
    free(text);
}

static void live_line_rewrites_in_place_and_ends_with_newline(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    sh_progress_opts o;
    sh_progress_opts_default(&o);
    o.epochs = 1, o.steps_per_epoch = 50, o.images_per_step = 8;
    o.out = f, o.is_tty = 1, o.min_redraw_s = 0.05;
    sh_progress *p = NULL;
    CHECK_OK(sh_progress_create(&o, &p));
    if (!p) return;
    uint64_t t = 0;
    for (int s = 0; s < 50; s++) {
        t += 10000000ull; /* 10 ms per step: a redraw every 5 steps at most */
        sh_progress_step_at(p, t, 0, s, 0.25, 0.75);
        if (s == 20) {
            sh_progress_clear(p);
            fputs("warning: something\n", f);
        }
    }
    sh_progress_epoch_end(p, "test acc 70.0%");
    sh_progress_destroy(p);
    fclose(f);
    int cr = count_char(text, '\r'), nl = count_char(text, '\n');
    CHECK(cr >= 8 && cr <= 14, "redraws throttled: %d carriage returns\n%s", cr, text);
    CHECK(nl == 2, "newlines only after the warning and at epoch end: %d", nl);
    CHECK(strstr(text, "\r\033[Kwarning: something\n") != NULL, "line erased before warning");
    const char *end = "\repoch 1/1  step 50/50  loss 0.2500  acc 75.0%  800 img/s  ETA 0s\033[K"
                      "  test acc 70.0%\n";
    size_t n = strlen(text), m = strlen(end);
    CHECK(n >= m && strcmp(text + n - m, end) == 0, "ends with the final line:\n%s", text);
    free(text);
}

static void terminal_is_detected_and_gets_the_live_line(void)
{
    int master = -1, slave = -1;
    if (openpty(&master, &slave, NULL, NULL, NULL) != 0) {
        printf("skip terminal_is_detected_and_gets_the_live_line: no pseudo-terminal\n");
        return;
    }
    FILE *tty = fdopen(slave, "w");
    sh_progress_opts o;
    sh_progress_opts_default(&o);
    o.epochs = 1, o.steps_per_epoch = 3, o.images_per_step = 1, o.out = tty; /* is_tty = -1 */
    sh_progress *p = NULL;
    CHECK_OK(sh_progress_create(&o, &p));
    if (p) {
        for (int s = 0; s < 3; s++)
            sh_progress_step_at(p, (uint64_t)(s + 1) * 1000000000ull, 0, s, 1, NAN);
        sh_progress_destroy(p);
    }
    fclose(tty);
    /* The slave is closed: the master returns what was written, then EIO. */
    char buf[1024];
    size_t n = 0;
    for (ssize_t k; n < sizeof buf - 1 && (k = read(master, buf + n, sizeof buf - 1 - n)) > 0;)
        n += (size_t)k;
    close(master);
    buf[n] = 0;
    CHECK(n > 0 && buf[0] == '\r' && strstr(buf, "step 3/3") && strstr(buf, "\033[K"),
          "live line on a terminal: %s", buf);
}

int main(void)
{
    check_begin("test_progress", 10);
    RUN(line_has_every_field_in_order);
    RUN(durations_read_like_a_person_writes_them);
    RUN(plain_output_prints_every_k_steps_and_epoch_end);
    RUN(rate_follows_a_slowdown_through_the_window);
    RUN(counts_to_where_the_run_stops);
    RUN(live_line_rewrites_in_place_and_ends_with_newline);
    RUN(terminal_is_detected_and_gets_the_live_line);
    return check_end();
}
