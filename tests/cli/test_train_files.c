/* test_train_files.c — proves what shoal train does with files on the real binary
 * ($SHOAL_BIN; src/train/run_files.c, src/cli/cmd_train.c's signals): a stop without --save
 * never replaces a file nobody named, says how to resume and exits 130 (SIGTERM: 143); a second
 * Ctrl-C during a save leaves no temporary; every output path is checked before the first step;
 * a final checkpoint whose folder vanished goes to the current directory with the result still
 * printed; a file-size limit fails the save without a temporary; weights files are read as their
 * content says, whatever their name; --quiet keeps the result line; the progress line counts
 * to --max-steps. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "lib/run.h"
#include "train/tiny_data.h"

static char dir[256], out[1 << 16];

/* Two 4096-wide hidden layers: a checkpoint of about 140 MB, whose save takes long enough to
 * be interrupted. */
static const char big_cfg[] =
    "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.01\nmomentum=0.9\n"
    "\n[connected]\noutput=4096\nactivation=relu\n"
    "\n[connected]\noutput=4096\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

/* `cd dir && shoal train ARGS`, stdout and stderr into out; the exit status (-1: a signal). */
static int train(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s train %s 2>&1", dir, sh_test_shoal_bin(), args);
    return sh_test_run(cmd, out, sizeof out);
}

/* `shoal train CFG --data . --threads 1 --epochs 1000000 EXTRA...` in dir, output to dir/log. */
static pid_t start(const char *log, const char *cfg, const char *extra1, const char *extra2)
{
    pid_t pid = fork();
    if (pid != 0) return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || chdir(dir) != 0) _exit(127);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(sh_test_shoal_bin(), sh_test_shoal_bin(), "train", cfg, "--data", ".", "--threads", "1", "--epochs",
          "1000000", extra1, extra2, (char *)NULL);
    _exit(127);
}

/* The end of a long output, for failure messages. */
static const char *tail(const char *s)
{
    size_t n = strlen(s);
    return n > 800 ? s + n - 800 : s;
}

static void read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = 0;
    if (f) fclose(f);
}

/* Wait up to timeout_ms for the log to hold needle (the log is rewritten by read_file). */
static int wait_for(const char *log, const char *needle, int timeout_ms)
{
    for (int waited = 0; waited <= timeout_ms; waited += 20) {
        read_file(log);
        if (strstr(out, needle)) return 1;
        usleep(20000);
    }
    return 0;
}

