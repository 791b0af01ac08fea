/* test_cli.c — proves src/cli/main.c and cmd_env.c: dispatch, exit codes, --help. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

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
    RUN(help_lists_subcommands_and_exits_zero);
    RUN(every_subcommand_has_help);
    RUN(info_lists_defaulted_cfg_keys);
    RUN(env_prints_every_shoal_variable);
    return check_end();
}
