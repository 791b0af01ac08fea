/* test_atomic_file.c — proves src/base/atomic_file.c: whole files or none, random O_EXCL
 * temporaries that never write through a planted link, a link at the destination replaced
 * not followed, pending temporaries removed by a signal handler, EFBIG under a size limit. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/err.h"
#include "check.h"

static char dir[64];

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static long file_nbytes(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0 ? (long)st.st_size : -1;
}

static int count_glob(const char *pat)
{
    glob_t g;
    int n = glob(pat, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    if (n) globfree(&g);
    return n;
}

static void write_text(const char *p, const char *text)
{
    FILE *f = fopen(p, "w");
    if (f) fputs(text, f), fclose(f);
}

static void whole_file_appears_and_no_temporary_remains(void)
{
    char p[128], pat[160];
    path_of(p, sizeof p, "a.bin");
    snprintf(pat, sizeof pat, "%s.tmp.*", p);
    sh_atomic_file f;
    CHECK(sh_atomic_open(&f, p, "test") == SHOAL_OK, "open: %s", shoal_last_error());
    CHECK(count_glob(pat) == 1, "one temporary while writing");
    CHECK(file_nbytes(p) < 0, "destination absent until commit");
    CHECK(sh_atomic_write(&f, "hello", 5) == SHOAL_OK, "write");
    CHECK(sh_atomic_commit(&f) == SHOAL_OK, "commit: %s", shoal_last_error());
    CHECK(file_nbytes(p) == 5, "5 bytes: %ld", file_nbytes(p));
    CHECK(count_glob(pat) == 0, "no temporary after commit");
    /* aborted: the old file stays, the temporary goes */
    CHECK(sh_atomic_open(&f, p, "test") == SHOAL_OK, "open again");
    CHECK(sh_atomic_write(&f, "longer text", 11) == SHOAL_OK, "write");
    sh_atomic_abort(&f);
    sh_atomic_abort(&f); /* twice is fine */
    CHECK(file_nbytes(p) == 5 && count_glob(pat) == 0, "abort keeps the old file, removes the temporary");
}

static void planted_links_are_never_written_through(void)
{
    char p[128], victim[128], planted[200], link_dest[128];
    path_of(p, sizeof p, "ck.ckpt");
    path_of(victim, sizeof victim, "victim");
    write_text(victim, "precious");
    /* the old fixed names: PATH.tmp.<pid> and PATH.tmp, both links to the victim */
    snprintf(planted, sizeof planted, "%s.tmp.%ld", p, (long)getpid());
    CHECK(symlink(victim, planted) == 0, "symlink: %s", strerror(errno));
    snprintf(planted, sizeof planted, "%s.tmp", p);
    CHECK(symlink(victim, planted) == 0, "symlink: %s", strerror(errno));
    for (int i = 0; i < 20; i++) {
        sh_atomic_file f;
        CHECK(sh_atomic_open(&f, p, "test") == SHOAL_OK, "open");
        CHECK(sh_atomic_write(&f, "new", 3) == SHOAL_OK, "write");
        CHECK(sh_atomic_commit(&f) == SHOAL_OK, "commit");
    }
    CHECK(file_nbytes(victim) == 8, "victim untouched: %ld bytes", file_nbytes(victim));
    /* a link at the destination itself is replaced by the file, the victim stays */
    path_of(link_dest, sizeof link_dest, "dest-link");
    CHECK(symlink(victim, link_dest) == 0, "symlink");
    sh_atomic_file f;
    CHECK(sh_atomic_open(&f, link_dest, "test") == SHOAL_OK, "open");
    CHECK(sh_atomic_write(&f, "xy", 2) == SHOAL_OK, "write");
    CHECK(sh_atomic_commit(&f) == SHOAL_OK, "commit");
    struct stat st;
    CHECK(lstat(link_dest, &st) == 0 && S_ISREG(st.st_mode), "destination is now a plain file");
    CHECK(file_nbytes(victim) == 8, "victim untouched: %ld bytes", file_nbytes(victim));
}

static void bad_destinations_are_named_before_writing(void)
{
    char p[160];
    snprintf(p, sizeof p, "%s/nodir/x.ckpt", dir);
    CHECK(sh_atomic_check_writable(p, "checkpoint") == SHOAL_ERR_IO, "missing directory refused");
    CHECK(strstr(shoal_last_error(), "nodir/x.ckpt") && strstr(shoal_last_error(), "directory"),
          "message names the path: %s", shoal_last_error());
    CHECK(sh_atomic_check_writable(dir, "checkpoint") == SHOAL_ERR_INVALID, "a directory refused");
    CHECK(strstr(shoal_last_error(), "is a directory") != NULL, "%s", shoal_last_error());
    path_of(p, sizeof p, "ok.ckpt");
    CHECK(sh_atomic_check_writable(p, "checkpoint") == SHOAL_OK, "writable path accepted");
    CHECK(file_nbytes(p) < 0, "the check creates nothing");
    char pat[200];
    snprintf(pat, sizeof pat, "%s.tmp.*", p);
    CHECK(count_glob(pat) == 0, "and leaves no temporary");
}

static void on_term(int sig)
{
    (void)sig;
    sh_atomic_unlink_pending();
    _exit(9);
}

static void interrupted_writer_leaves_nothing_behind(void)
{
    char p[128], pat[160];
    path_of(p, sizeof p, "sig.ckpt");
    snprintf(pat, sizeof pat, "%s.tmp.*", p);
    int ready[2];
    CHECK(pipe(ready) == 0, "pipe");
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGTERM, on_term);
        sh_atomic_file f;
        if (sh_atomic_open(&f, p, "test") != SHOAL_OK) _exit(2);
        (void)!write(ready[1], "x", 1);
        for (;;) pause(); /* "mid-save" */
    }
    char c;
    CHECK(read(ready[0], &c, 1) == 1, "child ready");
    CHECK(count_glob(pat) == 1, "temporary exists mid-save");
    kill(pid, SIGTERM);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 9, "handler ran (status 0x%x)", st);
    CHECK(count_glob(pat) == 0, "the handler removed the temporary");
    close(ready[0]);
    close(ready[1]);
}

static void size_limit_is_an_error_not_a_signal(void)
{
    char p[128], pat[160];
    path_of(p, sizeof p, "fsz.ckpt");
    snprintf(pat, sizeof pat, "%s.tmp.*", p);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit fsz = {4096, 4096};
        setrlimit(RLIMIT_FSIZE, &fsz);
        static char big[65536];
        sh_atomic_file f;
        if (sh_atomic_open(&f, p, "test") != SHOAL_OK) _exit(2);
        shoal_result rc = sh_atomic_write(&f, big, sizeof big);
        if (rc != SHOAL_ERR_IO) _exit(3);
        if (!strstr(shoal_last_error(), "too large")) _exit(4);
        sh_atomic_abort(&f);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "EFBIG came back as an error (status 0x%x)", st);
    CHECK(count_glob(pat) == 0 && file_nbytes(p) < 0, "nothing left behind");
}

int main(void)
{
    check_begin("test_atomic_file", 60);
    snprintf(dir, sizeof dir, "/tmp/shoal-test-atomic-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(whole_file_appears_and_no_temporary_remains);
    RUN(planted_links_are_never_written_through);
    RUN(bad_destinations_are_named_before_writing);
    RUN(interrupted_writer_leaves_nothing_behind);
    RUN(size_limit_is_an_error_not_a_signal);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_end();
}
