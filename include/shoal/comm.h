/* comm.h — shoal's collective-communication library: a communicator over N ranks,
 * collectives, tagged point-to-point messages, blocking and non-blocking.
 * Not here: errors (shoal/result.h); the neural-network engine and training strategies
 * (see also shoal/net.h and shoal/train.h). The implementation is src/comm/ (boot/,
 * transport/, coll/; docs/comm.md).
 * Proved by tests/comm/. Usable on its own: link libshoal, include this header.
 *
 * Threading: one thread at a time may issue calls on a communicator; non-blocking
 * operations progress on the communicator's own progress thread and complete in the
 * order they were started. Every blocking call returns within SHOAL_TIMEOUT. */
#ifndef SHOAL_COMM_H
#define SHOAL_COMM_H

#include <stddef.h>
#include <stdint.h>
#include "shoal/result.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SHOAL_INT8 = 0,
    SHOAL_UINT8,
    SHOAL_INT32,
    SHOAL_INT64,
    SHOAL_FLOAT16,
    SHOAL_BFLOAT16,
    SHOAL_FLOAT32,
    SHOAL_FLOAT64,
    SHOAL_DTYPE_COUNT
} shoal_dtype;

typedef enum { SHOAL_SUM = 0, SHOAL_PROD, SHOAL_MIN, SHOAL_MAX, SHOAL_AVG, SHOAL_OP_COUNT } shoal_op;

size_t shoal_dtype_nbytes(shoal_dtype dt);         /* 0 for an invalid dtype */
const char *shoal_dtype_name(shoal_dtype dt);      /* "float32"; nccl-tests spells it so */
const char *shoal_op_name(shoal_op op);            /* "sum" */
shoal_result shoal_dtype_parse(const char *s, shoal_dtype *out);  /* "float", "float32", "f32", ... */
shoal_result shoal_op_parse(const char *s, shoal_op *out);

typedef struct shoal_comm shoal_comm;       /* opaque */
typedef struct shoal_request shoal_request; /* opaque; one non-blocking operation */

typedef struct {
    int rank;                 /* -1: from the environment (SHOAL_RANK, Open MPI, PMI, Slurm) */
    int world;                /* -1: from the environment */
    const char *master_addr;  /* NULL: SHOAL_MASTER_ADDR */
    int master_port;          /* 0: SHOAL_MASTER_PORT */
    const char *job_key;      /* NULL: SHOAL_JOB_KEY (or one derived from the launcher's job id) */
    const char *transport;    /* NULL or "auto": shm within a host, tcp between; "shm", "tcp", "mpi" */
    const char *algo;         /* NULL or "auto"; "ring", "rd", "rhd", "tree", "hier", "mpi" */
    int timeout_ms;           /* 0: SHOAL_TIMEOUT */
    size_t chunk_nbytes;      /* 0: chosen by message size; tests make it small */
    int elastic_min;          /* > 0: an elastic job (shoal_comm_regroup below) that goes on
                                 while at least this many ranks remain; 0: not elastic */
    int elastic_max;          /* elastic: at most this many ranks (late ones join up to it);
                                 0: the world size */
} shoal_comm_opts;

/* Fill with "from the environment / automatic" values (all of the above at 0/-1/NULL). */
void shoal_comm_opts_default(shoal_comm_opts *o);

/* Create the communicator: rendezvous with every rank through rank 0's TCP store, learn
 * hosts, connect transports. Collective over all ranks; blocks up to the timeout.
 * Errors: SHOAL_ERR_INVALID (bad options or environment), SHOAL_ERR_TIMEOUT (a rank never
 * came), SHOAL_ERR_PEER, SHOAL_ERR_IO. On error *out is NULL. */
shoal_result shoal_comm_create(const shoal_comm_opts *o, shoal_comm **out);
/* Release everything (sockets, shared memory). NULL is fine. Not collective; pending
 * non-blocking operations are cancelled. */
void shoal_comm_destroy(shoal_comm *c);

