/* test_train_cli.c — proves src/cli/cmd_train.c, cmd_test.c and cmd_time.c on the real
 * binary ($SHOAL_BIN): help and usage errors, --json objects, test agreeing with train, time
 * per layer, and real signals: SIGHUP saves and goes on, SIGINT saves and ends as SIGINT does
 * (the shell's 130). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "io/checkpoint.h"
#include "nn/net.h"
#include "train/tiny_data.h"
#include "lib/run.h"

static char dir[256];

static const char *shoal_bin(void) { return sh_test_shoal_bin(); }

/* Run `shoal ARGS` through the shell; capture stdout (and stderr when merge). Exit status or
 * -1 when it did not exit normally. */
static int run_shoal(const char *args, int merge, char *out, size_t out_nbytes)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s %s", shoal_bin(), args, merge ? "2>&1" : "2>/dev/null");
    return sh_test_run(cmd, out, out_nbytes);
}

/* The number after "key": in a JSON object, or NAN. */
static double json_num(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void help_of_each_command_exits_zero(void)
{
    const char *cmds[] = {"train", "test", "time"};
    const char *must[] = {"--resume", "--weights", "--per-layer"};
    for (int i = 0; i < 3; i++) {
        char out[32768], args[64];
        snprintf(args, sizeof args, "%s --help", cmds[i]);
        int rc = run_shoal(args, 1, out, sizeof out);
        CHECK(rc == 0, "%s: exit %d", args, rc);
        CHECK(strstr(out, "usage: shoal") && strstr(out, must[i]), "%s: %s", args, out);
    }
}

static void wrong_usage_exits_two_with_one_line(void)
{
    char out[8192], args[1024];
    const char *bad[] = {"train %s/mlp.cfg --bogus", "train %s/mlp.cfg --epochs",
                         "train %s/mlp.cfg --epochs abc", "train", "test %s/mlp.cfg",
                         "time %s/mlp.cfg --iterations 0", "time %s/mlp.cfg extra",
                         "train %s/mlp.cfg --save-every 5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, bad[i], dir);
        int rc = run_shoal(args, 1, out, sizeof out);
        CHECK(rc == 2, "'%s': exit %d, want 2; output: %s", args, rc, out);
        CHECK(count_lines(out) == 1 && strncmp(out, "shoal ", 6) == 0,
              "'%s': want one line, got: %s", args, out);
    }
}

static void failure_exits_one_with_a_message(void)
{
    char out[8192], args[1024];
    int rc = run_shoal("train /nonexistent/model.cfg --quiet", 1, out, sizeof out);
    CHECK(rc == 1, "exit %d", rc);
    CHECK(strncmp(out, "shoal: ", 7) == 0 && strstr(out, "/nonexistent/model.cfg"),
          "output: %s", out);
    snprintf(args, sizeof args, "time %s/mlp.cfg --iterations 1 --batch 2 --threads 1 --json",
             dir);
    rc = run_shoal(args, 0, out, sizeof out);
    CHECK(rc == 0, "time on the tiny mlp: exit %d", rc);
    snprintf(args, sizeof args, "test %s/mlp.cfg --weights %s/none.ckpt --data %s", dir, dir, dir);
    rc = run_shoal(args, 1, out, sizeof out);
    CHECK(rc == 1 && strncmp(out, "shoal: ", 7) == 0 && strstr(out, "none.ckpt"),
          "missing weights: exit %d output %s", rc, out);
}

static void train_json_then_test_agree(void)
{
    char out[16384], args[2048], ckpt[600];
    snprintf(ckpt, sizeof ckpt, "%s/cli.ckpt", dir);
    snprintf(args, sizeof args,
             "train %s/mlp.cfg --data %s --epochs 3 --threads 1 --seed 3 --save %s --json", dir,
             dir, ckpt);
    int rc = run_shoal(args, 0, out, sizeof out);
    CHECK(rc == 0, "train exit %d", rc);
    CHECK(out[0] == '{' && count_lines(out) == 1, "stdout is not one JSON object: %s", out);
    const char *keys[] = {"accuracy", "loss", "images_per_s", "epochs", "steps", "seconds",
                          "peak_rss_mb"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CHECK(!isnan(json_num(out, keys[i])), "no \"%s\" in %s", keys[i], out);
    double acc = json_num(out, "accuracy");
    CHECK(acc > 0.9 && acc <= 1.0, "accuracy %g", acc);
    CHECK(json_num(out, "steps") == 3 * TINY_TRAIN / 16, "steps in %s", out);
    CHECK(json_num(out, "epochs") == 3, "epochs in %s", out);
    CHECK(json_num(out, "peak_rss_mb") > 1, "peak rss in %s", out);

    snprintf(args, sizeof args, "test %s/mlp.cfg --weights %s --data %s --threads 1 --json", dir,
             ckpt, dir);
    rc = run_shoal(args, 0, out, sizeof out);
    CHECK(rc == 0, "test exit %d: %s", rc, out);
    CHECK(fabs(json_num(out, "accuracy") - acc) < 1e-6, "test says %s, train said %g", out, acc);
    CHECK(json_num(out, "images") == TINY_TEST, "images in %s", out);

    snprintf(args, sizeof args, "test %s/other.cfg --weights %s --data %s", dir, ckpt, dir);
    rc = run_shoal(args, 1, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "another model"), "other model: exit %d: %s", rc, out);
}

/* --profile on one process prints where a step's time goes (it printed nothing before), and
 * the parts add up to the total it prints. */
static void profile_on_one_process(void)
{
    char out[16384], args[2048];
    snprintf(args, sizeof args, "train %s/mlp.cfg --data %s --max-steps 20 --threads 1 --quiet --profile", dir, dir);
    int rc = run_shoal(args, 1, out, sizeof out);
    CHECK(rc == 0, "exit %d: %s", rc, out);
    double d = NAN, f = NAN, b = NAN, o = NAN, t = NAN;
    const char *line = strstr(out, "profile per step (ms): ");
    CHECK(line && sscanf(line, "profile per step (ms): data %lf, forward %lf, backward %lf, optimizer %lf, total %lf",
                         &d, &f, &b, &o, &t) == 5, "no profile line: %s", out);
    /* the tiny model's step is microseconds: the parts print as 0.00-0.01 ms */
    CHECK(t > 0 && fabs(d + f + b + o - t) <= 0.03, "parts %g %g %g %g, total %g: %s", d, f, b, o, t, out);
}

static void logdir_gets_a_tensorboard_event_file(void)
{
    char out[16384], args[2048];
    snprintf(args, sizeof args,
             "train %s/mlp.cfg --data %s --max-steps 3 --threads 1 --logdir %s/tb --quiet", dir,
             dir, dir);
    int rc = run_shoal(args, 1, out, sizeof out);
    CHECK(rc == 0, "exit %d: %s", rc, out);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls -R %s/tb", dir); /* the run's folder in it */
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    if (p) pclose(p);
    CHECK(strstr(out, "events.out.tfevents.") != NULL, "logdir holds: %s", out);
}

static void data_dir_defaults_to_shoal_data_dir(void)
{
    char out[16384], args[2048];
    snprintf(args, sizeof args, "train %s/mlp.cfg --max-steps 2 --threads 1 --json", dir);
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "SHOAL_DATA_DIR=%s %s %s 2>/dev/null", dir, shoal_bin(), args);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    int rc = p ? pclose(p) : -1;
    CHECK(rc == 0 && json_num(out, "steps") == 2, "SHOAL_DATA_DIR run: %s", out);
    snprintf(cmd, sizeof cmd, "SHOAL_DATA_DIR=%s/nowhere %s %s 2>&1", dir, shoal_bin(), args);
    p = popen(cmd, "r");
    n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    rc = p ? pclose(p) : -1;
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 1 && strstr(out, "nowhere"),
          "missing SHOAL_DATA_DIR: %s", out);
}

