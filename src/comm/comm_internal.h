/* comm_internal.h — what a communicator holds, shared by the files of src/comm/.
 * Not here: the public API (include/shoal/comm.h), each part's own state (transport/,
 * p2p.c, engine.c keep theirs behind the pointers below).
 * Proved by tests/comm/ as a whole. */
#ifndef SH_COMM_INTERNAL_H
#define SH_COMM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <stdatomic.h>

#include "comm/transport/xfer.h"
#include "shoal/comm.h"

/* The communicator whose engine thread this is (engine.c), NULL on other threads. */
extern _Thread_local const struct shoal_comm *sh_engine_comm;

#define SH_COMM_MAGIC 0x73686f616c636d31ULL /* "shoalcm1" */

typedef enum {
    SH_TRANSPORT_AUTO = 0, /* shm inside a host, tcp between hosts */
    SH_TRANSPORT_SHM,
    SH_TRANSPORT_TCP,
    SH_TRANSPORT_MPI
} sh_transport_kind;

typedef enum {
    SH_ALGO_AUTO = 0,
    SH_ALGO_RING,
    SH_ALGO_RD,   /* recursive doubling */
    SH_ALGO_RHD,  /* recursive halving-doubling (Rabenseifner) */
    SH_ALGO_TREE, /* binomial trees */
    SH_ALGO_HIER, /* within hosts, across hosts, back */
    SH_ALGO_MPI,  /* the MPI library's own collectives */
    SH_ALGO_COUNT
} sh_algo_kind;

typedef enum {
    SH_COLL_ALLREDUCE = 0,
    SH_COLL_BROADCAST,
    SH_COLL_REDUCE,
    SH_COLL_ALLGATHER,
    SH_COLL_REDUCE_SCATTER,
    SH_COLL_ALLTOALL,
    SH_COLL_BARRIER,
    SH_COLL_COUNT
} sh_coll_kind;

/* One collective call as the caller made it (count as in comm.h for that collective). */
typedef struct {
    sh_coll_kind kind;
    const void *send;
    void *recv;
    size_t count;
    shoal_dtype dt;
    shoal_op op;
    int root;
    /* shoal_allreduce_apply_start only: update params from the reduced gradients */
    float *params;
    shoal_apply_fn apply;
    void *apply_ctx;
} sh_coll;

struct shoal_comm {
    uint64_t magic;
    int rank, world;
    int local_rank, local_world; /* among the ranks of this host */
    int nhosts;
    int *host_of;       /* [world]: host index, hosts numbered by their lowest rank */
    char **hostname;    /* [world] */
    int *job_rank;      /* [world] each rank's rank in the job's communicator (a split's
                           errors name both); NULL in the job's own */
    sh_link **coll;     /* [world]: collective plane; coll[rank] == NULL */
    sh_link **p2p;      /* [world]: point-to-point plane (tagged messages); p2p[rank] == NULL */
    sh_transport_kind transport;
    sh_algo_kind algo;  /* forced by SHOAL_ALGO / opts, or AUTO */
    int timeout_ms;
    int spin_us;
    int secure;          /* SHOAL_SECURE: TCP links are sealed (transport/seal.c) */
    size_t chunk_nbytes; /* 0: chosen by message size */
    uint64_t coll_seq;   /* collectives started on this communicator */
    const char *last_path; /* the path the selector took for the last collective (select.c),
                              read by the engine for shoal_wait_trace */
    int last_apply_lead; /* its apply_lead (comm.h): the paths that update all set it */
    uint64_t slot_last;  /* 1 + the last collective that went through the shm slots, or 0 */
    uint64_t slot_prev[2]; /* the same per slot set (collective parity) */
    int broken;
    char broken_msg[512];
    char prefix[64];     /* this communicator's namespace in the store ("w", "w.s1.c3", ...) */
    shoal_comm *parent;
    struct sh_store *store;     /* client of rank 0's store (bootstrap, split) */
    struct sh_store_server *store_server; /* rank 0 of the world only */
    struct sh_elastic *elastic; /* an elastic job's generation, members and own store
                                   (boot/elastic.c); NULL when not elastic */
    uint64_t proc_id;           /* random, this process's: its claim and elastic records */
    struct sh_shm *shm;         /* this host's shared segment (transport/shm.c), or NULL */
    struct sh_engine *engine;   /* non-blocking work (engine.c) */
    _Atomic int app_waiting;    /* threads blocked in shoal_wait on this communicator */
    struct sh_p2p *p2p_state;   /* tagged messages (p2p.c) */
    void *mpi;                  /* transport/mpi.c state, or NULL */
    void *scratch;              /* staging for the algorithms: bounded, O(chunk) per peer */
    size_t scratch_nbytes;
};

/* A communicator with every field at its "nothing yet" value and the given size; links,
 * hosts and names are allocated (all NULL / host 0 / "localhost"). Used by shoal_comm_create,
 * split and the tests' fork harness. Errors: SHOAL_ERR_NOMEM. */
shoal_result sh_comm_alloc(int rank, int world, shoal_comm **out);
/* Free what sh_comm_alloc and the links made (not the engine or store: comm.c). */
void sh_comm_free(shoal_comm *c);
/* Recompute local_rank, local_world and nhosts from host_of[]. */
void sh_comm_index_hosts(shoal_comm *c);
/* An sh_xfer_ctx for this communicator and operation name. */
void sh_comm_xfer_ctx(shoal_comm *c, const char *what, sh_xfer_ctx *x);
/* Mark c broken for why and abort its collective links (and its point-to-point ones with
 * also_p2p), so the peers stop at once too. Once only. */
void sh_comm_break(shoal_comm *c, const char *why, int also_p2p);
/* SHOAL_OK, or SHOAL_ERR_MISMATCH (after breaking c and all its links) when the job's
 * store stopped the job (a rank claimed twice: boot/store.h); rank 0 asks before each
 * operation, the other ranks then see their links to it end. */
shoal_result sh_comm_check_stopped(shoal_comm *c);
/* SHOAL_ERR_PEER naming peer when its links say it is gone: a socket the other side closed
 * or reset, a process on this host that no longer exists; else SHOAL_OK. Never blocks,
 * reads nothing from the links. */
shoal_result sh_comm_peer_lost(const shoal_comm *c, int peer);
/* "rank 3 (hostb)" */
const char *sh_comm_peer_name(void *comm, int peer, char *buf, size_t cap);
/* Staging of at least nbytes, kept for the communicator's life (grows, never shrinks). */
shoal_result sh_comm_scratch(shoal_comm *c, size_t nbytes, void **out);

#endif
