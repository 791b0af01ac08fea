/* ranks.h — the multi-process test harness: fork N real processes, give each a real
 * communicator, run a test function in every rank, gather each rank's CHECK counts and
 * exit status into the parent's. A rank that crashes, exits non-zero or outlives the
 * deadline is a failure naming that rank.
 *
 *   static void sums(shoal_comm *c, void *arg) { ... CHECK(...); }
 *   RUN_RANKS(4, &(sh_test_ranks_opts){.links = SH_TEST_SOCKETPAIR}, sums, NULL);
 *
 * RUN_PROCS does the same for processes with no communicator (tests of the bootstrap).
 * Not here: the things under test. Used by tests/comm/, tests/train/. */
#ifndef SH_TEST_RANKS_H
#define SH_TEST_RANKS_H

#include "shoal/comm.h"

typedef enum {
    /* Links made before fork: a socketpair per rank pair and plane, no bootstrap.
     * For algorithm tests that must not depend on the rendezvous. */
    SH_TEST_SOCKETPAIR = 0,
    /* Shared-memory links made before fork (transport/shm_test.c's hook). */
    SH_TEST_SHM,
    /* The real thing: each child sets SHOAL_RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT/JOB_KEY
     * (free port picked by the parent) and calls shoal_comm_create. */
    SH_TEST_REAL,
} sh_test_links;

typedef struct {
    sh_test_links links;
    int ranks_per_host;    /* 0: all on one host; k: host_of[r] = r / k (SOCKETPAIR/SHM) */
    const char *transport; /* SH_TEST_REAL: opts.transport ("shm", "tcp", NULL = auto) */
    const char *algo;      /* forced algorithm (NULL: auto) */
    size_t chunk_nbytes;   /* 0: default */
    int timeout_ms;        /* the communicator's deadline (0: 20000) */
    int deadline_s;        /* the whole run's deadline (0: 120) */
    unsigned dying_mask;   /* bit r set: rank r is expected to die or fail (fault tests) */
    /* SH_TEST_REAL across "hosts": rank r enters network namespace netns[r] (and a UTS
     * namespace whose hostname is that name) before it creates its communicator, and
     * finds rank 0's store at master_addr. NULL: all in this namespace, 127.0.0.1. */
    const char *const *netns;
    const char *master_addr;
} sh_test_ranks_opts;

typedef void (*sh_test_rank_fn)(shoal_comm *c, void *arg);

/* Returns the number of ranks that failed (crash, non-zero exit, timeout). Counts of passed
 * and failed CHECKs in the children are added to *passed and *failed. */
int sh_test_ranks(int n, const sh_test_ranks_opts *o, sh_test_rank_fn fn, void *arg, int *passed,
                  int *failed);

/* Hook for SH_TEST_SHM, set by transport/shm_test.c: make the links of `world`
 * ranks before fork (*state), and attach rank `rank`'s links after fork. */
typedef struct {
    int (*prepare)(int world, void **state);
    int (*attach)(void *state, shoal_comm *c);
    void (*release)(void *state); /* in the parent, after fork */
} sh_test_shm_hook;
extern sh_test_shm_hook sh_test_shm;

#define RUN_RANKS(n, opts, fn, arg) sh_test_ranks((n), (opts), (fn), (arg), &check_passed, &check_failed)

/* Processes without a communicator, for tests of what builds one (the store, the
 * rendezvous, the links): fork n processes running fn(i, arg), i = 0..n-1, under the same
 * rules as sh_test_ranks (CHECK counts come back, a crash, a non-zero exit or
 * o->deadline_s is a failure naming process i, o->dying_mask excuses some). o may be
 * NULL; its other fields are not read. Returns the number of processes that failed. */
typedef void (*sh_test_proc_fn)(int i, void *arg);
int sh_test_procs(int n, const sh_test_ranks_opts *o, sh_test_proc_fn fn, void *arg, int *passed, int *failed);

#define RUN_PROCS(n, opts, fn, arg) sh_test_procs((n), (opts), (fn), (arg), &check_passed, &check_failed)

#endif
