/* test_plot.c — proves `shoal plot` (src/cli/cmd_plot.c, src/io/tb_read.c, plot_data.c) and
 * `shoal bench --plot` end to end: two real runs' --logdir give a chart whose polylines hold
 * one point per logged step, against steps, epochs or wall time, named in the legend; a
 * saved train --json report gives one point per evaluation; a -n 2 timeline gives stacked bars for every step and rank; benchmark outputs in three
 * formats (shoal bench --json under launch, the peers' JSON lines, an nccl-tests table) and
 * rows of x and y with their own axes
 * give one curve each; bad input (a missing run, a directory without event files, a
 * damaged event file, a non-JSON trace, a file without benchmark rows, .png, unknown
 * flags or tags) is refused with one line naming it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lib/run.h"
#include "train/tiny_data.h"

static char dir[256], out[1 << 16], svg[1 << 20];

static int sh(const char *fmt, const char *arg)
{
    char cmd[4096], body[3000];
    snprintf(body, sizeof body, fmt, arg ? arg : "");
    snprintf(cmd, sizeof cmd, "cd %s && %s 2>&1", dir, body);
    return sh_test_run(cmd, out, sizeof out);
}

static int plot(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s plot %s 2>&1", dir, sh_test_shoal_bin(), args);
    return sh_test_run(cmd, out, sizeof out);
}

static int load(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    svg[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(svg, 1, sizeof svg - 1, f);
    svg[n] = 0;
    fclose(f);
    return strstr(svg, "<svg") && strstr(svg, "</svg>");
}

static int count(const char *needle)
{
    int n = 0;
    for (const char *p = svg; (p = strstr(p, needle)); p++) n++;
    return n;
}

/* points of every polyline, in order */
static int polyline_points(int *npts, int max)
{
    int k = 0;
    for (const char *p = svg; k < max && (p = strstr(p, "points=\"")); p++) {
        int n = 0;
        for (const char *q = p + 8; *q && *q != '"'; q++) n += *q == ',';
        npts[k++] = n;
    }
    return k;
}

static void two_runs_draw_their_curves(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s train mlp.cfg --data . --max-steps 12 --threads 1 --quiet --logdir runA && "
                              "%s train other.cfg --data . --max-steps 9 --threads 1 --quiet --logdir runB -n 2",
             sh_test_shoal_bin(), sh_test_shoal_bin());
    int rc = sh("%s", cmd);
    CHECK(rc == 0, "training: %s", out);
    rc = plot("runA runB/ -o curves.svg");
    CHECK(rc == 0 && strstr(out, "wrote curves.svg"), "exit %d: %s", rc, out);
    CHECK(load("curves.svg"), "curves.svg is not an SVG document");
    int npts[16] = {0}, k = polyline_points(npts, 16);
    /* loss panel: runA train (12 points), runA test (1), runB train (9), runB test (1); then accuracy */
    CHECK(k == 8, "%d curves", k);
    if (k == 8) CHECK(npts[0] == 12 && npts[1] >= 1 && npts[2] == 9 && npts[3] >= 1 && npts[4] == 12 && npts[6] == 9,
                      "points per curve %d %d %d %d %d %d", npts[0], npts[1], npts[2], npts[3], npts[4], npts[6]);
    CHECK(strstr(svg, ">runA: train/loss<") && strstr(svg, ">runB: test/accuracy<"), "legend lacks the runs");
    CHECK(strstr(svg, ">loss (cross-entropy)<") && strstr(svg, ">accuracy (fraction)<") && strstr(svg, ">step<"),
          "axis labels with units");
    rc = plot("runA -o e.svg --x epoch");
    CHECK(rc == 0 && load("e.svg") && strstr(svg, ">epoch<"), "--x epoch: %s", out);
    rc = plot("runA -o t.svg --x time --smooth 0.5");
    CHECK(rc == 0 && load("t.svg") && strstr(svg, ">wall time (s)<"), "--x time: %s", out);
    rc = plot("runB -o c.svg --tag comm/busbw_gb_s --tag train/images_per_s");
    CHECK(rc == 0 && load("c.svg") && strstr(svg, ">bus bandwidth (GB/s)<") && strstr(svg, ">images/s<"),
          "--tag panels: %s", out);
    k = polyline_points(npts, 16);
    CHECK(k == 2 && npts[0] == 9 && npts[1] == 9, "%d tag curves (%d, %d points)", k, npts[0], npts[1]);
}

/* a saved `shoal train --json` (here of two ranks: launcher prefixes and all) is a run too:
 * one point per evaluation */