/* This process's place in a job as its launcher's environment tells it (shoal launch,
 * Open MPI, MPICH/Hydra, Slurm: the same variables shoal_comm_create reads), without
 * joining the job: no sockets, no waiting. A process no launcher started, or one whose
 * variables are incomplete, reads as alone (rank 0 of 1; shoal_comm_create would name the
 * problem). local_world is the ranks on this host when the launcher says (0: not said).
 * Errors: SHOAL_ERR_INVALID when out is NULL. Thread-safe; the strings are static. */
typedef struct {
    int rank, world;
    int local_world;
    const char *launcher;     /* "shoal", "openmpi", "mpich", "slurm"; NULL: alone */
} shoal_job_env;
shoal_result shoal_job_env_read(shoal_job_env *out);
/* Tell the launcher that started this process that the job has dropped rank `rank` (a
 * parameter server gave up on a silent worker), so it stops waiting for that rank once
 * every other rank has ended, and ends it. Under `shoal launch` a line on the pipe it
 * passed in SHOAL_LAUNCH_FD; under other launchers (or alone) nothing. Never blocks for
 * long, never fails (a launcher that is gone has nothing to be told). Thread-safe. */
void shoal_job_note_dropped(int rank);

int shoal_comm_rank(const shoal_comm *c);
int shoal_comm_world(const shoal_comm *c);
int shoal_comm_local_rank(const shoal_comm *c);   /* rank among ranks on this host */
int shoal_comm_local_world(const shoal_comm *c);  /* ranks on this host */
int shoal_comm_nhosts(const shoal_comm *c);
const char *shoal_comm_host(const shoal_comm *c, int rank);  /* host name of a rank */
/* 1 once an operation failed with a peer, timeout or mismatch: destroy it. */
int shoal_comm_is_broken(const shoal_comm *c);
/* Give up on the communicator from another thread (a Ctrl-C watcher): every link to the
 * other ranks is aborted with `why`, so the call in progress on it (blocking, or on its own
 * thread) returns SHOAL_ERR_PEER within milliseconds, and so do the other ranks' calls, naming
 * this rank and why. Afterwards every call fails: destroy it. Thread-safe against the one
 * thread calling on c; c must stay alive until abort returns. Not with the MPI transport
 * (SHOAL_ERR_UNSUPPORTED: MPI has no abort another thread may call). */
shoal_result shoal_comm_abort(shoal_comm *c, const char *why);

/* Split into sub-communicators as MPI_Comm_split: ranks with the same color form one,
 * ordered by key then old rank. color < 0: this rank joins none (*out = NULL). Collective. */
shoal_result shoal_comm_split(shoal_comm *c, int color, int key, shoal_comm **out);

/* Collectives. Counts are elements of dt. send == recv is in-place. Blocking; every rank
 * must call the same collective with the same count, dtype, op and root, or all get
 * SHOAL_ERR_MISMATCH naming both sides. Errors also: SHOAL_ERR_TIMEOUT, SHOAL_ERR_PEER
 * (naming the rank and host), SHOAL_ERR_BROKEN. Buffers are borrowed for the call. */
shoal_result shoal_allreduce(shoal_comm *c, const void *send, void *recv, size_t count,
                             shoal_dtype dt, shoal_op op);
/* send is read at root only; recv is written on every rank (root too). */
shoal_result shoal_broadcast(shoal_comm *c, const void *send, void *recv, size_t count,
                             shoal_dtype dt, int root);
/* recv is written at root only (may be NULL elsewhere). */
shoal_result shoal_reduce(shoal_comm *c, const void *send, void *recv, size_t count,
                          shoal_dtype dt, shoal_op op, int root);
/* send has count elements; recv has count * world, rank r's block at r * count. */
shoal_result shoal_allgather(shoal_comm *c, const void *send, void *recv, size_t count,
                             shoal_dtype dt);
/* send has recv_count * world elements; rank r receives the reduction of block r. */
shoal_result shoal_reduce_scatter(shoal_comm *c, const void *send, void *recv,
                                  size_t recv_count, shoal_dtype dt, shoal_op op);
/* send and recv have count * world elements; block p of send goes to rank p, and block p
 * of recv came from rank p. */
shoal_result shoal_alltoall(shoal_comm *c, const void *send, void *recv, size_t count,
                            shoal_dtype dt);
shoal_result shoal_barrier(shoal_comm *c);

