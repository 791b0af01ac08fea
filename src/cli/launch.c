/* launch.c — the local launcher behind `shoal launch` and `shoal train -n`: ranks that die
 * with it (PR_SET_PDEATHSIG), their output relayed, the job stopped when one fails.
 * Not here: flag parsing (cmd_launch.c, cmd_train.c), limits and output files (launch_check.c).
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
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"
#include "base/err.h"
#include "base/util.h"
#include "cli/launch_check.h"

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
    int plain;              /* its stdout is the job's result (a note "plain R"): no tag */
    int lost;               /* it failed while the job was elastic: the others go on */
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

static void emit(rank_proc *r, int k, int stream, const char *line, size_t n, int whole)
{
    FILE *f = stream ? stderr : stdout;
    if (!stream && r->plain) /* a JSON document, a table: as written, a long line not cut */
        fprintf(f, "%.*s%s", (int)n, line, whole ? "\n" : "");
    else if (names_rank(line, n, k))
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
        if (r->len[stream]) emit(r, k, stream, r->buf[stream], r->len[stream], 1);
        r->len[stream] = 0;
        close(r->fd[stream]);
        r->fd[stream] = -1;
        return 0;
    }
    for (ssize_t i = 0; i < n; i++) {
        char ch = tmp[i];
        if (ch == '\n' || r->len[stream] == LINE_MAX_NBYTES) {
            emit(r, k, stream, r->buf[stream], r->len[stream], ch == '\n');
            r->len[stream] = 0;
            if (ch == '\n') continue;
        }
        r->buf[stream][r->len[stream]++] = ch;
    }
    return 1;
}

/* Lines "dropped R", "plain R" and "elastic" from the ranks (each write is one whole line:
 * shorter than PIPE_BUF). A rank notes "plain" before it writes its result, and the notes are
 * read before its output in the same wake-up (poll_set puts them first). */
