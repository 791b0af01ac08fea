/* launch.c — the local launcher behind `shoal launch` and `shoal train -n`.
 * Not here: flag parsing (cmd_launch.c, cmd_train.c).
 * Proved by tests/cli/test_launch.c. */
#include "cli/launch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"
#include "base/err.h"
#include "base/util.h"

enum { LINE_MAX_NBYTES = 16384 };

typedef struct {
    pid_t pid;
    int fd[2];              /* stdout, stderr pipes (-1 when closed or files) */
    char *buf[2];
    size_t len[2];
    char last_err[512];
    int exited, status;
    int killed_by_us;
    int dropped;            /* the job said it goes on without this rank */
} rank_proc;

static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    unsigned char s = (unsigned char)sig;
    int saved = errno;
    if (write(sig_pipe[1], &s, 1) < 0) { /* nothing to do */
    }
    errno = saved;
}

static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    int port = 29500;
    if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0) {
        socklen_t len = sizeof a;
        if (getsockname(s, (struct sockaddr *)&a, &len) == 0) port = ntohs(a.sin_port);
    }
    if (s >= 0) close(s);
    return port;
}

/* 1 when the line already names rank k at its start, as log lines ("[rank k host] comm:
 * ...") and errors ("shoal: rank k: ...") do: a tag would name the rank twice. */
static int names_rank(const char *line, size_t n, int k)
{
    char tag[48];
    const char *forms[] = {"[rank %d ", "[rank %d]", "shoal: rank %d: "};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        int m = snprintf(tag, sizeof tag, forms[i], k);
        if (m > 0 && (size_t)m <= n && !memcmp(line, tag, (size_t)m)) return 1;
    }
    return 0;
}

static void emit(rank_proc *r, int k, int stream, const char *line, size_t n)
{
    FILE *f = stream ? stderr : stdout;
    if (names_rank(line, n, k))
        fprintf(f, "%.*s\n", (int)n, line);
    else
        fprintf(f, "[rank %d] %.*s\n", k, (int)n, line);
    fflush(f);
    if (stream && n) {
        size_t m = n < sizeof r->last_err - 1 ? n : sizeof r->last_err - 1;
        memcpy(r->last_err, line, m);
        r->last_err[m] = 0;
    }
}

/* Read what is there; print whole lines; keep the rest. Returns 0 at EOF. */
static int drain(rank_proc *r, int k, int stream)
{
    char tmp[8192];
    ssize_t n = read(r->fd[stream], tmp, sizeof tmp);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 1;
    if (n <= 0) {
        if (r->len[stream]) emit(r, k, stream, r->buf[stream], r->len[stream]);
        r->len[stream] = 0;
        close(r->fd[stream]);
        r->fd[stream] = -1;
        return 0;
    }
    for (ssize_t i = 0; i < n; i++) {
        char ch = tmp[i];
        if (ch == '\n' || r->len[stream] == LINE_MAX_NBYTES) {
            emit(r, k, stream, r->buf[stream], r->len[stream]);
            r->len[stream] = 0;
            if (ch == '\n') continue;
        }
        r->buf[stream][r->len[stream]++] = ch;
    }
    return 1;
}

/* Lines "dropped R" from the ranks (each write is one whole line: shorter than PIPE_BUF). */
static void read_notes(int fd, rank_proc *rp, int n, int base)
{
    char buf[512];
    ssize_t got;
    while ((got = read(fd, buf, sizeof buf - 1)) > 0) {
        buf[got] = 0;
        for (char *p = buf; (p = strstr(p, "dropped ")); p++) {
            int r = atoi(p + 8) - base; /* the job's rank; this node holds base .. base+n-1 */
            if (r >= 0 && r < n) rp[r].dropped = 1;
        }
    }
}

static const char *sig_name(int sig)
{
    static char b[32];
    const char *s = sigabbrev_np(sig);
    snprintf(b, sizeof b, "SIG%s", s ? s : "?");
    return b;
}

