/* test_cli.c — proves src/cli/main.c, cmd_env.c and cmd_version.c: dispatch, exit codes, --help,
 * the nearest subcommand and flag of every subcommand for a mistyped one, --version; and
 * src/nn/cfg.c's word on Darknet's augmentation keys. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "lib/run.h"

/* Run the shoal binary with args through the shell; return its exit status, capture output. */
static int run_shoal(const char *args, char *out, size_t out_nbytes)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", sh_test_shoal_bin(), args);
    return sh_test_run(cmd, out, out_nbytes);
}

static void unknown_subcommand_is_usage_error(void)
{
    char out[8192];
    int rc = run_shoal("frobnicate", out, sizeof out);
    CHECK(rc == 2, "exit %d, want 2; output: %s", rc, out);
    CHECK(strstr(out, "unknown subcommand \"frobnicate\"") != NULL, "output: %s", out);
}

/* A mistyped subcommand is named with the nearest, in one line (not the whole usage). */
static void mistyped_subcommand_gets_the_nearest(void)
{
    char out[8192];
    const char *typos[][2] = {{"trian", "train"}, {"tset", "test"}, {"genrate", "generate"}, {"lauch", "launch"},
                              {"bnech", "bench"}, {"plto", "plot"}, {"versoin", "version"}};
    for (size_t i = 0; i < sizeof typos / sizeof typos[0]; i++) {
        int rc = run_shoal(typos[i][0], out, sizeof out);
        char want[64];
        snprintf(want, sizeof want, "(did you mean \"%s\"?)", typos[i][1]);
        CHECK(rc == 2 && strstr(out, want) && strchr(out, '\n') == out + strlen(out) - 1, "%s: exit %d: %s",
              typos[i][0], rc, out);
    }
}

/* Every subcommand's table names the nearest flag of a mistyped one (a missing dash too). */
static void mistyped_flags_get_the_nearest_in_every_subcommand(void)
{
    const char *cases[][2] = {{"train x.cfg --epoch 3", "--epochs"}, {"train x.cfg -epochs 3", "--epochs"},
                              {"test x.cfg --weight w", "--weights"}, {"time x.cfg --iteration 3", "--iterations"},
                              {"generate x.cfg --lenght 3", "--length"}, {"generate x.cfg --prim a", "--prime"},
                              {"launch --output-dr d -n 2 true", "--output-dir"}, {"bench allreduce --iter 3", "--iters"},
                              {"plot --titel t", "--title"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[8192], want[64];
        int rc = run_shoal(cases[i][0], out, sizeof out);
        snprintf(want, sizeof want, "(did you mean \"%s\"?)", cases[i][1]);
        CHECK(rc == 2 && strstr(out, want), "%s: exit %d: %s", cases[i][0], rc, out);
    }
}

/* shoal --version and shoal version: the version, the commit, the BLAS, the CPU's sets. */
static void version_says_what_was_built_and_what_runs(void)
{
    char a[4096], b[4096];
    int rc = run_shoal("--version", a, sizeof a);
    CHECK(rc == 0 && !strncmp(a, "shoal 0.", 8) && strstr(a, "(commit ") && strstr(a, "\nBLAS: ") &&
              strstr(a, "\nCPU: compiled for ") && strstr(a, "this CPU has") && strstr(a, "chosen at run time"),
          "exit %d: %s", rc, a);
    CHECK(run_shoal("version", b, sizeof b) == 0 && !strcmp(a, b), "shoal version differs: %s", b);
    CHECK(strstr(a, "(commit unknown)") == NULL || system("git rev-parse HEAD >/dev/null 2>&1") != 0,
          "built in git, yet no commit: %s", a);
}

/* Darknet's augmentation keys in [net] ([net] flip, jitter) have no effect on IDX data: said
 * once at the default level, in one line naming them; silent at SHOAL_LOG=error. */
static void augmentation_keys_are_said_once(void)
{
    char path[] = "/tmp/shoal-aug-XXXXXX", out[8192], args[256];
    int fd = mkstemp(path);
    const char cfg[] = "[net]\nbatch=2\nwidth=4\nheight=4\nchannels=1\nflip=1\njitter=.2\n"
                       "[connected]\noutput=3\n[softmax]\n";
    CHECK(fd >= 0 && write(fd, cfg, sizeof cfg - 1) == (ssize_t)(sizeof cfg - 1), "write %s", path);
    if (fd >= 0) close(fd);
    snprintf(args, sizeof args, "time %s --iterations 1", path);
    int rc = run_shoal(args, out, sizeof out);
    const char *p = strstr(out, "jitter=.2: Darknet's data augmentation");
    CHECK(rc == 0 && p && strchr(p, '\n') && !strstr(strchr(p, '\n'), "augmentation"), "exit %d: %s", rc, out);
    setenv("SHOAL_LOG", "error", 1);
    rc = run_shoal(args, out, sizeof out);
    unsetenv("SHOAL_LOG");
    CHECK(rc == 0 && !strstr(out, "augmentation"), "SHOAL_LOG=error: %s", out);
    unlink(path);
}

static void no_subcommand_is_usage_error(void)
{
    char out[8192];
    int rc = run_shoal("", out, sizeof out);
    CHECK(rc == 2, "exit %d, want 2", rc);
    CHECK(strstr(out, "usage: shoal") != NULL, "output: %s", out);
}

static void help_lists_subcommands_and_exits_zero(void)
{
    char out[8192];
    int rc = run_shoal("--help", out, sizeof out);
    CHECK(rc == 0, "exit %d", rc);
    const char *subs[] = {"train", "test", "time", "plan", "launch", "bench", "env"};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        CHECK(strstr(out, subs[i]) != NULL, "help lacks %s", subs[i]);
}

static void every_subcommand_has_help(void)
{
    const char *subs[] = {"train", "test", "time", "plan", "launch", "bench", "env"};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        char out[16384], args[64];
        snprintf(args, sizeof args, "%s --help", subs[i]);
        int rc = run_shoal(args, out, sizeof out);
        CHECK(rc == 0, "shoal %s --help exit %d; output: %s", subs[i], rc, out);
        CHECK(strstr(out, "usage: shoal") != NULL, "shoal %s --help lacks usage: %s", subs[i], out);
    }
}