/* Shared windows: memory that every rank maps, when all ranks of c run on one host joined
 * by shared memory (otherwise SHOAL_ERR_UNSUPPORTED, and the caller keeps private memory;
 * SHOAL_ERR_NOMEM when the host cannot give the memory, e.g. a small /dev/shm, on every
 * rank alike, so the caller may go on without it too). A window has a common
 * block of common_nbytes, the same memory on every rank, and one block of each_nbytes per
 * rank, which every rank can read; each block starts on a 2 MiB boundary and sits on huge
 * pages where the kernel allows. Zeroed at creation. Collective; windows live until the
 * communicator is destroyed. Buffers inside a window make collectives cheaper: an
 * allreduce reads the peers' blocks in place, and shoal_allreduce_apply_start with params
 * in the common block updates each element once, for every rank, with nothing to copy. */
typedef struct shoal_window shoal_window;
shoal_result shoal_window_create(shoal_comm *c, size_t common_nbytes, size_t each_nbytes,
                                 shoal_window **out);
void *shoal_window_common(const shoal_window *w);        /* NULL when common_nbytes was 0 */
void *shoal_window_block(const shoal_window *w, int rank); /* NULL when each_nbytes was 0 */

/* Tagged point-to-point. A recv matches a send with the same (peer, tag) in order; the
 * counts must agree (SHOAL_ERR_MISMATCH otherwise). tag >= 0. */
shoal_result shoal_send(shoal_comm *c, const void *buf, size_t count, shoal_dtype dt, int peer,
                        int tag);
shoal_result shoal_recv(shoal_comm *c, void *buf, size_t count, shoal_dtype dt, int peer,
                        int tag);

/* Receive the next message with this tag from any rank (parameter servers use it): up to
 * max_count elements into buf; *peer and *count tell who sent how much. A longer message
 * is SHOAL_ERR_MISMATCH (and is consumed). Blocks up to timeout_ms (< 0: SHOAL_TIMEOUT);
 * SHOAL_ERR_TIMEOUT when nothing came, without breaking the communicator. */
shoal_result shoal_recv_any(shoal_comm *c, void *buf, size_t max_count, shoal_dtype dt, int tag,
                            int timeout_ms, int *peer, size_t *count);

/* Whether rank `peer` is still there as far as shoal knows, without blocking: SHOAL_OK, or
 * SHOAL_ERR_PEER naming it once one of its links has ended (its socket closed or reset, or
 * its process on this host gone): it exited, was killed, or destroyed its communicator.
 * Operations on a peer whose link ended fail at once by themselves; this lets a rank that
 * waits on many (shoal_recv_any: a parameter server) learn that one of them is gone
 * instead of waiting out a timeout. A frozen peer (SIGSTOP) looks alive: only the
 * timeout finds it. Thread-safe. */
shoal_result shoal_peer_check(shoal_comm *c, int peer);

/* ---- elastic jobs (src/comm/boot/elastic.c; docs/comm.md "Elastic jobs") ----
 * A communicator created with elastic_min > 0 can be rebuilt among the ranks that remain
 * after one is lost, and grown by ranks started later with the same job. Every rank of
 * such a job runs a small store of its own besides rank 0's, so that the job's address
 * book outlives rank 0. A process started with the job's variables once the job runs (a
 * restarted rank) is not a second claim of its rank: shoal_comm_create waits until the job
 * takes it in at its next regroup and returns its place there (shoal_comm_last_regroup). */
