/* test_plot_data.c — proves src/io/plot_data.c against the files scripts/fuzz.sh (target
 * plot) found it mishandling: a benchmark's JSON without a final newline is read whole (its
 * copy wrote one byte past the buffer); steps and pids no integer holds (1.8e65, -1e30)
 * are a clear error in a train history and not a step in a timeline (C's conversion of
 * them is undefined). The readers' everyday use: tests/cli/test_plot.c. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "io/plot_data.h"

static char path[64];

static void write_text(const char *text)
{
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

static void bench_json_without_final_newline_is_read(void)
{
    write_text("{\"op\": \"allreduce\", \"ranks\": 2, \"rows\": [{\"size\": 1024, \"busbw_gb_s\": 1.5}, "
               "{\"size\": 4096, \"busbw_gb_s\": 3.25}]}");
    sh_bench_curve c;
    CHECK_OK(sh_bench_curve_read(path, &c));
    CHECK(c.n == 2 && c.nbytes[0] == 1024 && c.busbw_gb_s[1] == 3.25, "%zu rows", c.n);
    sh_bench_curve_fini(&c);
    write_text("# size count type redop time algbw busbw"); /* a header alone, no newline */
    CHECK_RC(sh_bench_curve_read(path, &c), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "no benchmark rows") != NULL, "%s", shoal_last_error());
}

static void history_step_beyond_integers_is_a_clear_error(void)
{
    write_text("[rank 0] {\"history\": [{\"step\": 10, \"seconds\": 1.5, \"train_loss\": 2}, "
               "{\"step\": 1.8e65, \"seconds\": 3}]}");
    sh_tb_run r;
    CHECK_RC(sh_train_json_read(path, &r), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), path) && strstr(shoal_last_error(), "history entry 1") &&
              strstr(shoal_last_error(), "1.8e+65"), "%s", shoal_last_error());
    sh_tb_run_fini(&r);
    write_text("{\"history\": [{\"step\": -3e19}]}");
    CHECK_RC(sh_train_json_read(path, &r), SHOAL_ERR_FORMAT);
    sh_tb_run_fini(&r);
}

static void timeline_events_beyond_integers_are_not_steps(void)
{
    write_text("{\"traceEvents\": ["
               "{\"name\": \"step\", \"cat\": \"step\", \"ph\": \"X\", \"pid\": 0, \"dur\": 900, \"args\": {\"step\": 4}},"
               "{\"name\": \"step\", \"cat\": \"step\", \"ph\": \"X\", \"pid\": 0, \"dur\": 900, \"args\": {\"step\": 1e300}},"
               "{\"name\": \"step\", \"cat\": \"step\", \"ph\": \"X\", \"pid\": 1e20, \"dur\": 900, \"args\": {\"step\": 5}},"
               "{\"name\": \"forward\", \"cat\": \"forward\", \"ph\": \"X\", \"pid\": 0, \"dur\": 300, \"args\": {\"step\": 4}},"
               "{\"name\": \"forward\", \"cat\": \"forward\", \"ph\": \"X\", \"pid\": -1e30, \"dur\": 300, \"args\": {\"step\": 4}}]}");
    sh_breakdown b;
    CHECK_OK(sh_breakdown_read(path, 0, -1, &b));
    CHECK(b.nsteps == 1 && b.nranks == 1 && b.step[0] == 4 && b.rank[0] == 0, "%d steps, %d ranks",
          b.nsteps, b.nranks);
    if (b.nsteps == 1 && b.nranks == 1) CHECK(b.ms[1] == 0.3, "forward %g ms", b.ms[1]);
    sh_breakdown_fini(&b);
}

int main(void)
{
    check_begin("test_plot_data", 10);
    snprintf(path, sizeof path, "/tmp/shoal-test-plot-%d.json", (int)getpid());
    RUN(bench_json_without_final_newline_is_read);
    RUN(history_step_beyond_integers_is_a_clear_error);
    RUN(timeline_events_beyond_integers_are_not_steps);
    unlink(path);
    return check_end();
}
