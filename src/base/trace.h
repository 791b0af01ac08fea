/* trace.h — the timeline's recorder: complete events (start, duration, track, name, a few
 * named arguments) appended to per-thread buffers without locks while recording is on.
 * Not here: aligning clocks across ranks and writing the Chrome trace (src/train/timeline.c);
 * what each part of training records (step.c, net.c, the strategies, the servers).
 * Proved by tests/base/test_trace.c and tests/cli/test_timeline.c. */
#ifndef SH_TRACE_H
#define SH_TRACE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* One track (a row in the trace viewer, its "tid") per activity. Buckets get one each from
 * SH_TRACK_BUCKET0 on, so a bucket's queued and running phases sit on one row. */
typedef enum {
    SH_TRACK_STEP = 1,     /* the whole step: everything below falls inside it */
    SH_TRACK_DATA,         /* the loader */
    SH_TRACK_FORWARD,      /* one event per layer */
    SH_TRACK_BACKWARD,     /* one event per layer */
    SH_TRACK_WAIT,         /* the step waiting for communication after backward */
    SH_TRACK_COMM,         /* every collective as the communicator's thread ran it */
    SH_TRACK_OPTIM,        /* the optimizer (or the update riding on the allreduce) */
    SH_TRACK_CKPT,         /* checkpoint writes */
    SH_TRACK_EVAL,         /* evaluation on the test set */
    SH_TRACK_PULL,         /* parameter-server worker: pulls (with its clock) */
    SH_TRACK_PUSH,         /* parameter-server worker: pushes */
    SH_TRACK_SERVE,        /* parameter server: applying a push */
    SH_TRACK_STALE,        /* parameter server: pulls held by the consistency bound */
    SH_TRACK_PIPE,         /* pipeline stage: each micro-batch's forward and backward, and idle */
    SH_TRACK_BUCKET0 = 100 /* + bucket index: queued, then allreduce */
} sh_trace_track;

#define SH_TRACE_NAME_NBYTES 32
#define SH_TRACE_NARGS 4

/* One complete event ("ph":"X"). Integer arguments whose key is NULL are absent; string
 * arguments point to static strings (algorithm and transport names). */
typedef struct {
    uint64_t start_ns, dur_ns; /* CLOCK_MONOTONIC of this host (sh_now_ns) */
    int64_t step;              /* the training step it belongs to (set by sh_trace_add) */
    int track;
    char name[SH_TRACE_NAME_NBYTES];
    const char *key[SH_TRACE_NARGS];
    int64_t val[SH_TRACE_NARGS];
    const char *skey[2], *sval[2];
} sh_trace_event;

/* 1 while events are recorded: read on every hot path, so a plain relaxed load. */
extern _Atomic int sh_trace_recording;
static inline int sh_trace_on(void)
{
    return atomic_load_explicit(&sh_trace_recording, memory_order_relaxed);
}

/* Arm the recorder for steps [step_lo, step_hi) (step_hi < 0: no end). Events are recorded
 * only while the current step (sh_trace_set_step) is inside the window. */
void sh_trace_arm(int64_t step_lo, int64_t step_hi);
/* The training thread says which step runs now; recording turns on and off with it. */
void sh_trace_set_step(int64_t step);
int64_t sh_trace_step(void);
/* Stop recording (buffers are kept for sh_trace_each). */
void sh_trace_disarm(void);

/* Append a copy of ev (its step set to the current one) to this thread's buffer. The first
 * event of a thread allocates its buffer (one lock then); later ones take no lock and
 * allocate only when a chunk of events is full. Events past the per-thread cap are counted
 * as dropped. */
void sh_trace_add(const sh_trace_event *ev);
/* The usual case: an event with up to two integer arguments (keys NULL: none). */
void sh_trace_span(int track, const char *name, uint64_t start_ns, uint64_t end_ns,
                   const char *k0, int64_t v0, const char *k1, int64_t v1);

/* Every recorded event, thread by thread, in recording order. Call when no thread records
 * (after sh_trace_disarm and the threads' work is done). */
void sh_trace_each(void (*fn)(void *ctx, const sh_trace_event *ev), void *ctx);
size_t sh_trace_count(void);
size_t sh_trace_dropped(void);
/* Free every buffer; the recorder is as at start. */
void sh_trace_reset(void);

#endif