#define SHOAL_REGROUP_LIST_MAX 64 /* job ranks listed per regroup; the counts say how many */
typedef struct {
    int64_t generation;       /* 0: the job as started; one more per regroup */
    int rank, world;          /* this process in the new communicator */
    int nleft, njoined;       /* processes that left (lost) and joined at this regroup */
    int left[SHOAL_REGROUP_LIST_MAX];   /* their job ranks (shoal_comm_job_rank), the first */
    int joined[SHOAL_REGROUP_LIST_MAX]; /* SHOAL_REGROUP_LIST_MAX of them */
    int64_t progress;         /* the largest progress a member brought (a step count) */
    int progress_rank;        /* the lowest rank of the new communicator that brought it */
    int joiner;               /* 1: this process joined at this regroup */
} shoal_regroup;
/* Rebuild an elastic communicator among the ranks that are still there, with any ranks
 * waiting to join (up to elastic_max): each caller passes its communicator (broken by a lost
 * peer, or whole: a planned regroup to take joiners in, shoal_comm_joiners) and its progress
 * (e.g. the last step it completed, -1: none); the old communicator is destroyed and *c is
 * the new one, ranks renumbered 0..world-1 in the order of their job ranks, fresh links.
 * The members agree through the job's store (rank 0's, or when it is unreachable the first
 * member's store that answers): the first to arrive waits until every member came (a member
 * whose process on this host is gone is not waited for), or SHOAL_ELASTIC_SETTLE_MS passed
 * without a new one, then names the members once for all; the new communicator's ready
 * barrier confirms it (a member lost meanwhile: the next generation is tried). Collective
 * over the members; blocks up to about twice SHOAL_TIMEOUT. out may be NULL.
 * Errors (*c is then NULL): SHOAL_ERR_PEER when fewer than elastic_min ranks remain, or
 * when those this rank can reach are not a majority of the last generation (then the
 * others may go on: a rank cut off by the network cannot tell whether it or they are lost),
 * naming who left; SHOAL_ERR_TIMEOUT; SHOAL_ERR_INVALID (not elastic). */
shoal_result shoal_comm_regroup(shoal_comm **c, int64_t progress, shoal_regroup *out);
/* The regroup that made c (generation 0: the job as started, nothing left or joined).
 * SHOAL_ERR_INVALID when c is not elastic. */
shoal_result shoal_comm_last_regroup(const shoal_comm *c, shoal_regroup *out);
/* Processes waiting to join the job (0: none, also when c is not elastic). Asks the
 * store at most every 200 ms (cached between), never blocks for long. */
int shoal_comm_joiners(shoal_comm *c);
/* The job rank of rank `rank` of c: its number as the launcher started it. It differs from
 * rank in a split communicator and after an elastic regroup. -1 for a bad rank. */
int shoal_comm_job_rank(const shoal_comm *c, int rank);

/* Non-blocking variants: start returns at once with *req; the buffers are borrowed until
 * shoal_wait returns. Collectives on one communicator complete in the order started;
 * point-to-point sends are buffered, so a rank may start a send and a receive to the same
 * peer in either order without deadlock. */
shoal_result shoal_allreduce_start(shoal_comm *c, const void *send, void *recv, size_t count,
                                   shoal_dtype dt, shoal_op op, shoal_request **req);
/* Allreduce, then update (data-parallel training's gradient step): grads (float32, count)
 * are reduced with op, and apply(ctx, offset, n, reduced) turns the reduced gradients of
 * [offset, offset + n), reduced[0 .. n), into new values of params there (an optimizer
 * step). reduced may point into grads or into the communicator's own memory.
 * When the request finishes, params hold the updated values on every rank; grads are then
 * unspecified. apply runs on the communicator's thread, for disjoint ranges. On a path that
 * shares the work (one host, shared memory, large messages; or the ring, which large
 * messages take across hosts with one rank per host; or the hierarchical allreduce from
 * 64 KiB with several, where the ranks of each host split the work and each block is
 * updated alike on every host) each rank reduces and updates only its own block and
 * sends the updated params to the others, so each rank's apply sees only its block: an
 * optimizer's state is then current only there (ZeRO stage 1; shoal_wait_trace's
 * apply_lead names one holder of each part's state). With
 * params in a shared window's common block (and grads in the calling rank's block of it),
 * that path is always taken, whatever the size or SHOAL_ALGO: each element is then updated
 * by one rank only, in place, for all. Every rank must call it where the others do (it is
 * a collective of its own kind). */
typedef void (*shoal_apply_fn)(void *ctx, size_t offset, size_t count, const float *reduced);
shoal_result shoal_allreduce_apply_start(shoal_comm *c, float *grads, float *params, size_t count,
                                         shoal_op op, shoal_apply_fn apply, void *ctx,
                                         shoal_request **req);
shoal_result shoal_broadcast_start(shoal_comm *c, const void *send, void *recv, size_t count,
                                   shoal_dtype dt, int root, shoal_request **req);
