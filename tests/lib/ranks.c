/* ranks.c — the multi-process test harness (see ranks.h). */
#include "ranks.h"
#include "run.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "comm/transport/shm.h"

sh_test_shm_hook sh_test_shm = {sh_shm_test_prepare, sh_shm_test_attach, sh_shm_test_release};

static int socketpair_comm(int rank, int n, int **fds, const sh_test_ranks_opts *o, shoal_comm **out)
{
    shoal_comm *c = NULL;
    if (sh_comm_alloc(rank, n, &c) != SHOAL_OK) return -1;
    for (int r = 0; r < n; r++) {
        c->host_of[r] = o->ranks_per_host > 0 ? r / o->ranks_per_host : 0;
        char h[32];
        snprintf(h, sizeof h, "host%d", c->host_of[r]);
        c->hostname[r] = strdup(h);
    }
    sh_comm_index_hosts(c);
    for (int p = 0; p < n; p++) {
        if (p == rank) continue;
        int lo = rank < p ? rank : p, hi = rank < p ? p : rank;
        int side = rank == lo ? 0 : 1;
        int *pair = fds[lo * n + hi]; /* [plane*2 + side] */
        if (sh_link_fd_create(pair[0 * 2 + side], p, &c->coll[p]) != SHOAL_OK) return -1;
        if (sh_link_fd_create(pair[1 * 2 + side], p, &c->p2p[p]) != SHOAL_OK) return -1;
        pair[0 * 2 + side] = pair[1 * 2 + side] = -1;
    }
    /* Every other descriptor belongs to other ranks: close them here, or a dead peer's
     * socket would stay open in this process and its death would go unseen. */
    for (int i = 0; i < n * n; i++)
        if (fds[i])
            for (int k = 0; k < 4; k++)
                if (fds[i][k] >= 0) {
                    close(fds[i][k]);
                    fds[i][k] = -1;
                }
    *out = c;
    return 0;
}

static int gather(int n, const sh_test_ranks_opts *o, pid_t *pids, int rfd, int *passed, int *failed);

/* What a child does: make its communicator, run fn, report counts through the pipe. */
static void child(int rank, int n, const sh_test_ranks_opts *o, int **fds, void *shm_state,
                  int port, sh_test_rank_fn fn, void *arg, int *passed, int *failed, int wfd)
{
    shoal_comm *c = NULL;
    int ok = 0;
    if (o->links == SH_TEST_SOCKETPAIR || o->links == SH_TEST_SHM) {
        ok = socketpair_comm(rank, n, fds, o, &c) == 0;
        if (ok && o->links == SH_TEST_SHM)
            ok = sh_test_shm.attach && sh_test_shm.attach(shm_state, c) == 0;
        if (ok) {
            c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 20000;
            c->chunk_nbytes = o->chunk_nbytes;
            if (o->algo) {
                static const char *names[] = {"auto", "ring", "rd", "rhd", "tree", "hier", "mpi"};
                for (int i = 0; i < SH_ALGO_COUNT; i++)
                    if (!strcmp(o->algo, names[i])) c->algo = (sh_algo_kind)i;
            }
        }
    } else {
        char v[64];
        snprintf(v, sizeof v, "%d", rank);
        setenv("SHOAL_RANK", v, 1);
        snprintf(v, sizeof v, "%d", n);
        setenv("SHOAL_WORLD_SIZE", v, 1);
        if (o->netns && o->netns[rank]) {
            char path[256];
            snprintf(path, sizeof path, "/var/run/netns/%s", o->netns[rank]);
            int nfd = open(path, O_RDONLY | O_CLOEXEC);
            if (nfd < 0 || setns(nfd, CLONE_NEWNET) < 0 || unshare(CLONE_NEWUTS) < 0 ||
                sethostname(o->netns[rank], strlen(o->netns[rank])) < 0) {
                fprintf(stderr, "rank %d: cannot enter network namespace %s: %s\n", rank, o->netns[rank],
                        strerror(errno));
                _exit(3);
            }
            close(nfd);
        }
        setenv("SHOAL_MASTER_ADDR", o->master_addr ? o->master_addr : "127.0.0.1", 1);
        snprintf(v, sizeof v, "%d", port);
        setenv("SHOAL_MASTER_PORT", v, 1);
        snprintf(v, sizeof v, "test-key-%d", port);
        setenv("SHOAL_JOB_KEY", v, 1);
        shoal_comm_opts co;
        shoal_comm_opts_default(&co);
        co.transport = o->transport;
        co.algo = o->algo;
        co.timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 20000;
        co.chunk_nbytes = o->chunk_nbytes;
        shoal_result rc = shoal_comm_create(&co, &c);
        ok = rc == SHOAL_OK;
        if (!ok) fprintf(stderr, "rank %d: shoal_comm_create: %s\n", rank, shoal_last_error_message());
    }
    if (!ok) {
        fprintf(stderr, "rank %d: could not make the test communicator\n", rank);
        _exit(3);
    }
    *passed = *failed = 0;
    fn(c, arg);
    if (o->links == SH_TEST_REAL) shoal_comm_destroy(c);
    else sh_comm_free(c);
    int counts[2] = {*passed, *failed};
    if (write(wfd, counts, sizeof counts) != (ssize_t)sizeof counts) _exit(4);
    _exit(*failed ? 1 : 0);
}

