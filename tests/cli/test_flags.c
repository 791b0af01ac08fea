/* test_flags.c — proves src/cli/flags.c on the real binary ($SHOAL_BIN): every subcommand's
 * --help comes from its table (every training option of shoal/train.h is listed, under
 * headings in order, no line wider than the layout), both spellings of a value read the
 * same, short aliases, a switch given a value, a missing value in each table's words, an
 * unknown flag naming the nearest, and "--" ending shoal launch's flags. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "lib/run.h"
#include "shoal/train.h"

static char out[1 << 16];

static int shoal(const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", sh_test_shoal_bin(), args);
    return sh_test_run(cmd, out, sizeof out);
}

static int widest_line(const char *s)
{
    int widest = 0;
    for (const char *p = s; *p;) {
        int n = (int)strcspn(p, "\n");
        if (n > widest) widest = n;
        p += n + (p[n] == '\n');
    }
    return widest;
}

static void train_help_lists_every_option_under_its_heading(void)
{
    CHECK(shoal("train --help") == 0, "exit: %s", out);
    for (size_t i = 0; shoal_train_option_at(i); i++) {
        const shoal_train_option *op = shoal_train_option_at(i);
        char flag[96], heading[96];
        snprintf(flag, sizeof flag, "\n  --%s%s%s", op->name, op->arg ? " " : "", op->arg ? op->arg : "");
        snprintf(heading, sizeof heading, "\n%s:\n", op->group);
        const char *h = strstr(out, heading), *f = strstr(out, flag);
        CHECK(f && h && h < f, "--%s is not listed under \"%s\"", op->name, op->group);
    }
    const char *order[] = {"Data and model:", "How long:", "Checkpoints:", "Output and logs:", "Ranks:", "Scaling:",
                           "Model parallelism:", "Gradient compression:", "Parameter servers:", "Fault drills:"};
    const char *prev = out;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const char *h = strstr(out, order[i]);
        CHECK(h && h > prev, "heading \"%s\" missing or out of order", order[i]);
        if (h) prev = h;
    }
    CHECK(strstr(out, "\n  -n, --nranks N ") && strstr(out, "\n  -h, --help ") && strstr(out, "Signals: SIGINT"),
          "%s", out);
    CHECK(widest_line(out) <= 90, "a help line of %d columns", widest_line(out));
}

static void every_subcommand_writes_its_help_from_its_table(void)
{
    const char *subs[] = {"test", "time", "generate", "launch", "bench", "plot"};
    const char *must[] = {"--weights FILE", "--per-layer", "--sampler S", "-n, --nranks N", "-b, --minbytes MIN",
                          "-o, --output FILE.svg"};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        char args[64];
        snprintf(args, sizeof args, "%s --help", subs[i]);
        int rc = shoal(args);
        CHECK(rc == 0 && strstr(out, "usage: shoal") && strstr(out, must[i]) && strstr(out, "-h, --help"),
              "%s: exit %d: %s", args, rc, out);
        CHECK(widest_line(out) <= 90, "%s: a line of %d columns", args, widest_line(out));
    }
}

/* args fails with exit 2 and one line holding want. */
static void usage(const char *args, const char *want)
{
    int rc = shoal(args);
    CHECK(rc == 2 && strstr(out, want) && strchr(out, '\n') == strrchr(out, '\n'), "'%s': exit %d, want \"%s\": %s",
          args, rc, want, out);
}

static void values_read_the_same_in_both_spellings(void)
{
    usage("train x.cfg --epochs abc", "--epochs \"abc\": expected an integer in 1..1000000");
    usage("train x.cfg --epochs=abc", "--epochs \"abc\": expected an integer in 1..1000000");
    usage("train x.cfg -n 0", "-n \"0\": expected an integer in 1..4096");
    usage("train x.cfg -n=0", "-n \"0\": expected an integer in 1..4096");
    usage("train x.cfg --nranks=0", "--nranks \"0\": expected an integer in 1..4096");
    usage("train x.cfg --epochs", "--epochs needs a value");
    usage("train x.cfg --compress", "--compress needs a value: none, fp16");
    usage("train x.cfg --quiet=1", "--quiet takes no value");
    usage("test x.cfg --batch", "--batch needs an integer in 1..1048576");
    usage("test x.cfg --batch=0", "--batch needs an integer in 1..1048576");
    usage("generate x.cfg --length -1", "--length needs an integer >= 0");
    usage("time x.cfg --weights", "--weights needs a file");
    usage("launch -n 0 true", "-n takes a rank count from 1 to 4096, not \"0\"");
    usage("launch --nranks=5000 true", "--nranks takes a rank count from 1 to 4096, not \"5000\"");
    usage("bench allreduce -r x", "-r takes a rank, not \"x\"");
    usage("bench allreduce --root=x", "--root takes a rank, not \"x\"");
    usage("plot a --smooth=2", "--smooth \"2\": expected a number in [0, 1)");
    usage("train a.cfg b.cfg", "unexpected argument \"b.cfg\"");
}

static void unknown_flags_name_the_nearest(void)
{
    usage("train x.cfg --epoch 3", "unknown option \"--epoch\" (did you mean \"--epochs\"?)");
    usage("train x.cfg --tensor 2", "(did you mean \"--tensor-parallel\"?)");
    usage("train x.cfg --micro-bacthes 2", "(did you mean \"--micro-batches\"?)");
    usage("launch --nrank 2 true", "unknown option --nrank (did you mean \"--nranks\"?)");
    usage("bench allreduce --itres 3", "(did you mean \"--iters\"?)");
    int rc = shoal("train x.cfg --zzzzzzzz");
    CHECK(rc == 2 && strstr(out, "unknown option \"--zzzzzzzz\"") && !strstr(out, "did you mean"), "%s", out);
}

static void dashdash_ends_launch_flags(void)
{
    int rc = shoal("launch -n 1 -- sh -c 'echo -n; echo got $0' --nranks");
    CHECK(rc == 0 && strstr(out, "got --nranks"), "exit %d: %s", rc, out);
    rc = shoal("launch --nranks=1 printf '%s\\n' --help");
    CHECK(rc == 0 && strstr(out, "[rank 0] --help"), "the command's own flags are its: exit %d: %s", rc, out);
}

int main(void)
{
    check_begin("test_flags", 120);
    RUN(train_help_lists_every_option_under_its_heading);
    RUN(every_subcommand_writes_its_help_from_its_table);
    RUN(values_read_the_same_in_both_spellings);
    RUN(unknown_flags_name_the_nearest);
    RUN(dashdash_ends_launch_flags);
    return check_end();
}