/* The process's wait status, killing it after timeout_ms. */
static int reap(pid_t pid, int timeout_ms)
{
    int st = 0;
    for (int waited = 0; waited < timeout_ms; waited += 10) {
        if (waitpid(pid, &st, WNOHANG) == pid) return st;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    CHECK(0, "shoal train did not end within %d ms", timeout_ms);
    return st;
}

/* 128 + the signal, as a shell's $? shows a process ended by it or exiting with it. */
static int shell_status(int st)
{
    return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int file_holds(const char *name, const char *text)
{
    char path[600], buf[64] = "";
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = 0;
    if (f) fclose(f);
    return f && !strcmp(buf, text);
}

/* Names in dir containing ".tmp.": what an interrupted atomic write leaves. */
static int temporaries(const char *where)
{
    DIR *d = opendir(where);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

static void stop_without_save_keeps_existing_files_and_exits_130(void)
{
    CHECK(tiny_write_file(dir, "mlp.ckpt", "keep") == 0, "write mlp.ckpt");
    const int sigs[2] = {SIGINT, SIGTERM};
    const char *names[2] = {"mlp-1.ckpt", "mlp-2.ckpt"};
    for (int i = 0; i < 2; i++) {
        char log[600];
        snprintf(log, sizeof log, "%s/stop%d.log", dir, i);
        pid_t pid = start(log, "mlp.cfg", "--seed", "4");
        CHECK(wait_for(log, "epoch 2:", 20000), "training did not reach epoch 2: %s", tail(out));
        kill(pid, sigs[i]);
        int st = reap(pid, 20000);
        read_file(log);
        CHECK(shell_status(st) == 128 + sigs[i], "signal %d: status %d, want %d: %s", sigs[i], shell_status(st),
              128 + sigs[i], tail(out));
        CHECK(file_holds("mlp.ckpt", "keep"), "a stop replaced mlp.ckpt, a file nobody named: %s", tail(out));
        char want[200];
        snprintf(want, sizeof want, "saved %s after step ", names[i]);
        CHECK(strstr(out, want) != NULL, "no \"%s\": %s", want, tail(out));
        snprintf(want, sizeof want, "to resume: shoal train mlp.cfg --data . --threads 1 --epochs 1000000 --seed 4 "
                 "--resume %s\n", names[i]);
        CHECK(strstr(out, want) != NULL, "no \"%s\": %s", want, tail(out));
    }
    /* what it says resumes */
    int rc = train("mlp.cfg --data . --threads 1 --resume mlp-2.ckpt --max-steps 1 --json --quiet");
    CHECK(rc == 0 && sh_test_json_number(out, "steps") > 32, "resume: exit %d: %s", rc, tail(out));
}

static void second_sigint_during_a_save_leaves_no_temporary(void)
{
    char log[600];
    snprintf(log, sizeof log, "%s/twice.log", dir);
    CHECK(tiny_write_file(dir, "big.cfg", big_cfg) == 0, "write big.cfg");
    pid_t pid = start(log, "big.cfg", "--save", "big.ckpt");
    CHECK(wait_for(log, "train big.cfg", 20000), "training did not start: %s", tail(out));
    usleep(300000);
    kill(pid, SIGINT);
    int seen = 0;
    for (int i = 0; i < 20000 && !seen; i++) { /* up to 20 s for the save to start */
        seen = temporaries(dir) > 0;
        if (!seen) usleep(1000);
    }
    CHECK(seen, "no temporary appeared while saving big.ckpt");
    kill(pid, SIGINT);
    int st = reap(pid, 20000);
    CHECK(shell_status(st) == 130, "status %d after two SIGINTs", shell_status(st));
    CHECK(temporaries(dir) == 0, "a temporary of the interrupted save is left in %s", dir);
}

static void outputs_are_checked_before_the_first_step(void)
{
    const char *bad[] = {"--save nodir/x.ckpt", "--save-darknet nodir/x.weights", "--save .",
                         "--save-every 5 --save nodir/x.ckpt"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, "mlp.cfg --data . --threads 1 --max-steps 40 %s", bad[i]);
        int rc = train(args);
        CHECK(rc == 1 && strstr(out, "shoal: --save") && !strstr(out, "step ") && !strstr(out, "test accuracy"),
              "%s: exit %d, want one error before any step: %s", bad[i], rc, tail(out));
    }
}

/* The folder of --save vanishes during the run: the final checkpoint goes to the current
 * directory, the run's result is printed, and the exit status says something went wrong. */
static void a_final_save_that_fails_goes_to_the_current_directory(void)
{
    char log[600], sub[600];
    snprintf(log, sizeof log, "%s/gone.log", dir);
    snprintf(sub, sizeof sub, "%s/gone", dir);
    CHECK(mkdir(sub, 0755) == 0, "mkdir %s", sub);
    pid_t pid = start(log, "mlp.cfg", "--save", "gone/final.ckpt");
    CHECK(wait_for(log, "epoch 2:", 20000), "training did not reach epoch 2: %s", tail(out));
    CHECK(rmdir(sub) == 0, "rmdir %s", sub);
    kill(pid, SIGINT);
    int st = reap(pid, 20000);
    read_file(log);
    CHECK(shell_status(st) == 1, "status %d: %s", shell_status(st), tail(out));
    CHECK(strstr(out, "could not write gone/final.ckpt") && strstr(out, "wrote final.ckpt instead"), "%s", tail(out));
    CHECK(sh_test_file_nbytes(dir, "final.ckpt") > 0, "no final.ckpt in the current directory: %s", tail(out));
    CHECK(strstr(out, "saved final.ckpt after step") && strstr(out, "--resume final.ckpt"), "%s", tail(out));
}

/* ulimit -f: the write fails (EFBIG) instead of killing shoal with SIGXFSZ; no temporary is
 * left anywhere it tried, and the result line is printed. */
static void a_file_size_limit_fails_the_save_without_a_temporary(void)
{
    char args[512];
    snprintf(args, sizeof args, "mlp.cfg --data . --threads 1 --max-steps 20 --save limited-%d.ckpt", (int)getpid());
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && ulimit -f 2 && %s train %s 2>&1", dir, sh_test_shoal_bin(), args);
    int tmp_before = temporaries("/tmp");
    int rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc == 1, "exit %d (-1: killed by a signal): %s", rc, tail(out));
    CHECK(strstr(out, "test accuracy") && strstr(out, "could not write limited-"), "%s", tail(out));
    CHECK(temporaries(dir) == 0 && temporaries("/tmp") <= tmp_before, "temporaries left: %s", tail(out));
}

/* A file's first bytes say what it holds, not its name: a checkpoint named .weights and
 * Darknet's weights named .ckpt are read as what they are by train --weights, test and time;
 * --resume of Darknet's weights points at --weights; a file of neither is named as such. */
static void weights_formats_are_told_by_content(void)
{
    int rc = train("mlp.cfg --data . --threads 1 --max-steps 30 --save shoal.weights --save-darknet darknet.ckpt");
    CHECK(rc == 0, "exit %d: %s", rc, tail(out));
    const char *cmds[] = {"test mlp.cfg --data . --threads 1 --weights shoal.weights",
                          "test mlp.cfg --data . --threads 1 --weights darknet.ckpt",
                          "time mlp.cfg --iterations 1 --threads 1 --weights darknet.ckpt",
                          "train mlp.cfg --data . --threads 1 --max-steps 2 --weights darknet.ckpt --quiet",
                          "train mlp.cfg --data . --threads 1 --max-steps 2 --weights shoal.weights --quiet"};
    char acc[2][64] = {"", ""};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "cd %s && %s %s 2>&1", dir, sh_test_shoal_bin(), cmds[i]);
        rc = sh_test_run(cmd, out, sizeof out);
        CHECK(rc == 0, "%s: exit %d: %s", cmds[i], rc, tail(out));
        if (i < 2 && strstr(out, "test accuracy ")) snprintf(acc[i], sizeof acc[i], "%.20s", strstr(out, "accuracy "));
    }
    CHECK(acc[0][0] && !strcmp(acc[0], acc[1]), "the same weights in two formats: \"%s\" and \"%s\"", acc[0], acc[1]);
    rc = train("mlp.cfg --data . --threads 1 --max-steps 40 --resume darknet.ckpt");
    CHECK(rc == 1 && strstr(out, "Darknet's weights") && strstr(out, "--weights darknet.ckpt"), "%s", tail(out));
    CHECK(tiny_write_file(dir, "junk.ckpt", "\xff\xff\xff\xff not weights at all") == 0, "write junk.ckpt");
    rc = train("mlp.cfg --data . --threads 1 --max-steps 2 --weights junk.ckpt");
    CHECK(rc == 1 && strstr(out, "neither a shoal checkpoint"), "%s", tail(out));
}