int sh_test_ranks(int n, const sh_test_ranks_opts *o, sh_test_rank_fn fn, void *arg, int *passed,
                  int *failed)
{
    sh_test_ranks_opts dflt = {0};
    if (!o) o = &dflt;
    fflush(NULL);
    int **fds = calloc((size_t)(n * n), sizeof *fds);
    void *shm_state = NULL;
    int port = 0;
    if (o->links == SH_TEST_SOCKETPAIR || o->links == SH_TEST_SHM) {
        for (int lo = 0; lo < n; lo++)
            for (int hi = lo + 1; hi < n; hi++) {
                int *pair = malloc(4 * sizeof(int));
                for (int plane = 0; plane < 2; plane++)
                    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair + plane * 2) < 0) {
                        perror("socketpair");
                        return n;
                    }
                fds[lo * n + hi] = pair;
            }
        if (o->links == SH_TEST_SHM) {
            if (!sh_test_shm.prepare || sh_test_shm.prepare(n, &shm_state) != 0) {
                fprintf(stderr, "shared-memory test links unavailable\n");
                (*failed)++;
                return n;
            }
        }
    } else {
        port = sh_test_free_ports(1);
    }
    int pipes[2];
    if (pipe(pipes) < 0) return n;
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            close(pipes[0]);
            child(r, n, o, fds, shm_state, port, fn, arg, passed, failed, pipes[1]);
        }
    }
    close(pipes[1]);
    if (shm_state && sh_test_shm.release) sh_test_shm.release(shm_state);
    for (int i = 0; i < n * n; i++)
        if (fds[i]) {
            for (int k = 0; k < 4; k++)
                if (fds[i][k] >= 0) close(fds[i][k]);
            free(fds[i]);
        }
    free(fds);
    return gather(n, o, pids, pipes[0], passed, failed);
}

int sh_test_procs(int n, const sh_test_ranks_opts *o, sh_test_proc_fn fn, void *arg, int *passed, int *failed)
{
    sh_test_ranks_opts dflt = {0};
    if (!o) o = &dflt;
    fflush(NULL);
    int pipes[2];
    if (pipe(pipes) < 0) return n;
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            close(pipes[0]);
            *passed = *failed = 0;
            fn(r, arg);
            int counts[2] = {*passed, *failed};
            if (write(pipes[1], counts, sizeof counts) != (ssize_t)sizeof counts) _exit(4);
            _exit(*failed ? 1 : 0);
        }
    }
    close(pipes[1]);
    return gather(n, o, pids, pipes[0], passed, failed);
}

/* Wait for the n children (the deadline kills the late ones), add their CHECK counts from
 * the pipe, and count the failed ones; frees pids and closes the pipe. */
static int gather(int n, const sh_test_ranks_opts *o, pid_t *pids, int rfd, int *passed, int *failed)
{
    int deadline_s = o->deadline_s > 0 ? o->deadline_s : 120;
    time_t t0 = time(NULL);
    int bad = 0, left = n;
    int *status = calloc((size_t)n, sizeof *status);
    int *done = calloc((size_t)n, sizeof *done);
    while (left > 0) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) {
            for (int r = 0; r < n; r++)
                if (pids[r] == p) {
                    done[r] = 1;
                    status[r] = st;
                    left--;
                }
            continue;
        }
        if (time(NULL) - t0 > deadline_s) {
            for (int r = 0; r < n; r++)
                if (!done[r]) {
                    fprintf(stderr, "FAIL rank %d still running after %d s: killed\n", r, deadline_s);
                    kill(pids[r], SIGKILL);
                }
            while (left > 0) {
                pid_t q = waitpid(-1, &st, 0);
                if (q < 0 && errno != EINTR) break;
                for (int r = 0; r < n; r++)
                    if (pids[r] == q && !done[r]) {
                        done[r] = 1;
                        status[r] = -1;
                        left--;
                    }
            }
            break;
        }
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    int counts[2];
    while (read(rfd, counts, sizeof counts) == (ssize_t)sizeof counts) {
        *passed += counts[0];
        *failed += counts[1];
    }
    close(rfd);
    for (int r = 0; r < n; r++) {
        int st = status[r];
        int ok = st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (r < 32 && (o->dying_mask >> r) & 1u) continue;
        if (!ok) {
            bad++;
            (*failed)++;
            if (st == -1) fprintf(stderr, "FAIL rank %d timed out\n", r);
            else if (WIFSIGNALED(st))
                fprintf(stderr, "FAIL rank %d died of signal %d\n", r, WTERMSIG(st));
            else fprintf(stderr, "FAIL rank %d exited with %d\n", r, WEXITSTATUS(st));
        }
    }
    free(pids);
    free(status);
    free(done);
    return bad;
}