static void env_prints_every_shoal_variable(void)
{
    char out[32768];
    int rc = run_shoal("env", out, sizeof out);
    CHECK(rc == 0, "exit %d", rc);
    CHECK(strstr(out, "SHOAL_TIMEOUT") && strstr(out, "SHOAL_TRANSPORT") && strstr(out, "PMI_RANK"),
          "table incomplete: %.200s", out);
    rc = run_shoal("env --bogus", out, sizeof out);
    CHECK(rc == 2, "unexpected argument exit %d", rc);
}

/* At info level a model file's defaulted keys are listed once, with section and line. */
static void info_lists_defaulted_cfg_keys(void)
{
    char out[16384];
    int rc = run_shoal("time examples/lenet.cfg --iterations 1 --batch 2", out, sizeof out);
    CHECK(rc == 0, "exit %d: %s", rc, out);
    CHECK(strstr(out, "keys left at their defaults") == NULL, "listed without SHOAL_LOG=info: %s", out);
    setenv("SHOAL_LOG", "info", 1);
    rc = run_shoal("time examples/lenet.cfg --iterations 1 --batch 2", out, sizeof out);
    unsetenv("SHOAL_LOG");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    const char *p = strstr(out, "keys left at their defaults");
    CHECK(p != NULL && strstr(p, "[convolutional]:24 groups") != NULL, "%s", out);
    CHECK(p && strstr(p + 1, "keys left at their defaults") == NULL, "listed twice: %s", out);
}

int main(void)
{
    check_begin("test_cli", 60);
    RUN(unknown_subcommand_is_usage_error);
    RUN(no_subcommand_is_usage_error);
    RUN(mistyped_subcommand_gets_the_nearest);
    RUN(mistyped_flags_get_the_nearest_in_every_subcommand);
    RUN(version_says_what_was_built_and_what_runs);
    RUN(augmentation_keys_are_said_once);
    RUN(help_lists_subcommands_and_exits_zero);
    RUN(every_subcommand_has_help);
    RUN(info_lists_defaulted_cfg_keys);
    RUN(env_prints_every_shoal_variable);
    return check_end();
}