static void time_reports_forward_backward_and_layers(void)
{
    char out[16384], args[1024];
    snprintf(args, sizeof args, "time %s/conv.cfg --iterations 3 --per-layer --threads 1 --json",
             dir);
    int rc = run_shoal(args, 0, out, sizeof out);
    CHECK(rc == 0, "exit %d", rc);
    double f = json_num(out, "forward_ms"), b = json_num(out, "backward_ms");
    double total = json_num(out, "total_ms");
    CHECK(f > 0 && b > 0 && fabs(total - (f + b)) < 1e-3, "%s", out);
    int nlayers = 0;
    for (const char *p = out; (p = strstr(p, "\"name\":")) != NULL; p++) nlayers++;
    CHECK(nlayers >= 4, "%d layers in %s", nlayers, out);
    snprintf(args, sizeof args, "time %s/conv.cfg --iterations 2 --batch 3", dir);
    rc = run_shoal(args, 1, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "Average Forward pass:") && strstr(out, "Average Backward pass:")
              && strstr(out, "batch 3"),
          "exit %d: %s", rc, out);
}

/* Start `shoal train` in dir with output to dir/log; returns the pid. */
static pid_t start_train(const char *log)
{
    pid_t pid = fork();
    if (pid != 0) return pid;
    /* Never outlive the test (its deadline _exits): the run below would go on for hours. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || chdir(dir) != 0) _exit(127);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(shoal_bin(), shoal_bin(), "train", "mlp.cfg", "--data", ".", "--epochs", "1000000",
          "--threads", "1", (char *)NULL);
    _exit(127);
}

/* 1 when the file holds needle anywhere (read in chunks: the log of a fast run grows by
 * megabytes). */
static int file_contains(const char *path, const char *needle)
{
    static char buf[(1 << 16) + 256];
    size_t keep = strlen(needle) - 1, have = 0; /* a needle may straddle two chunks */
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    int found = 0;
    size_t n;
    while (!found && (n = fread(buf + have, 1, (1 << 16), f)) > 0) {
        have += n;
        buf[have] = 0;
        found = memmem(buf, have, needle, keep + 1) != NULL;
        if (have > keep) {
            memmove(buf, buf + have - keep, keep);
            have = keep;
        }
    }
    fclose(f);
    return found;
}

/* Wait up to timeout_ms for path's content to contain needle. */
static int wait_for_text(const char *path, const char *needle, int timeout_ms)
{
    for (int waited = 0; waited <= timeout_ms; waited += 10) {
        if (file_contains(path, needle)) return 1;
        usleep(10000);
    }
    return 0;
}

static void sighup_saves_and_sigint_saves_and_exits_130(void)
{
    char log[600], ckpt[600];
    snprintf(log, sizeof log, "%s/train.log", dir);
    snprintf(ckpt, sizeof ckpt, "%s/mlp.ckpt", dir);
    unlink(ckpt);
    pid_t pid = start_train(log);
    CHECK(pid > 0, "fork");
    if (pid <= 0) return;
    CHECK(wait_for_text(log, "epoch 2:", 20000), "training did not reach epoch 2");
    kill(pid, SIGHUP);
    CHECK(wait_for_text(log, "saved mlp.ckpt", 10000), "no save after SIGHUP");
    struct stat st;
    CHECK(stat(ckpt, &st) == 0, "SIGHUP wrote no %s", ckpt);
    CHECK(waitpid(pid, NULL, WNOHANG) == 0, "training ended after SIGHUP");
    unlink(ckpt);
    kill(pid, SIGINT);
    int status = 0;
    pid_t got = 0;
    for (int waited = 0; waited < 10000 && got == 0; waited += 10) {
        got = waitpid(pid, &status, WNOHANG);
        if (got == 0) usleep(10000);
    }
    if (got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        CHECK(0, "shoal train did not stop within 10 s of SIGINT");
        return;
    }
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT, "status %d: not ended as SIGINT ends (130)", status);
    CHECK(wait_for_text(log, "stopped by SIGINT; saved mlp.ckpt", 10), "no stop message");
    CHECK(stat(ckpt, &st) == 0, "SIGINT wrote no %s", ckpt);

    /* The saved state resumes. */
    char out[16384], args[2048];
    snprintf(args, sizeof args,
             "train %s --data %s --resume %s --max-steps 1 --threads 1 --json", "mlp.cfg", dir,
             ckpt);
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "cd %s && %s %s 2>/dev/null", dir, shoal_bin(), args);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    int rc = p ? pclose(p) : -1;
    CHECK(rc == 0 && json_num(out, "steps") > 32, "resume after SIGINT: %s", out);
}