int sh_launch_run(const sh_launch_opts *o, char *const argv[])
{
    int n = o->nranks;
    const char *tag = o->tag ? o->tag : "launch";
    int nnodes = o->nnodes > 1 ? o->nnodes : 1, base = nnodes > 1 ? o->node_rank * n : 0;

    char port[16], key[65], nstr[16], wstr[16], master[256];
    if (nnodes > 1) { /* every node must agree on the master, its port and the key */
        const char *m = o->master_addr                       ? o->master_addr
                        : sh_env_is_set("SHOAL_MASTER_ADDR") ? sh_env_str("SHOAL_MASTER_ADDR")
                                                             : NULL;
        if (!m || !*m) {
            fprintf(stderr, "shoal %s: --nnodes %d needs node 0's address: give --master-addr ADDR "
                    "(or set SHOAL_MASTER_ADDR) on every node\n", tag, nnodes);
            return 2;
        }
        if (o->node_rank < 0 || o->node_rank >= nnodes) {
            fprintf(stderr, "shoal %s: --node-rank %d is outside 0..%d (--nnodes %d)\n", tag, o->node_rank,
                    nnodes - 1, nnodes);
            return 2;
        }
        if (!sh_env_is_set("SHOAL_JOB_KEY")) {
            fprintf(stderr, "shoal %s: --nnodes %d needs the same SHOAL_JOB_KEY on every node: set it to 64 hex "
                    "digits (e.g. SHOAL_JOB_KEY=$(openssl rand -hex 32)) and pass it to each node's launcher\n",
                    tag, nnodes);
            return 2;
        }
        snprintf(master, sizeof master, "%s", m);
    } else {
        snprintf(master, sizeof master, "127.0.0.1");
    }
    long user_port = 0; /* the user's choice passes through; else a free port */
    if (sh_env_is_set("SHOAL_MASTER_PORT") && sh_env_long("SHOAL_MASTER_PORT", &user_port) != SHOAL_OK) {
        fprintf(stderr, "shoal %s: %s\n", tag, shoal_last_error_message());
        return 2;
    }
    snprintf(port, sizeof port, "%d", user_port ? (int)user_port : nnodes > 1 ? 29500 : free_port());
    const char *env_key = sh_env_is_set("SHOAL_JOB_KEY") ? sh_env_str("SHOAL_JOB_KEY") : NULL;
    if (env_key) {
        snprintf(key, sizeof key, "%.64s", env_key);
    } else {
        unsigned char rnd[32];
        if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) { /* never a guessable key */
            fprintf(stderr, "shoal %s: getrandom failed (%s): set SHOAL_JOB_KEY to 64 hex digits yourself\n", tag,
                    strerror(errno));
            return 1;
        }
        for (int i = 0; i < 32; i++) sprintf(key + 2 * i, "%02x", rnd[i]);
    }
    snprintf(nstr, sizeof nstr, "%d", n);
    snprintf(wstr, sizeof wstr, "%d", n * nnodes);
    if (o->output_dir && mkdir(o->output_dir, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "shoal %s: cannot create --output-dir %s: %s\n", tag, o->output_dir, strerror(errno));
        return 1;
    }
    int note_pipe[2]; /* ranks -> launcher: "dropped R" lines (shoal_job_note_dropped) */
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0 || pipe2(note_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
        fprintf(stderr, "shoal %s: pipe: %s\n", tag, strerror(errno));
        return 1;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    const char *bind = sh_env_str("SHOAL_BIND");
    if (bind && strcmp(bind, "core") && strcmp(bind, "none")) {
        fprintf(stderr, "shoal %s: SHOAL_BIND=%s: use core or none\n", tag, bind);
        return 2;
    }
    int bind_cores = !bind || !strcmp(bind, "core");
    rank_proc *rp = calloc((size_t)n, sizeof *rp);
    if (!rp) return 1;
    fflush(NULL);
    for (int k = 0; k < n; k++) {
        int p_out[2] = {-1, -1}, p_err[2] = {-1, -1};
        int fout = -1, ferr = -1;
        if (o->output_dir) {
            char path[4096];
            snprintf(path, sizeof path, "%s/rank-%d.out", o->output_dir, k);
            fout = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            snprintf(path, sizeof path, "%s/rank-%d.err", o->output_dir, k);
            ferr = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (fout < 0 || ferr < 0) {
                fprintf(stderr, "shoal %s: cannot write %s: %s\n", tag, path, strerror(errno));
                return 1;
            }
        } else if (pipe2(p_out, O_CLOEXEC) < 0 || pipe2(p_err, O_CLOEXEC) < 0) {
            fprintf(stderr, "shoal %s: pipe: %s\n", tag, strerror(errno));
            return 1;
        }
        int exec_st[2]; /* the child's execvp errno, or end of file once it ran */
        if (pipe2(exec_st, O_CLOEXEC) < 0) {
            fprintf(stderr, "shoal %s: pipe: %s\n", tag, strerror(errno));
            return 1;
        }
        pid_t pid = fork();
        if (pid == 0) {
            close(exec_st[0]);
            setpgid(0, 0);
            if (bind_cores) { /* rank k gets its share of the cores, as mpirun binds */
                long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
                if (ncpu > 0) {
                    long per = ncpu / n > 0 ? ncpu / n : 1, first = (long)k * per % ncpu;
                    cpu_set_t set;
                    CPU_ZERO(&set);
                    for (long c = 0; c < per; c++) CPU_SET((int)((first + c) % ncpu), &set);
                    sched_setaffinity(0, sizeof set, &set);
                }
            }
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            signal(SIGHUP, SIG_DFL);
            char v[16];
            snprintf(v, sizeof v, "%d", base + k);
            setenv("SHOAL_RANK", v, 1);
            snprintf(v, sizeof v, "%d", k);
            setenv("SHOAL_LOCAL_RANK", v, 1);
            setenv("SHOAL_WORLD_SIZE", wstr, 1);
            setenv("SHOAL_LOCAL_SIZE", nstr, 1);
            setenv("SHOAL_MASTER_ADDR", master, 1);
            setenv("SHOAL_MASTER_PORT", port, 1);
            setenv("SHOAL_JOB_KEY", key, 1);
            int note_fd = dup(note_pipe[1]); /* without O_CLOEXEC: the rank keeps it */
            if (note_fd >= 0) {
                snprintf(v, sizeof v, "%d", note_fd);
                setenv("SHOAL_LAUNCH_FD", v, 1);
            }
            /* launched by mpirun ourselves? our ranks are ours, not MPI's */
            unsetenv("OMPI_COMM_WORLD_RANK");
            unsetenv("OMPI_COMM_WORLD_SIZE");
            unsetenv("PMI_RANK");
            unsetenv("PMI_SIZE");
            unsetenv("SLURM_PROCID");
            unsetenv("SLURM_NTASKS");
            dup2(o->output_dir ? fout : p_out[1], 1);
            dup2(o->output_dir ? ferr : p_err[1], 2);
            execvp(argv[0], argv);
            int e = errno;
            if (write(exec_st[1], &e, sizeof e) < 0) { /* the parent reports it */
            }
            _exit(127);
        }
        close(exec_st[1]);
        int exec_errno = 0;
        ssize_t got;
        while ((got = read(exec_st[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
        }
        close(exec_st[0]);
        if (pid > 0 && got == (ssize_t)sizeof exec_errno) { /* one line, not one per rank */
            fprintf(stderr, "shoal %s: cannot run \"%s\": %s (check the name, or give its path)\n", tag, argv[0],
                    exec_errno == ENOENT && !strchr(argv[0], '/') ? "not found in PATH" : strerror(exec_errno));
            waitpid(pid, NULL, 0);
            for (int j = 0; j < k; j++) kill(-rp[j].pid, SIGKILL);
            for (int j = 0; j < k; j++) waitpid(rp[j].pid, NULL, 0);
            for (int j = 0; j <= k; j++) {
                for (int t = 0; t < 2; t++) {
                    if (j < k && rp[j].fd[t] >= 0) close(rp[j].fd[t]);
                    free(rp[j].buf[t]);
                }
            }
            int fds[4] = {p_out[0], p_out[1], p_err[0], p_err[1]};
            for (int t = 0; t < 4; t++)
                if (fds[t] >= 0) close(fds[t]);
            if (fout >= 0) close(fout);
            if (ferr >= 0) close(ferr);
            free(rp);
            close(sig_pipe[0]);
            close(sig_pipe[1]);
            close(note_pipe[0]);
            close(note_pipe[1]);
            return 127;
        }
        if (pid < 0) {
            fprintf(stderr, "shoal %s: fork: %s\n", tag, strerror(errno));
            for (int j = 0; j < k; j++) kill(-rp[j].pid, SIGKILL);
            return 1;
        }
        setpgid(pid, pid);
        rp[k].pid = pid;
        if (o->output_dir) {
            close(fout);
            close(ferr);
            rp[k].fd[0] = rp[k].fd[1] = -1;
        } else {
            close(p_out[1]);
            close(p_err[1]);
            rp[k].fd[0] = p_out[0];
            rp[k].fd[1] = p_err[0];
            rp[k].buf[0] = malloc(LINE_MAX_NBYTES + 1);
            rp[k].buf[1] = malloc(LINE_MAX_NBYTES + 1);
        }
    }

    int failed = -1, left = n, stopping = 0, orphans_killed = 0;
    uint64_t kill_at = 0, orphans_at = 0;
    struct pollfd *pf = calloc((size_t)(2 * n + 2), sizeof *pf);
    int *who = calloc((size_t)(2 * n + 2), sizeof *who);
    for (;;) {
        int np = 0;
        pf[np].fd = sig_pipe[0];
        pf[np].events = POLLIN;
        who[np++] = -1;
        pf[np].fd = note_pipe[0];
        pf[np].events = POLLIN;
        who[np++] = -2;
        for (int k = 0; k < n; k++)
            for (int s = 0; s < 2; s++)
                if (rp[k].fd[s] >= 0) {
                    pf[np].fd = rp[k].fd[s];
                    pf[np].events = POLLIN;
                    who[np++] = k * 2 + s;
                }
        if (left == 0 && np == 2) break;
        if (left == 0) { /* every rank is gone but something they started still holds a pipe */
            uint64_t now = sh_now_ns();
            if (!orphans_at) {
                orphans_at = now + 300000000ull; /* let it finish writing, then end the groups */
            } else if (now > orphans_at && !orphans_killed) {
                for (int k = 0; k < n; k++) kill(-rp[k].pid, SIGKILL);
                orphans_killed = 1;
                orphans_at = now + 1000000000ull;
            } else if (now > orphans_at) { /* escaped its group (setsid): stop reading it */
                for (int k = 0; k < n; k++)
                    for (int s = 0; s < 2; s++)
                        if (rp[k].fd[s] >= 0) {
                            close(rp[k].fd[s]);
                            rp[k].fd[s] = -1;
                        }
                break;
            }
        }
        poll(pf, (nfds_t)np, 50);
        for (int i = 0; i < np; i++) {
            if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            if (who[i] == -2) {
                read_notes(note_pipe[0], rp, n, base);
            } else if (who[i] < 0) {
                unsigned char s;
                while (read(sig_pipe[0], &s, 1) == 1) {
                    for (int k = 0; k < n; k++)
                        if (!rp[k].exited) kill(-rp[k].pid, s);
                    if (!stopping && (s == SIGINT || s == SIGTERM)) {
                        stopping = 1;
                        kill_at = sh_now_ns() + (uint64_t)(o->grace_ms > 0 ? o->grace_ms : 10000) * 1000000ull;
                    }
                }
            } else {
                drain(&rp[who[i] / 2], base + who[i] / 2, who[i] % 2);
            }
        }
        int st;
        pid_t p;
        while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
            for (int k = 0; k < n; k++) {
                if (rp[k].pid != p || rp[k].exited) continue;
                rp[k].exited = 1;
                rp[k].status = st;
                left--;
                int bad = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
                read_notes(note_pipe[0], rp, n, base); /* a drop told just before a death counts */
                if (bad && failed < 0 && !rp[k].killed_by_us && !rp[k].dropped && !stopping) {
                    failed = k;
                    stopping = 1;
                    for (int j = 0; j < n; j++) { /* exited ranks too: what they started dies with them */
                        kill(-rp[j].pid, SIGTERM);
                        kill(-rp[j].pid, SIGCONT); /* a frozen rank acts on it only once continued */
                        if (!rp[j].exited) rp[j].killed_by_us = 1;
                    }
                    kill_at = sh_now_ns() + (uint64_t)(o->grace_ms > 0 ? o->grace_ms : 3000) * 1000000ull;
                }
            }
        }
        if (!stopping && failed < 0 && left > 0) { /* only dropped ranks left: they hold nothing */
            int held = 0, undropped = 0;
            for (int k = 0; k < n; k++) {
                held += !rp[k].exited;
                undropped += !rp[k].exited && !rp[k].dropped;
            }
            if (held && !undropped) {
                for (int k = 0; k < n; k++) {
                    if (rp[k].exited || rp[k].killed_by_us) continue;
                    fprintf(stderr, "shoal %s: rank %d was dropped by the job and still runs after every other "
                            "rank ended; killed it\n", tag, base + k);
                    kill(-rp[k].pid, SIGKILL);
                    rp[k].killed_by_us = 1;
                }
            }
        }
        if (kill_at && sh_now_ns() > kill_at) {
            for (int k = 0; k < n; k++) {
                kill(-rp[k].pid, SIGKILL);
                if (!rp[k].exited) rp[k].killed_by_us = 1;
            }
            kill_at = 0;
        }
    }
    int code = 0;
    if (failed >= 0) {
        /* drain the failed rank's last words first */
        int st = rp[failed].status;
        char how[96];
        if (WIFSIGNALED(st)) {
            snprintf(how, sizeof how, "was killed by %s", sig_name(WTERMSIG(st)));
            code = 128 + WTERMSIG(st);
        } else {
            snprintf(how, sizeof how, "exited with code %d", WEXITSTATUS(st));
            code = WEXITSTATUS(st);
        }
        fprintf(stderr, "shoal %s: rank %d %s%s%s%s; stopped the other ranks%s\n", tag, base + failed, how,
                rp[failed].last_err[0] ? " (its last error line: \"" : "", rp[failed].last_err,
                rp[failed].last_err[0] ? "\")" : "", nnodes > 1 ? " on this node" : "");
    } else {
        for (int k = 0; k < n; k++) {
            int st = rp[k].status;
            int c = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
            if (rp[k].dropped) continue; /* the job went on without it */
            if (c && !code) code = c;
        }
    }
    for (int k = 0; k < n; k++) {
        free(rp[k].buf[0]);
        free(rp[k].buf[1]);
    }
    free(rp);
    free(pf);
    free(who);
    close(sig_pipe[0]);
    close(sig_pipe[1]);
    close(note_pipe[0]);
    close(note_pipe[1]);
    return code;
}