static void train_json_output_is_a_run(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s train other.cfg --data . --epochs 3 --threads 1 --quiet --json -n 2 > r.json",
             sh_test_shoal_bin());
    int rc = sh("%s", cmd);
    CHECK(rc == 0, "training: %s", out);
    rc = plot("r.json -o j.svg --x epoch");
    CHECK(rc == 0 && load("j.svg"), "exit %d: %s", rc, out);
    int npts[8] = {0}, k = polyline_points(npts, 8);
    /* train/loss, test/loss; test/accuracy (no per-step train accuracy in the report) */
    CHECK(k == 3 && npts[0] == 3 && npts[1] == 3 && npts[2] == 3, "%d curves: %d %d %d points", k, npts[0], npts[1],
          npts[2]);
    CHECK(strstr(svg, ">test/accuracy<") && strstr(svg, ">epoch<"), "labels");
    /* the report cut short: the message says where it stops parsing */
    sh("head -c 300 r.json > cut.json", NULL);
    rc = plot("cut.json -o c.svg");
    CHECK(rc == 1 && strstr(out, "does not parse (line 1, column") && strstr(out, "cut short"), "%s", out);
}

static void timeline_draws_a_bar_per_step_and_rank(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s train mlp.cfg --data . -n 2 --max-steps 8 --threads 1 --quiet --timeline tl.json",
             sh_test_shoal_bin());
    int rc = sh("%s", cmd);
    CHECK(rc == 0, "training: %s", out);
    rc = plot("--timeline tl.json -o tl.svg --steps 2:7");
    CHECK(rc == 0 && strstr(out, "5 steps x 2 ranks"), "exit %d: %s", rc, out);
    CHECK(load("tl.svg"), "tl.svg");
    /* forward and backward are never empty: at least 2 pieces per bar, 5 steps x 2 ranks */
    int pieces = count("<rect x=") - 1 - 5; /* the frame; the 5 legend swatches */
    CHECK(pieces >= 2 * 10, "%d bar pieces", pieces);
    CHECK(strstr(svg, ">waiting for communication<") && strstr(svg, ">time (ms)<") && strstr(svg, ">r1<"), "labels");
}

/* A pipeline's stages: each bar holds the stage's micro-batches' forward and backward. */
static void pipeline_timeline_bars_hold_the_micro_batches(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s train mlp.cfg --data . -n 2 --pipeline 2 --micro-batches 4 --max-steps 4 "
             "--threads 1 --quiet --timeline pl.json", sh_test_shoal_bin());
    int rc = sh("%s", cmd);
    CHECK(rc == 0, "training: %s", out);
    rc = plot("--timeline pl.json -o pl.svg");
    CHECK(rc == 0 && strstr(out, "4 steps x 2 ranks"), "exit %d: %s", rc, out);
    CHECK(load("pl.svg"), "pl.svg");
    int pieces = count("<rect x=") - 1 - 5; /* the frame; the 5 legend swatches */
    CHECK(pieces >= 2 * 8, "%d bar pieces, want forward and backward in each of 8 bars", pieces);
}

static void benchmark_outputs_give_one_curve_each(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s launch -n 2 %s bench allreduce -b 8 -e 4K -f 4 -n 3 -w 1 --json --plot own.svg "
                              ">shoal.out", sh_test_shoal_bin(), sh_test_shoal_bin());
    int rc = sh("%s", cmd);
    CHECK(rc == 0, "bench: %s", out);
    CHECK(load("own.svg") && count("points=\"") == 2, "bench --plot: %d curves", count("points=\""));
    int npts[4] = {0};
    polyline_points(npts, 4);
    CHECK(npts[0] == 6, "bench --plot: %d sizes, want 6 (8 B to 4 KiB by 4)", npts[0]);
    tiny_write_file(dir, "peer.jsonl", "{\"size\": 8, \"time_us\": 3.1, \"busbw_gb_s\": 0.002}\n"
                                       "{\"size\": 1024, \"time_us\": 5.0, \"busbw_gb_s\": 0.2}\n"
                                       "{\"size\": 1048576, \"time_us\": 300, \"busbw_gb_s\": 3.5}\n");
    tiny_write_file(dir, "nccl.txt", "# nccl-tests style\n"
                                     "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
                                     "           8             2     float     sum      -1     5.00    0.00    0.00      0\n"
                                     "        4096          1024     float     sum      -1     9.00    0.46    0.46      0\n");
    rc = plot("--bench shoal.out peer.jsonl nccl.txt -o bench.svg");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    CHECK(load("bench.svg"), "bench.svg");
    polyline_points(npts, 4);
    CHECK(count("points=\"") == 3 && npts[0] == 6 && npts[1] == 3 && npts[2] == 2, "curves %d: %d %d %d points",
          count("points=\""), npts[0], npts[1], npts[2]);
    CHECK(strstr(svg, ">shoal allreduce, 2 ranks<") && strstr(svg, ">peer.jsonl<") && strstr(svg, "KiB<"),
          "legend or byte ticks");
}

