/* test_trace.c — proves src/base/trace.c: nothing is recorded before arming or outside the
 * step window; threads recording at once each keep all their events in order (no lock on
 * the hot path, no event lost or torn); names are cut to fit; reset frees everything and a
 * thread that recorded before records again after it. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/trace.h"
#include "check.h"

#define THREADS 4
#define PER_THREAD 20000 /* several chunks each */

typedef struct {
    long per_track[THREADS];
    long out_of_order;
    long last[THREADS];
    long bad;
} tally;

static void count_event(void *ctx, const sh_trace_event *ev)
{
    tally *t = ctx;
    int k = ev->track - SH_TRACK_BUCKET0;
    if (k < 0 || k >= THREADS || ev->val[0] != (int64_t)ev->start_ns || strcmp(ev->key[0], "i")) {
        t->bad++;
        return;
    }
    t->per_track[k]++;
    if ((long)ev->start_ns <= t->last[k]) t->out_of_order++;
    t->last[k] = (long)ev->start_ns;
}

static void *record(void *arg)
{
    int k = (int)(long)arg;
    for (long i = 1; i <= PER_THREAD; i++)
        sh_trace_span(SH_TRACK_BUCKET0 + k, "x", (uint64_t)i, (uint64_t)i + 1, "i", i, NULL, 0);
    return NULL;
}

static void threads_record_without_losing_events(void)
{
    sh_trace_reset();
    sh_trace_arm(0, -1);
    sh_trace_set_step(0);
    CHECK(sh_trace_on(), "armed at step 0 but not recording");
    pthread_t th[THREADS];
    for (long k = 0; k < THREADS; k++) pthread_create(&th[k], NULL, record, (void *)k);
    for (int k = 0; k < THREADS; k++) pthread_join(th[k], NULL);
    sh_trace_disarm();
    tally t;
    memset(&t, 0, sizeof t);
    sh_trace_each(count_event, &t);
    for (int k = 0; k < THREADS; k++)
        CHECK(t.per_track[k] == PER_THREAD, "thread %d: %ld events of %d", k, t.per_track[k], PER_THREAD);
    CHECK(t.out_of_order == 0 && t.bad == 0, "%ld out of order, %ld torn", t.out_of_order, t.bad);
    CHECK(sh_trace_count() == (size_t)THREADS * PER_THREAD && sh_trace_dropped() == 0, "count %zu dropped %zu",
          sh_trace_count(), sh_trace_dropped());
    sh_trace_reset();
    CHECK(sh_trace_count() == 0, "reset left %zu events", sh_trace_count());
}

static void step_window_gates_recording(void)
{
    sh_trace_reset();
    CHECK(!sh_trace_on(), "recording before arming");
    sh_trace_arm(3, 5);
    int on[8];
    for (int s = 0; s < 8; s++) {
        sh_trace_set_step(s);
        on[s] = sh_trace_on();
        if (on[s]) sh_trace_span(SH_TRACK_STEP, "step", 0, 1, NULL, 0, NULL, 0);
    }
    CHECK(!on[2] && on[3] && on[4] && !on[5], "window 3:5 gives %d%d%d%d at steps 2..5", on[2], on[3], on[4], on[5]);
    CHECK(sh_trace_count() == 2, "%zu events for two steps", sh_trace_count());
    sh_trace_arm(6, -1); /* no end */
    sh_trace_set_step(1000);
    CHECK(sh_trace_on(), "open window closed at step 1000");
    sh_trace_set_step(-1); /* the trainer's evaluation */
    CHECK(!sh_trace_on(), "step -1 recorded");
    sh_trace_reset();
}

typedef struct {
    char name[64];
    int64_t step;
    uint64_t dur_ns;
    int n;
} last_event;

static void keep_last(void *ctx, const sh_trace_event *ev)
{
    last_event *l = ctx;
    snprintf(l->name, sizeof l->name, "%s", ev->name);
    l->step = ev->step;
    l->dur_ns = ev->dur_ns;
    l->n++;
}

/* A name past the room is cut (and terminated), the event carries the current step, and an
 * end before the start (clocks read out of order) gives duration 0, never a huge one. */
static void long_names_are_cut_and_steps_stamped(void)
{
    sh_trace_reset();
    sh_trace_arm(0, -1);
    sh_trace_set_step(7);
    sh_trace_span(SH_TRACK_FORWARD, "a layer name much longer than thirty-two bytes", 5, 3, NULL, 0, NULL, 0);
    sh_trace_disarm();
    last_event l = {"", -1, 99, 0};
    sh_trace_each(keep_last, &l);
    CHECK(l.n == 1 && strlen(l.name) == SH_TRACE_NAME_NBYTES - 1 && !strncmp(l.name, "a layer name", 12),
          "%d events, name \"%s\"", l.n, l.name);
    CHECK(l.step == 7 && l.dur_ns == 0, "step %lld duration %llu", (long long)l.step, (unsigned long long)l.dur_ns);
    sh_trace_reset();
}

int main(void)
{
    check_begin("test_trace", 30);
    RUN(threads_record_without_losing_events);
    RUN(step_window_gates_recording);
    RUN(long_names_are_cut_and_steps_stamped);
    return check_end();
}
