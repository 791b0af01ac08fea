/* launch_check.c — what `shoal launch` settles before its first fork: the process limits N
 * ranks need (open files, processes) and the --output-dir files, opened without following
 * links, so that a launch that cannot finish starting never leaves a rank behind.
 * Not here: starting and watching the ranks (launch.c).
 * Proved by tests/cli/test_launch.c. */
#include "cli/launch_check.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* Descriptors the launcher holds besides its ranks' (standard streams, the signal and note
 * pipes, one rank's exec-status pipe and its two write ends while it starts, a margin for
 * the C library). */
#define LAUNCH_FIXED_FDS 24

static const char *rlim_words(rlim_t v, char *buf, size_t nbytes)
{
    if (v == RLIM_INFINITY) snprintf(buf, nbytes, "unlimited");
    else snprintf(buf, nbytes, "%llu", (unsigned long long)v);
    return buf;
}

/* Open files: each rank's two output descriptors (pipes, or --output-dir files) live in the
 * launcher together. The soft limit is raised up to the hard one when that is enough. */
static int check_files(const char *tag, int n)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    rlim_t need = (rlim_t)2 * (rlim_t)n + LAUNCH_FIXED_FDS;
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need) return 0;
    if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need) {
        struct rlimit up = {need, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) == 0) return 0;
    }
    char hard[32];
    fprintf(stderr, "shoal %s: -n %d needs %llu open files in the launcher (two per rank), but its limit is "
            "%llu (hard limit %s); raise it (ulimit -n %llu) or start fewer ranks; no rank was started\n",
            tag, n, (unsigned long long)need, (unsigned long long)rl.rlim_cur, rlim_words(rl.rlim_max, hard, sizeof hard),
            (unsigned long long)need);
    return 1;
}

/* Processes and threads this user runs now (RLIMIT_NPROC counts them all, by real user). */
static long user_tasks(uid_t uid)
{
    DIR *d = opendir("/proc");
    if (!d) return -1;
    long tasks = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        char path[300], line[128];
        snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue; /* it ended meanwhile */
        long uid_real = -1, threads = 1;
        while (fgets(line, sizeof line, f)) {
            if (!strncmp(line, "Uid:", 4)) uid_real = strtol(line + 4, NULL, 10);
            else if (!strncmp(line, "Threads:", 8)) threads = strtol(line + 8, NULL, 10);
        }
        fclose(f);
        if (uid_real == (long)uid) tasks += threads > 0 ? threads : 1;
    }
    closedir(d);
    return tasks;
}

/* Processes: N more than this user runs now, each at least one task. Root is not held to
 * the limit by the kernel, so neither is it here. */
static int check_procs(const char *tag, int n)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NPROC, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || geteuid() == 0) return 0;
    long now = user_tasks(getuid());
    if (now < 0) return 0;
    rlim_t need = (rlim_t)now + (rlim_t)n;
    if (rl.rlim_cur >= need) return 0;
    if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need) {
        struct rlimit up = {need, rl.rlim_max};
        if (setrlimit(RLIMIT_NPROC, &up) == 0) return 0;
    }
    fprintf(stderr, "shoal %s: -n %d ranks and the %ld processes and threads this user runs now need a process "
            "limit of %llu, but it is %llu; raise it (ulimit -u %llu) or start fewer ranks; no rank was started\n",
            tag, n, now, (unsigned long long)need, (unsigned long long)rl.rlim_cur, (unsigned long long)need);
    return 1;
}

int sh_launch_check_limits(const char *tag, int n)
{
    if (check_files(tag, n)) return 1;
    return check_procs(tag, n);
}

/* The output directory: made when missing; a directory this user may write, reached by no
 * link that someone else planted. Its descriptor, or -1 after one line. */
static int open_dir(const char *tag, const char *dir)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "shoal %s: cannot create --output-dir %s: %s\n", tag, dir, strerror(errno));
        return -1;
    }
    struct stat ln;
    if (lstat(dir, &ln) == 0 && S_ISLNK(ln.st_mode) && ln.st_uid != geteuid() && ln.st_uid != 0) {
        fprintf(stderr, "shoal %s: --output-dir %s is a symbolic link another user made; give the directory "
                "itself\n", tag, dir);
        return -1;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "shoal %s: --output-dir %s: %s\n", tag, dir,
                errno == ENOTDIR ? "not a directory; choose a directory (it is made when missing)" : strerror(errno));
        return -1;
    }
    if (faccessat(fd, ".", W_OK, AT_EACCESS) != 0) {
        fprintf(stderr, "shoal %s: cannot write in --output-dir %s: %s\n", tag, dir, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* dir/name made afresh: whatever stood there (a file, a planted symbolic or hard link) is
 * removed first and the file created exclusively, so no write reaches another file. */
static int open_fresh(const char *tag, int dirfd, const char *dir, const char *name)
{
    if (unlinkat(dirfd, name, 0) != 0 && errno != ENOENT) {
        int e = errno;
        struct stat st;
        int is_dir = fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
        fprintf(stderr, "shoal %s: cannot write %s/%s: %s; %s\n", tag, dir, name,
                is_dir ? "a directory stands there" : strerror(e),
                is_dir ? "remove it or choose another --output-dir" : "check the directory's permissions");
        return -1;
    }
    int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        fprintf(stderr, "shoal %s: cannot write %s/%s: %s%s\n", tag, dir, name, strerror(errno),
                errno == EEXIST ? " (something made it again at once: is another launcher writing there?)" : "");
    return fd;
}

int sh_launch_open_outputs(const char *tag, const char *dir, int n, int base, int (*fds)[2])
{
    for (int k = 0; k < n; k++) fds[k][0] = fds[k][1] = -1;
    int dirfd = open_dir(tag, dir);
    if (dirfd < 0) return 1;
    int rc = 0;
    for (int k = 0; k < n && !rc; k++)
        for (int s = 0; s < 2 && !rc; s++) {
            char name[64];
            snprintf(name, sizeof name, "rank-%d.%s", base + k, s ? "err" : "out");
            fds[k][s] = open_fresh(tag, dirfd, dir, name);
            rc = fds[k][s] < 0;
        }
    close(dirfd);
    if (rc) sh_launch_close_outputs(fds, n);
    return rc;
}

void sh_launch_close_outputs(int (*fds)[2], int n)
{
    for (int k = 0; k < n; k++)
        for (int s = 0; s < 2; s++)
            if (fds[k][s] >= 0) {
                close(fds[k][s]);
                fds[k][s] = -1;
            }
}
