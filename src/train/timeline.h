/* timeline.h — `shoal train --timeline FILE.json`: every rank records what it does, clocks
 * are aligned to rank 0's, and rank 0 writes one Chrome trace (chrome://tracing, Perfetto).
 * Not here: the recording points (step.c, net.c, dp/allreduce.c, ps/, trainer.c); the
 * recorder itself (base/trace.c).
 * Proved by tests/cli/test_timeline.c. */
#ifndef SH_TIMELINE_H
#define SH_TIMELINE_H

#include <stdint.h>

#include "shoal/comm.h"

typedef struct sh_timeline sh_timeline;

/* One timeline per process (the recorder is process-wide): ranks run as threads of one
 * process cannot each have their own.
 * Start recording steps [step_lo, step_hi) (step_hi < 0: to the end). With a communicator
 * (NULL alone) this is collective: every rank measures its clock's offset to rank 0's by a
 * ping exchange (the round trip with the smallest time wins; the offset assumes the reply
 * took half of it). role names the process in the trace ("data-parallel rank"). */
shoal_result sh_timeline_start(shoal_comm *c, const char *path, int64_t step_lo, int64_t step_hi,
                               const char *role, sh_timeline **out);
/* Stop recording; collective: every rank sends its events (in rank 0's clock) to rank 0,
 * which writes the file. Frees tl (also on error). */
shoal_result sh_timeline_finish(sh_timeline *tl);
/* Stop and free without writing (a run that failed); NULL is fine. */
void sh_timeline_abandon(sh_timeline *tl);

/* "A:B" -> [A, B); "A:" -> [A, end); "A" -> [A, A + 1). Errors name the flag. */
shoal_result sh_timeline_parse_steps(const char *text, int64_t *lo, int64_t *hi);

#endif