shoal_result shoal_reduce_start(shoal_comm *c, const void *send, void *recv, size_t count,
                                shoal_dtype dt, shoal_op op, int root, shoal_request **req);
shoal_result shoal_allgather_start(shoal_comm *c, const void *send, void *recv, size_t count,
                                   shoal_dtype dt, shoal_request **req);
shoal_result shoal_reduce_scatter_start(shoal_comm *c, const void *send, void *recv,
                                        size_t recv_count, shoal_dtype dt, shoal_op op,
                                        shoal_request **req);
shoal_result shoal_alltoall_start(shoal_comm *c, const void *send, void *recv, size_t count,
                                  shoal_dtype dt, shoal_request **req);
shoal_result shoal_barrier_start(shoal_comm *c, shoal_request **req);
shoal_result shoal_send_start(shoal_comm *c, const void *buf, size_t count, shoal_dtype dt,
                              int peer, int tag, shoal_request **req);
shoal_result shoal_recv_start(shoal_comm *c, void *buf, size_t count, shoal_dtype dt, int peer,
                              int tag, shoal_request **req);

/* ---- compressed allreduce (src/comm/compress/; docs/comm.md "Compressed allreduce") ----
 * Sends fewer bytes than a float32 allreduce by encoding each rank's contribution:
 *   fp16, bf16   16-bit floats (round to nearest even); reduced in float32
 *   1bit         one bit per entry (CNTK's 1-bit SGD): per group of `cols` consecutive
 *                entries, bit = entry >= 0, decoded as the mean of the group's non-negative
 *                entries or of its negative ones
 *   topk:F       the ceil(F x count) entries of largest magnitude (ties: lower index first),
 *                sent as index and value
 *   lowrank:R    PowerSGD: the (count / cols) x cols matrix M is sent as P = M Q (rows x R),
 *                orthonormalised after the sum, and Q = M^T P (cols x R); Q is warm-started
 *                from the previous call
 * With error feedback (on by default for 1bit, topk and lowrank) each call first adds the
 * previous call's error (what this rank's contribution lost in encoding) to its input, so
 * nothing is lost for good, only late. That error is the compressor's state. */
typedef enum {
    SHOAL_CODEC_NONE = 0, /* plain float32 shoal_allreduce */
    SHOAL_CODEC_FP16,
    SHOAL_CODEC_BF16,
    SHOAL_CODEC_1BIT,
    SHOAL_CODEC_TOPK,
    SHOAL_CODEC_LOWRANK,
    SHOAL_CODEC_COUNT
} shoal_codec;

typedef struct {
    shoal_codec codec;
    double topk_fraction; /* topk: fraction of entries sent, in (0, 1] */
    int rank;             /* lowrank: R >= 1 */
    size_t cols;          /* row length: 1bit's group, lowrank's columns; 0: count (one row).
                             lowrank needs count to be a multiple of it */
    int error_feedback;   /* 1: carry the encoding error to the next call (1bit, topk,
                             lowrank); fp16/bf16 never do */
    uint64_t seed;        /* lowrank: the first Q (the same on every rank) */
} shoal_codec_opts;

/* NONE, error feedback on, cols 0, seed 1. */
void shoal_codec_opts_default(shoal_codec_opts *o);
/* "none", "fp16", "bf16", "1bit", "topk:F" (0 < F <= 1), "lowrank:R" (R >= 1) into o's codec
 * and its parameter (other fields untouched). SHOAL_ERR_INVALID with a message naming the
 * text and what is accepted. */
shoal_result shoal_codec_parse(const char *spec, shoal_codec_opts *o);
/* The spec back ("topk:0.01"), into buf (cap bytes); returns buf. */
const char *shoal_codec_format(const shoal_codec_opts *o, char *buf, size_t cap);

/* One compressor per buffer that is reduced again and again (a layer's gradients): it keeps
 * the error-feedback residual (count floats) and lowrank's Q. Not thread-safe; one call at a
 * time. Errors: SHOAL_ERR_INVALID (bad options or count), SHOAL_ERR_NOMEM. */