/* Rows of any measure (bench/scaling): x and y, the axes named by the rows. */
static void xy_rows_draw_their_own_axes(void)
{
    tiny_write_file(dir, "s.jsonl", "{\"x\": 1, \"y\": 10, \"x_label\": \"batch\", \"y_label\": \"images/s\", "
                                     "\"label\": \"shoal alexnet\"}\n{\"x\": 2, \"y\": 18}\n{\"x\": 4, \"y\": 30}\n");
    tiny_write_file(dir, "t.jsonl", "{\"x\": 1, \"y\": 8, \"label\": \"torch alexnet\"}\n{\"x\": 4, \"y\": 20}\n");
    int rc = plot("--bench s.jsonl t.jsonl -o xy.svg");
    CHECK(rc == 0 && load("xy.svg"), "exit %d: %s", rc, out);
    int npts[4] = {0};
    polyline_points(npts, 4);
    CHECK(count("points=\"") == 2 && npts[0] == 3 && npts[1] == 2, "curves %d: %d %d points", count("points=\""),
          npts[0], npts[1]);
    CHECK(strstr(svg, ">images/s against batch<") && strstr(svg, ">shoal alexnet<") && strstr(svg, ">torch alexnet<") &&
          !strstr(svg, "KiB<"), "axes, legend, linear ticks");
}

static int one_line(void)
{
    const char *nl = strchr(out, '\n');
    return nl && nl == strrchr(out, '\n');
}

static void bad_input_is_refused_in_one_line(void)
{
    CHECK(plot("nosuchrun -o x.svg") == 1 && strstr(out, "nosuchrun") && one_line(), "%s", out);
    sh("mkdir -p emptyrun", NULL);
    CHECK(plot("emptyrun -o x.svg") == 1 && strstr(out, "holds no events.out.tfevents") && one_line(), "%s", out);
    /* damage one byte inside the first record's data of runA's file */
    sh("cp -r runA bad && f=$(ls bad/events.out.tfevents.*) && printf 'X' | dd of=$f bs=1 seek=14 conv=notrunc", NULL);
    CHECK(plot("bad -o x.svg") == 1 && strstr(out, "CRC") && strstr(out, "bad/events.out") && one_line(), "%s", out);
    tiny_write_file(dir, "notjson.json", "this is not a trace\n");
    CHECK(plot("--timeline notjson.json -o x.svg") == 1 && strstr(out, "not JSON") && one_line(), "%s", out);
    tiny_write_file(dir, "empty.json", "{\"traceEvents\": []}");
    CHECK(plot("--timeline empty.json -o x.svg") == 1 && strstr(out, "no step events") && one_line(), "%s", out);
    /* a crafted trace: each step event at its own step and rank claims steps x ranks cells */
    size_t cap = 4000 * 96 + 64, len = 0;
    char *sparse = malloc(cap);
    if (sparse) {
        len += (size_t)snprintf(sparse + len, cap - len, "{\"traceEvents\": [");
        for (int i = 0; i < 4000; i++)
            len += (size_t)snprintf(sparse + len, cap - len, "%s{\"ph\":\"X\",\"cat\":\"step\",\"name\":\"step\","
                                    "\"pid\":%d,\"dur\":1,\"args\":{\"step\":%d}}", i ? "," : "", i, i);
        snprintf(sparse + len, cap - len, "]}");
        tiny_write_file(dir, "sparse.json", sparse);
        free(sparse);
        CHECK(plot("--timeline sparse.json -o x.svg") == 1 && strstr(out, "spread over 4000 steps and 4000 ranks") &&
              one_line(), "%s", out);
    }
    tiny_write_file(dir, "rows.txt", "nothing to see\n");
    CHECK(plot("--bench rows.txt -o x.svg") == 1 && strstr(out, "no benchmark rows") && one_line(), "%s", out);
    CHECK(plot("runA -o x.png") == 2 && strstr(out, "SVG") && one_line(), "%s", out);
    CHECK(plot("runA --x hours") == 2 && strstr(out, "--x") && one_line(), "%s", out);
    CHECK(plot("runA --bogus") == 2 && strstr(out, "--bogus") && one_line(), "%s", out);
    CHECK(plot("tl.json -o x.svg") == 1 && strstr(out, "is a timeline") && strstr(out, "--timeline") && one_line(),
          "%s", out);
    CHECK(plot("runA --tag no/such -o x.svg") == 1 && strstr(out, "no/such") && one_line(), "%s", out);
    CHECK(plot("") == 2 && one_line(), "%s", out);
    CHECK(plot("--timeline tl.json --steps 9:3") == 2 && strstr(out, "--steps") && one_line(), "%s", out);
}

int main(void)
{
    check_begin("test_plot", 120);
    if (tiny_make_dir(dir, sizeof dir) != 0) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(two_runs_draw_their_curves);
    RUN(train_json_output_is_a_run);
    RUN(timeline_draws_a_bar_per_step_and_rank);
    RUN(pipeline_timeline_bars_hold_the_micro_batches);
    RUN(benchmark_outputs_give_one_curve_each);
    RUN(xy_rows_draw_their_own_axes);
    RUN(bad_input_is_refused_in_one_line);
    tiny_remove_dir(dir); /* rm -rf: the run directories go too */
    return check_end();
}