/* Run `cd dir && shoal ARGS` (stderr dropped); the "steps" of its JSON, or -1. */
static long long train_steps_json(const char *args)
{
    char cmd[4400], out[8192];
    snprintf(cmd, sizeof cmd, "cd %s && %s train mlp.cfg --data . --threads 1 --quiet --json %s "
             "2>/dev/null", dir, shoal_bin(), args);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    int rc = p ? pclose(p) : -1;
    double steps = json_num(out, "steps");
    return rc == 0 && !isnan(steps) ? (long long)steps : -1;
}

/* The "params" section of a checkpoint of dir/mlp.cfg, malloc'd; NULL when unreadable. */
static float *load_params(const char *path, size_t *n)
{
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/mlp.cfg", dir);
    sh_net *net = NULL;
    if (sh_net_load(cfg, 0, 1, &net) != SHOAL_OK) return NULL;
    *n = sh_net_nparams(net);
    sh_net_destroy(net);
    float *p = malloc(*n * sizeof(float));
    sh_ckpt_section s = {"params", p, *n * sizeof(float)};
    if (sh_ckpt_load(path, &s, 1) != SHOAL_OK) {
        free(p);
        return NULL;
    }
    return p;
}

static void killed_run_resumes_from_its_periodic_checkpoint_bitwise(void)
{
    char log[600], ckpt[600];
    snprintf(log, sizeof log, "%s/every.log", dir);
    snprintf(ckpt, sizeof ckpt, "%s/every.ckpt", dir);
    unlink(ckpt);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || chdir(dir) != 0) _exit(127);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(shoal_bin(), shoal_bin(), "train", "mlp.cfg", "--data", ".", "--epochs", "1000000",
              "--threads", "1", "--seed", "5", "--save", "every.ckpt", "--save-every", "7",
              (char *)NULL);
        _exit(127);
    }
    CHECK(pid > 0, "fork");
    if (pid <= 0) return;
    CHECK(wait_for_text(log, "(--save-every)", 20000), "no periodic checkpoint");
    kill(pid, SIGKILL); /* a crash: no chance to save at exit */
    waitpid(pid, NULL, 0);
    /* Where the last checkpoint stands: a resume planned for 1 step does no step. */
    long long k = train_steps_json("--resume every.ckpt --max-steps 1");
    CHECK(k > 0 && k % 7 == 0, "periodic checkpoint at step %lld, want a multiple of 7", k);
    if (k <= 0) return;
    char args[512];
    snprintf(args, sizeof args, "--seed 5 --max-steps %lld --save straight.ckpt", k + 9);
    CHECK(train_steps_json(args) == k + 9, "straight run");
    snprintf(args, sizeof args, "--resume every.ckpt --max-steps %lld --save resumed.ckpt", k + 9);
    CHECK(train_steps_json(args) == k + 9, "resumed run");
    char a_path[600], b_path[600];
    snprintf(a_path, sizeof a_path, "%s/straight.ckpt", dir);
    snprintf(b_path, sizeof b_path, "%s/resumed.ckpt", dir);
    size_t na = 0, nb = 0;
    float *a = load_params(a_path, &na), *b = load_params(b_path, &nb);
    CHECK(a && b && na == nb && memcmp(a, b, na * sizeof(float)) == 0,
          "resumed weights differ from the straight run's (step %lld + 9)", k);
    free(a);
    free(b);
}

int main(void)
{
    check_begin("test_train_cli", 120);
    if (tiny_make_dir(dir, sizeof dir)) {
        CHECK(0, "could not write the tiny dataset");
        return check_end();
    }
    RUN(help_of_each_command_exits_zero);
    RUN(wrong_usage_exits_two_with_one_line);
    RUN(failure_exits_one_with_a_message);
    RUN(train_json_then_test_agree);
    RUN(profile_on_one_process);
    RUN(logdir_gets_a_tensorboard_event_file);
    RUN(data_dir_defaults_to_shoal_data_dir);
    RUN(time_reports_forward_backward_and_layers);
    RUN(sighup_saves_and_sigint_saves_and_exits_130);
    RUN(killed_run_resumes_from_its_periodic_checkpoint_bitwise);
    tiny_remove_dir(dir);
    return check_end();
}