typedef struct shoal_compressor shoal_compressor;
shoal_result shoal_compressor_create(const shoal_codec_opts *o, size_t count, shoal_compressor **out);
void shoal_compressor_destroy(shoal_compressor *z); /* NULL is fine */
/* The state a checkpoint keeps, *count floats the caller may read and overwrite between
 * calls: the residual (count floats; zeros without error feedback), then lowrank's Q. */
float *shoal_compressor_state(shoal_compressor *z, size_t *count);
/* Back to the state of a new compressor (zero residual, the first Q). */
void shoal_compressor_reset(shoal_compressor *z);
/* Bytes this rank sends in one call on `world` ranks by the algorithm's own count (the
 * theoretical figure; transports add their framing). */
double shoal_compressor_wire_nbytes(const shoal_compressor *z, int world);
/* Euclidean norm of the residual left by the last call. */
double shoal_compressor_residual_norm(const shoal_compressor *z);

/* Point to point (a parameter-server push): encode send plus the residual into payload
 * (shoal_compressor_payload_nbytes bytes), keeping the new residual; a compressor made
 * with the same options and count decodes it into out (count floats). lowrank sends this
 * rank's own P (orthonormalised) and Q = M^T P, decoded as P Q^T. Errors:
 * SHOAL_ERR_INVALID (not a live compressor, NULL buffers, a payload of another size). */
size_t shoal_compressor_payload_nbytes(const shoal_compressor *z);
shoal_result shoal_compressor_encode(shoal_compressor *z, const float *send, void *payload);
shoal_result shoal_compressor_decode(const shoal_compressor *z, const void *payload, size_t nbytes, float *out);

/* recv = the sum (op SHOAL_SUM) or mean (SHOAL_AVG) over the ranks of send, each rank's
 * contribution encoded by z's codec (plus its residual). float32, count elements, send ==
 * recv allowed. Every rank ends with the same bits: the 1bit, topk and lowrank payloads are
 * gathered and decoded in rank order on every rank; fp16/bf16 blocks are summed in float32
 * by the rank that owns them and spread as 16-bit values. Blocking; a collective: every
 * rank calls with the same codec, parameter, count and cols, or every rank gets
 * SHOAL_ERR_MISMATCH naming the first rank that differs from rank 0 and both codecs (the
 * communicator stays usable: all ranks agree that the call failed). Other errors as
 * shoal_allreduce (SHOAL_ERR_TIMEOUT, SHOAL_ERR_PEER, SHOAL_ERR_BROKEN) and
 * SHOAL_ERR_INVALID (count differs from the compressor's, op not SUM/AVG). */
shoal_result shoal_allreduce_compressed(shoal_comm *c, shoal_compressor *z, const float *send,
                                        float *recv, size_t count, shoal_op op);

/* Block until the operation is done, then free the request; returns its result. */
shoal_result shoal_wait(shoal_request *req);
/* *done = 1 when finished (then shoal_wait returns at once). Never blocks. */
shoal_result shoal_test(shoal_request *req, int *done);

/* When and how a non-blocking collective ran, for timelines. Times are CLOCK_MONOTONIC
 * nanoseconds of this host; the names are static strings. */
typedef struct {
    uint64_t queued_ns;    /* the *_start call */
    uint64_t started_ns;   /* the communicator's thread took it */
    uint64_t finished_ns;  /* it completed */
    const char *algorithm; /* "ring", "rd", "rhd", "tree", "hier", "hier-pipelined" (in
                              pieces, across hosts), "mpi", "slots", "eager", "cma", "local"
                              (one rank), "p2p" */
    const char *transport; /* "shm", "tcp", "shm+tcp", "mpi", "none" */
    int apply_lead;        /* allreduce_apply: where several ranks applied the same ranges
                              (and hold the same optimizer state there), 1 on exactly one of
                              them, the copy a checkpoint keeps, 0 on the others; 1 where a
                              rank's ranges are its own */
} shoal_request_trace;

/* shoal_wait that also fills *trace (which may be NULL). Point-to-point requests report
 * only queued_ns and finished_ns (started_ns = queued_ns). Same blocking and errors as
 * shoal_wait; frees the request. */
shoal_result shoal_wait_trace(shoal_request *req, shoal_request_trace *trace);

#ifdef __cplusplus
}
#endif
#endif