static void read_notes(int fd, rank_proc *rp, int n, int base, int *elastic)
{
    char buf[512];
    ssize_t got;
    while ((got = read(fd, buf, sizeof buf - 1)) > 0) {
        buf[got] = 0;
        if (strstr(buf, "elastic\n")) *elastic = 1;
        for (char *p = buf; (p = strstr(p, "dropped ")); p++) {
            int r = atoi(p + 8) - base; /* the job's rank; this node holds base .. base+n-1 */
            if (r >= 0 && r < n) rp[r].dropped = 1;
        }
        for (char *p = buf; (p = strstr(p, "plain ")); p++) {
            int r = atoi(p + 6) - base;
            if (r >= 0 && r < n) rp[r].plain = 1;
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

/* One launcher's state: the job's rendezvous, its ranks and what the watch loop knows. */
typedef struct {
    const sh_launch_opts *o;
    char *const *argv;
    const char *tag;
    int n, nnodes, base;        /* ranks here; machines; this machine's first rank */
    char port[16], key[65], nstr[16], wstr[16], master[256];
    int bind_cores;
    int note_pipe[2];           /* ranks -> launcher: "dropped R" lines (shoal_job_note_dropped) */
    pid_t self;                 /* the launcher: a rank whose parent is not it has lost it */
    rank_proc *rp;
    int (*outs)[2];             /* --output-dir: rank k's files until it starts, else -1 */
    struct pollfd *pf;
    int *who;                   /* per pf entry: -1 signals, -2 notes, else 2 * rank + stream */
    int failed, left, stopping, orphans_killed;
    int elastic;                /* a rank said the job is elastic: a rank that ends does not stop the others */
    uint64_t kill_at, orphans_at;
} launcher;

/* Node 0's address, the port and the job key every rank meets at. 0, or the exit code. */
static int rendezvous(launcher *l)
{
    const sh_launch_opts *o = l->o;
    if (l->nnodes > 1) { /* every node must agree on the master, its port and the key */
        const char *m = o->master_addr                       ? o->master_addr
                        : sh_env_is_set("SHOAL_MASTER_ADDR") ? sh_env_str("SHOAL_MASTER_ADDR")
                                                             : NULL;
        if (!m || !*m) {
            fprintf(stderr, "shoal %s: --nnodes %d needs node 0's address: give --master-addr ADDR "
                    "(or set SHOAL_MASTER_ADDR) on every node\n", l->tag, l->nnodes);
            return 2;
        }
        if (o->node_rank < 0 || o->node_rank >= l->nnodes) {
            fprintf(stderr, "shoal %s: --node-rank %d is outside 0..%d (--nnodes %d)\n", l->tag, o->node_rank,
                    l->nnodes - 1, l->nnodes);
            return 2;
        }
        if (!sh_env_is_set("SHOAL_JOB_KEY")) {
            fprintf(stderr, "shoal %s: --nnodes %d needs the same SHOAL_JOB_KEY on every node: set it to 64 hex "
                    "digits (e.g. SHOAL_JOB_KEY=$(openssl rand -hex 32)) and pass it to each node's launcher\n",
                    l->tag, l->nnodes);
            return 2;
        }
        snprintf(l->master, sizeof l->master, "%s", m);
    } else {
        snprintf(l->master, sizeof l->master, "127.0.0.1");
    }
    long user_port = 0; /* the user's choice passes through; else a free port */
    if (sh_env_is_set("SHOAL_MASTER_PORT") && sh_env_long("SHOAL_MASTER_PORT", &user_port) != SHOAL_OK) {
        fprintf(stderr, "shoal %s: %s\n", l->tag, shoal_last_error_message());
        return 2;
    }
    snprintf(l->port, sizeof l->port, "%d", user_port ? (int)user_port : l->nnodes > 1 ? 29500 : free_port());
    const char *env_key = sh_env_is_set("SHOAL_JOB_KEY") ? sh_env_str("SHOAL_JOB_KEY") : NULL;
    if (env_key) {
        snprintf(l->key, sizeof l->key, "%.64s", env_key);
    } else {
        unsigned char rnd[32];
        if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) { /* never a guessable key */
            fprintf(stderr, "shoal %s: getrandom failed (%s): set SHOAL_JOB_KEY to 64 hex digits yourself\n",
                    l->tag, strerror(errno));
            return 1;
        }
        for (int i = 0; i < 32; i++) sprintf(l->key + 2 * i, "%02x", rnd[i]);
    }
    snprintf(l->nstr, sizeof l->nstr, "%d", l->n);
    snprintf(l->wstr, sizeof l->wstr, "%d", l->n * l->nnodes);
    return 0;
}

/* Pipes, signal forwarding and the binding rule, before any rank starts. 0, or the exit code. */
static int prepare(launcher *l)
{
    if (sh_launch_check_limits(l->tag, l->n)) return 1;
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0 || pipe2(l->note_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
        fprintf(stderr, "shoal %s: pipe: %s\n", l->tag, strerror(errno));
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
        fprintf(stderr, "shoal %s: SHOAL_BIND=%s: use core or none\n", l->tag, bind);
        return 2;
    }
    l->bind_cores = !bind || !strcmp(bind, "core");
    l->rp = calloc((size_t)l->n, sizeof *l->rp);
    l->pf = calloc((size_t)(2 * l->n + 2), sizeof *l->pf);
    l->who = calloc((size_t)(2 * l->n + 2), sizeof *l->who);
    l->outs = calloc((size_t)l->n, sizeof *l->outs);
    if (!l->rp || !l->pf || !l->who || !l->outs) {
        fprintf(stderr, "shoal %s: out of memory for %d ranks\n", l->tag, l->n);
        return 1;
    }
    for (int k = 0; k < l->n; k++) l->outs[k][0] = l->outs[k][1] = -1;
    /* every output file before the first rank: a file that cannot be written stops nothing */
    if (l->o->output_dir) return sh_launch_open_outputs(l->tag, l->o->output_dir, l->n, l->base, l->outs);
    return 0;
}

/* In the child: rank k's CPUs, signals, variables and output, then the command. Never returns. */
static void exec_rank(const launcher *l, int k, int out_fd, int err_fd, int status_fd)
{
    /* The rank dies with the launcher, even by SIGKILL; a launcher gone before this call
     * left the rank to init already. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != l->self) _exit(126);
    setpgid(0, 0);
    if (l->bind_cores) { /* rank k gets its share of the cores, as mpirun binds */
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        if (ncpu > 0) {
            long per = ncpu / l->n > 0 ? ncpu / l->n : 1, first = (long)k * per % ncpu;
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
    snprintf(v, sizeof v, "%d", l->base + k);
    setenv("SHOAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", k);
    setenv("SHOAL_LOCAL_RANK", v, 1);
    setenv("SHOAL_WORLD_SIZE", l->wstr, 1);
    setenv("SHOAL_LOCAL_SIZE", l->nstr, 1);
    setenv("SHOAL_MASTER_ADDR", l->master, 1);
    setenv("SHOAL_MASTER_PORT", l->port, 1);
    setenv("SHOAL_JOB_KEY", l->key, 1);
    int note_fd = dup(l->note_pipe[1]); /* without O_CLOEXEC: the rank keeps it */
    if (note_fd >= 0) {
        snprintf(v, sizeof v, "%d", note_fd);
        setenv("SHOAL_LAUNCH_FD", v, 1);
    }
    /* launched by mpirun ourselves? our ranks are ours, not MPI's */
    const char *mpi_vars[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                              "SLURM_PROCID", "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof mpi_vars / sizeof mpi_vars[0]; i++) unsetenv(mpi_vars[i]);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    execvp(l->argv[0], l->argv);
    int e = errno;
    if (write(status_fd, &e, sizeof e) < 0) { /* the parent reports it */
    }
    _exit(127);
}

static void close_fds(const int *fds, int n)
{
    for (int t = 0; t < n; t++)
        if (fds[t] >= 0) close(fds[t]);
}

/* Starting rank k failed: the ranks started before it are killed and reaped. */
static void stop_started(launcher *l, int k)
{
    for (int j = 0; j < k; j++) kill(-l->rp[j].pid, SIGKILL);
    for (int j = 0; j < k; j++) waitpid(l->rp[j].pid, NULL, 0);
}

/* The command could not run as rank k: one line, not one per rank; the ranks started
 * before it are killed. */
static void abandon_start(launcher *l, int k, pid_t pid, int exec_errno)
{
    fprintf(stderr, "shoal %s: cannot run \"%s\": %s (check the name, or give its path)\n", l->tag, l->argv[0],
            exec_errno == ENOENT && !strchr(l->argv[0], '/') ? "not found in PATH" : strerror(exec_errno));
    waitpid(pid, NULL, 0);
    stop_started(l, k);
}

/* Start rank k with its output on pipes (or in --output-dir files). 0, or the exit code. */
static int start_rank(launcher *l, int k)
{
    int p_out[2] = {-1, -1}, p_err[2] = {-1, -1};
    int fout = l->outs[k][0], ferr = l->outs[k][1];
    l->outs[k][0] = l->outs[k][1] = -1; /* closed below, whatever happens */
    const char *dir = l->o->output_dir;
    int exec_st[2] = {-1, -1}; /* the child's execvp errno, or end of file once it ran */
    if ((!dir && (pipe2(p_out, O_CLOEXEC) < 0 || pipe2(p_err, O_CLOEXEC) < 0)) || pipe2(exec_st, O_CLOEXEC) < 0) {
        fprintf(stderr, "shoal %s: pipe for rank %d: %s; stopped the ranks already started\n", l->tag, l->base + k,
                strerror(errno));
        close_fds((int[]){p_out[0], p_out[1], p_err[0], p_err[1], fout, ferr}, 6);
        stop_started(l, k);
        return 1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(exec_st[0]);
        exec_rank(l, k, dir ? fout : p_out[1], dir ? ferr : p_err[1], exec_st[1]);
    }
    close(exec_st[1]);
    int exec_errno = 0;
    ssize_t got;
    while ((got = read(exec_st[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
    }
    close(exec_st[0]);
    int fds[6] = {p_out[0], p_out[1], p_err[0], p_err[1], fout, ferr};
    if (pid > 0 && got == (ssize_t)sizeof exec_errno) {
        abandon_start(l, k, pid, exec_errno);
        close_fds(fds, 6);
        return 127;
    }
    if (pid < 0) {
        fprintf(stderr, "shoal %s: fork for rank %d: %s; stopped the ranks already started\n", l->tag, l->base + k,
                strerror(errno));
        stop_started(l, k);
        close_fds(fds, 6);
        return 1;
    }
    setpgid(pid, pid);
    rank_proc *r = &l->rp[k];
    r->pid = pid;
    close_fds(fds + 4, 2);
    close_fds((int[]){p_out[1], p_err[1]}, 2);
    r->fd[0] = p_out[0];
    r->fd[1] = p_err[0];
    if (!dir) {
        r->buf[0] = malloc(LINE_MAX_NBYTES + 1);
        r->buf[1] = malloc(LINE_MAX_NBYTES + 1);
    }
    return 0;
}

/* The descriptors to wait on: signals, notes, and every open output pipe. */
static int poll_set(launcher *l)
{
    int np = 0;
    l->pf[np] = (struct pollfd){.fd = sig_pipe[0], .events = POLLIN};
    l->who[np++] = -1;
    l->pf[np] = (struct pollfd){.fd = l->note_pipe[0], .events = POLLIN};
    l->who[np++] = -2;
    for (int k = 0; k < l->n; k++)
        for (int s = 0; s < 2; s++)
            if (l->rp[k].fd[s] >= 0) {
                l->pf[np] = (struct pollfd){.fd = l->rp[k].fd[s], .events = POLLIN};
                l->who[np++] = k * 2 + s;
            }
    return np;
}

/* Every rank is gone but something they started still holds a pipe: let it finish writing,
 * then end the groups; what escaped its group (setsid) is no longer read. 1: stop watching. */
static int end_orphans(launcher *l)
{
    uint64_t now = sh_now_ns();
    if (!l->orphans_at) {
        l->orphans_at = now + 300000000ull;
    } else if (now > l->orphans_at && !l->orphans_killed) {
        for (int k = 0; k < l->n; k++) kill(-l->rp[k].pid, SIGKILL);
        l->orphans_killed = 1;
        l->orphans_at = now + 1000000000ull;
    } else if (now > l->orphans_at) {
        for (int k = 0; k < l->n; k++)
            for (int s = 0; s < 2; s++)
                if (l->rp[k].fd[s] >= 0) {
                    close(l->rp[k].fd[s]);
                    l->rp[k].fd[s] = -1;
                }
        return 1;
    }
    return 0;
}

/* Signals to the launcher go to every rank; SIGINT and SIGTERM start the grace period. */
static void forward_signals(launcher *l)
{
    unsigned char s;
    while (read(sig_pipe[0], &s, 1) == 1) {
        for (int k = 0; k < l->n; k++)
            if (!l->rp[k].exited) kill(-l->rp[k].pid, s);
        if (!l->stopping && (s == SIGINT || s == SIGTERM)) {
            l->stopping = 1;
            l->kill_at = sh_now_ns() + (uint64_t)(l->o->grace_ms > 0 ? l->o->grace_ms : 10000) * 1000000ull;
        }
    }
}

/* Collect the ranks that ended; the first to fail (not dropped, not killed by us) stops the
 * others. */
static void reap(launcher *l)
{
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
        for (int k = 0; k < l->n; k++) {
            rank_proc *r = &l->rp[k];
            if (r->pid != p || r->exited) continue;
            r->exited = 1;
            r->status = st;
            l->left--;
            int bad = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
            read_notes(l->note_pipe[0], l->rp, l->n, l->base, &l->elastic); /* a drop told just before a death counts */
            if (!bad || l->failed >= 0 || r->killed_by_us || r->dropped || l->stopping) continue;
            if (l->elastic) { /* the others regroup without it */
                char how[96];
                if (WIFSIGNALED(st)) snprintf(how, sizeof how, "was killed by %s", sig_name(WTERMSIG(st)));
                else snprintf(how, sizeof how, "exited with code %d", WEXITSTATUS(st));
                r->lost = 1;
                fprintf(stderr, "shoal %s: rank %d %s%s%s%s (an elastic job: the other ranks were not stopped)\n", l->tag, l->base + k,
                        how, r->last_err[0] ? " (its last error line: \"" : "", r->last_err, r->last_err[0] ? "\")" : "");
                continue;
            }
            l->failed = k;
            l->stopping = 1;
            for (int j = 0; j < l->n; j++) { /* exited ranks too: what they started dies with them */
                kill(-l->rp[j].pid, SIGTERM);
                kill(-l->rp[j].pid, SIGCONT); /* a frozen rank acts on it only once continued */
                if (!l->rp[j].exited) l->rp[j].killed_by_us = 1;
            }
            l->kill_at = sh_now_ns() + (uint64_t)(l->o->grace_ms > 0 ? l->o->grace_ms : 3000) * 1000000ull;
        }
    }
}

/* A rank the job dropped (shoal_job_note_dropped: a parameter server gave up on a silent
 * worker) holds nothing the job needs: it is ended at once, so that a frozen one cannot hold
 * the job's end (its peers' last sends to it fail at once instead of timing out). */
static void end_dropped(launcher *l)
{
    for (int k = 0; k < l->n; k++) {
        rank_proc *r = &l->rp[k];
        if (!r->dropped || r->exited || r->killed_by_us) continue;
        fprintf(stderr, "shoal %s: rank %d was dropped by the job (it stopped answering); killed it\n", l->tag,
                l->base + k);
        kill(-r->pid, SIGKILL);
        r->killed_by_us = 1;
    }
}

/* Relay output and signals until every rank has ended and its pipes are drained. */
static void watch(launcher *l)
{
    l->failed = -1;
    l->left = l->n;
    for (;;) {
        int np = poll_set(l);
        if (l->left == 0 && np == 2) break;
        if (l->left == 0 && end_orphans(l)) break;
        poll(l->pf, (nfds_t)np, 50);
        for (int i = 0; i < np; i++) {
            if (!(l->pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            if (l->who[i] == -2) read_notes(l->note_pipe[0], l->rp, l->n, l->base, &l->elastic);
            else if (l->who[i] < 0) forward_signals(l);
            else drain(&l->rp[l->who[i] / 2], l->base + l->who[i] / 2, l->who[i] % 2);
        }
        reap(l);
        end_dropped(l);
        if (l->kill_at && sh_now_ns() > l->kill_at) {
            for (int k = 0; k < l->n; k++) {
                kill(-l->rp[k].pid, SIGKILL);
                if (!l->rp[k].exited) l->rp[k].killed_by_us = 1;
            }
            l->kill_at = 0;
        }
    }
}

/* The launcher's exit code: the failed rank's (named with its last error line), else the
 * first non-zero code of a rank the job did not drop. */
static int exit_code(const launcher *l)
{
    int code = 0, lost_code = 0, kept = 0;
    if (l->failed < 0) {
        for (int k = 0; k < l->n; k++) {
            int st = l->rp[k].status;
            int c = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
            if (l->rp[k].lost && c && !lost_code) lost_code = c;
            if (l->rp[k].dropped || l->rp[k].lost) continue; /* the job went on without it */
            kept++;
            if (c && !code) code = c;
        }
        return kept ? code : lost_code; /* an elastic job that lost every rank here failed */
    }
    const rank_proc *r = &l->rp[l->failed];
    int st = r->status;
    char how[96];
    /* the store refused a rank that two launchers started: say which flag did it */
    if (l->nnodes > 1 && strstr(r->last_err, "claimed twice")) {
        fprintf(stderr, "shoal %s: two machines claim node %d: another launcher was started with --node-rank %d "
                "too (rank %d was claimed twice); give each of the %d machines its own --node-rank 0..%d; stopped "
                "the ranks on this node\n", l->tag, l->o->node_rank, l->o->node_rank, l->base + l->failed,
                l->nnodes, l->nnodes - 1);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    if (WIFSIGNALED(st)) {
        snprintf(how, sizeof how, "was killed by %s", sig_name(WTERMSIG(st)));
        code = 128 + WTERMSIG(st);
    } else {
        snprintf(how, sizeof how, "exited with code %d", WEXITSTATUS(st));
        code = WEXITSTATUS(st);
    }
    fprintf(stderr, "shoal %s: rank %d %s%s%s%s; stopped the other ranks%s\n", l->tag, l->base + l->failed, how,
            r->last_err[0] ? " (its last error line: \"" : "", r->last_err, r->last_err[0] ? "\")" : "",
            l->nnodes > 1 ? " on this node" : "");
    return code;
}

static void cleanup(launcher *l)
{
    for (int k = 0; l->rp && k < l->n; k++) {
        for (int s = 0; s < 2; s++) {
            if (l->rp[k].fd[s] >= 0 && l->rp[k].pid) close(l->rp[k].fd[s]);
            free(l->rp[k].buf[s]);
        }
    }
    if (l->outs) sh_launch_close_outputs(l->outs, l->n);
    free(l->outs);
    free(l->rp);
    free(l->pf);
    free(l->who);
    int fds[4] = {sig_pipe[0], sig_pipe[1], l->note_pipe[0], l->note_pipe[1]};
    close_fds(fds, 4);
    sig_pipe[0] = sig_pipe[1] = -1;
}

int sh_launch_run(const sh_launch_opts *o, char *const argv[])
{
    launcher l = {.o = o, .argv = argv, .tag = o->tag ? o->tag : "launch", .n = o->nranks,
                  .nnodes = o->nnodes > 1 ? o->nnodes : 1, .note_pipe = {-1, -1}, .self = getpid()};
    l.base = l.nnodes > 1 ? o->node_rank * l.n : 0;
    int code = rendezvous(&l);
    if (code) return code;
    code = prepare(&l);
    fflush(NULL);
    for (int k = 0; k < l.n && !code; k++) code = start_rank(&l, k);
    if (!code) {
        watch(&l);
        code = exit_code(&l);
    }
    cleanup(&l);
    return code;
}