static void quiet_keeps_the_result_line_only(void)
{
    int rc = train("mlp.cfg --data . --threads 1 --epochs 2 --quiet");
    CHECK(rc == 0 && !strncmp(out, "test accuracy ", 14) && strchr(out, '\n') == out + strlen(out) - 1,
          "exit %d, want the one result line: %s", rc, tail(out));
}

static void progress_counts_to_max_steps(void)
{
    int rc = train("mlp.cfg --data . --threads 1 --max-steps 7");
    CHECK(rc == 0 && strstr(out, "epoch 1/1  step 7/7 ") != NULL, "exit %d: %s", rc, tail(out));
    CHECK(strstr(out, "step 7/16") == NULL, "counts to the epoch's end: %s", tail(out));
}

int main(void)
{
    check_begin("test_train_files", 200);
    if (tiny_make_dir(dir, sizeof dir)) {
        CHECK(0, "could not write the tiny dataset");
        return check_end();
    }
    RUN(stop_without_save_keeps_existing_files_and_exits_130);
    RUN(second_sigint_during_a_save_leaves_no_temporary);
    RUN(outputs_are_checked_before_the_first_step);
    RUN(a_final_save_that_fails_goes_to_the_current_directory);
    RUN(a_file_size_limit_fails_the_save_without_a_temporary);
    RUN(weights_formats_are_told_by_content);
    RUN(quiet_keeps_the_result_line_only);
    RUN(progress_counts_to_max_steps);
    tiny_remove_dir(dir);
    return check_end();
}
