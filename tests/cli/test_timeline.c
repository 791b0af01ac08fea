/* test_timeline.c — proves `shoal train --timeline` (src/train/timeline.c, base/trace.c and
 * the recording points): the file is valid JSON in Chrome's trace-event format (read back
 * by src/io/json.c, which shares no code with the writer), every event is complete (ph X with a
 * duration; no B without E), each rank is one pid with named tracks, -n 2 gives two pids,
 * every bucket's allreduce lies inside the step that produced it and names its algorithm
 * and transport, --timeline-steps keeps only its window, the clock offsets are within half
 * the measured round trip, parameter-server pulls and pushes carry clocks, and bad flags or
 * paths are refused with one clear line, and a pipeline's stages show each micro-batch and
 * their idle time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/json.h"
#include "lib/run.h"
#include "train/tiny_data.h"

static char dir[256], out[1 << 16], path[512];

static int run(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s train %s 2>&1", dir, sh_test_shoal_bin(), args);
    return sh_test_run(cmd, out, sizeof out);
}

static sh_json *load(const char *name)
{
    char err[256] = "";
    snprintf(path, sizeof path, "%s/%s", dir, name);
    sh_json *t = sh_json_parse_file(path, err, sizeof err);
    CHECK(t != NULL, "%s is not valid JSON: %s", path, err);
    return t;
}

static const sh_json *events(const sh_json *doc)
{
    const sh_json *ev = sh_json_get(doc, "traceEvents");
    CHECK(ev && ev->kind == SH_JSON_ARR && ev->n > 0, "no traceEvents array");
    return ev && ev->kind == SH_JSON_ARR ? ev : NULL;
}

static long step_of(const sh_json *e)
{
    return (long)sh_json_num(sh_json_get(e, "args"), "step", -1);
}

/* Every event is complete or metadata, has a pid and tid, X events a duration >= 0 and a
 * time >= 0; B and E (if any writer ever emits them) pair up per track. Returns the number
 * of X events; pids seen go into pid_seen[]. */
static size_t check_structure(const sh_json *ev, int *pid_seen, int npids)
{
    size_t nx = 0;
    long open_b[64] = {0};
    for (size_t i = 0; i < ev->n; i++) {
        const sh_json *e = &ev->items[i];
        const char *ph = sh_json_str(e, "ph");
        double pid = sh_json_num(e, "pid", -1), tid = sh_json_num(e, "tid", -1);
        CHECK(ph && sh_json_str(e, "name"), "event %zu without ph or name", i);
        CHECK(pid >= 0 && pid < npids && tid >= 0, "event %zu: pid %g tid %g", i, pid, tid);
        if (!ph || pid < 0 || pid >= npids) continue;
        pid_seen[(int)pid] = 1;
        if (!strcmp(ph, "X")) {
            nx++;
            CHECK(sh_json_num(e, "dur", -1) >= 0 && sh_json_num(e, "ts", -1) >= 0, "event %zu: ts %g dur %g", i,
                  sh_json_num(e, "ts", -1), sh_json_num(e, "dur", -1));
            CHECK(step_of(e) >= 0, "event %zu has no step", i);
        } else if (!strcmp(ph, "B") || !strcmp(ph, "E")) {
            open_b[((int)pid * 7 + (int)tid) % 64] += !strcmp(ph, "B") ? 1 : -1;
        } else {
            CHECK(!strcmp(ph, "M"), "event %zu: phase %s", i, ph);
        }
    }
    for (int k = 0; k < 64; k++) CHECK(open_b[k] == 0, "unmatched B/E on track slot %d", k);
    return nx;
}

/* Tracks that carry events have a thread_name; each pid a process_name. */
static void check_track_names(const sh_json *ev, int npids)
{
    for (size_t i = 0; i < ev->n; i++) {
        const sh_json *e = &ev->items[i];
        const char *ph = sh_json_str(e, "ph");
        if (!ph || strcmp(ph, "X")) continue;
        double pid = sh_json_num(e, "pid", -1), tid = sh_json_num(e, "tid", -1);
        int named = 0;
        for (size_t j = 0; j < ev->n && !named; j++) {
            const sh_json *m = &ev->items[j];
            const char *mph = sh_json_str(m, "ph"), *mname = sh_json_str(m, "name");
            named = mph && !strcmp(mph, "M") && mname && !strcmp(mname, "thread_name") &&
                    sh_json_num(m, "pid", -1) == pid && sh_json_num(m, "tid", -1) == tid &&
                    sh_json_str(sh_json_get(m, "args"), "name");
        }
        CHECK(named, "track pid %g tid %g has no thread_name", pid, tid);
        if (!named) return;
    }
    for (int p = 0; p < npids; p++) {
        int named = 0;
        for (size_t j = 0; j < ev->n; j++) {
            const sh_json *m = &ev->items[j];
            const char *mname = sh_json_str(m, "name");
            named |= mname && !strcmp(mname, "process_name") && sh_json_num(m, "pid", -1) == p;
        }
        CHECK(named, "pid %d has no process_name", p);
    }
}

static int count_cat(const sh_json *ev, int pid, const char *cat, const char *name)
{
    int n = 0;
    for (size_t i = 0; i < ev->n; i++) {
        const sh_json *e = &ev->items[i];
        const char *c = sh_json_str(e, "cat"), *nm = sh_json_str(e, "name");
        n += sh_json_num(e, "pid", -1) == pid && c && !strcmp(c, cat) && (!name || (nm && !strcmp(nm, name)));
    }
    return n;
}

static void one_rank_records_every_stage(void)
{
    int rc = run("mlp.cfg --data . --max-steps 5 --threads 1 --quiet --timeline one.json");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    sh_json *doc = load("one.json");
    const sh_json *ev = doc ? events(doc) : NULL;
    if (!ev) goto done;
    int seen[1] = {0};
    CHECK(check_structure(ev, seen, 1) > 0, "no complete events");
    check_track_names(ev, 1);
    CHECK(count_cat(ev, 0, "step", "step") == 5, "%d step events, want 5", count_cat(ev, 0, "step", "step"));
    CHECK(count_cat(ev, 0, "data", NULL) == 5, "data events %d", count_cat(ev, 0, "data", NULL));
    CHECK(count_cat(ev, 0, "optimizer", NULL) == 5, "optimizer events %d", count_cat(ev, 0, "optimizer", NULL));
    /* per layer: mlp.cfg has 5 layers, forward and backward each, plus the stage itself */
    CHECK(count_cat(ev, 0, "forward", "connected 0") == 5, "forward of layer 0: %d",
          count_cat(ev, 0, "forward", "connected 0"));
    CHECK(count_cat(ev, 0, "backward", "connected 2") == 5, "backward of layer 2: %d",
          count_cat(ev, 0, "backward", "connected 2"));
    CHECK(count_cat(ev, 0, "eval", NULL) == 1, "evaluation events %d", count_cat(ev, 0, "eval", NULL));
done:
    sh_json_free(doc);
}

typedef struct {
    double ts, end;
} span;

/* -n 2 with one bucket per layer: two pids; each bucket's queued and allreduce events fall
 * inside the step event of the same rank and step, and say how they travelled. */
/* enough steps that each rank's part of the file runs to a few hundred kilobytes */
#define TWO_STEPS 40

static void two_ranks_two_pids_buckets_inside_steps(void)
{
    char cmdargs[256];
    snprintf(cmdargs, sizeof cmdargs, "mlp.cfg --data . -n 2 --max-steps %d --threads 1 --quiet --bucket-mb 0.0001 --timeline two.json", TWO_STEPS);
    int rc = run(cmdargs);
    CHECK(rc == 0, "exit %d: %s", rc, out);
    sh_json *doc = load("two.json");
    const sh_json *ev = doc ? events(doc) : NULL;
    if (!ev) goto done;
    int seen[3] = {0};
    check_structure(ev, seen, 3);
    CHECK(seen[0] && seen[1] && !seen[2], "pids seen: %d %d %d", seen[0], seen[1], seen[2]);
    check_track_names(ev, 2);
    span steps[2][TWO_STEPS];
    memset(steps, 0, sizeof steps);
    for (size_t i = 0; i < ev->n; i++) {
        const sh_json *e = &ev->items[i];
        const char *c = sh_json_str(e, "cat");
        long s = step_of(e);
        int p = (int)sh_json_num(e, "pid", -1);
        if (!c || strcmp(c, "step") || s < 0 || s >= TWO_STEPS || p < 0 || p > 1) continue;
        steps[p][s].ts = sh_json_num(e, "ts", 0);
        steps[p][s].end = steps[p][s].ts + sh_json_num(e, "dur", 0);
    }
    int nbucket[2] = {0, 0}, buckets_seen[2][4] = {{0}};
    for (size_t i = 0; i < ev->n; i++) {
        const sh_json *e = &ev->items[i];
        const char *c = sh_json_str(e, "cat"), *nm = sh_json_str(e, "name");
        double tid = sh_json_num(e, "tid", -1);
        if (!c || strcmp(c, "comm") || tid < 100) continue;
        int p = (int)sh_json_num(e, "pid", -1);
        long s = step_of(e);
        const sh_json *args = sh_json_get(e, "args");
        CHECK(s >= 0 && s < TWO_STEPS, "bucket event of step %ld", s);
        if (s < 0 || s >= TWO_STEPS || p < 0 || p > 1) continue;
        nbucket[p]++;
        int b = (int)sh_json_num(args, "bucket", -1);
        if (b >= 0 && b < 4) buckets_seen[p][b] = 1;
        CHECK(sh_json_str(args, "algorithm") && sh_json_str(args, "transport") && sh_json_num(args, "bytes", 0) > 0,
              "bucket event without algorithm, transport or bytes");
        double ts = sh_json_num(e, "ts", 0), end = ts + sh_json_num(e, "dur", 0);
        /* the JSON keeps 3 decimals of µs: allow that rounding */
        CHECK(ts >= steps[p][s].ts - 0.002 && end <= steps[p][s].end + 0.002,
              "rank %d step %ld: bucket %d %s [%.3f, %.3f] outside the step [%.3f, %.3f]", p, s, b,
              nm ? nm : "?", ts, end, steps[p][s].ts, steps[p][s].end);
    }
    for (int p = 0; p < 2; p++) {
        /* mlp.cfg: two connected layers with weights -> two buckets, queued + allreduce each,
         * every step */
        CHECK(nbucket[p] == TWO_STEPS * 2 * 2, "rank %d: %d bucket events, want %d", p, nbucket[p], TWO_STEPS * 4);
        CHECK(buckets_seen[p][0] && buckets_seen[p][1], "rank %d: buckets 0 and 1 not both seen", p);
        CHECK(count_cat(ev, p, "step", "step") == TWO_STEPS, "rank %d: %d steps", p, count_cat(ev, p, "step", "step"));
    }
    /* one host, one clock: the measured offset is within the error bound of the exchange */
    const sh_json *other = sh_json_get(doc, "otherData");
    const sh_json *off = sh_json_get(other, "offset_ns"), *rtt = sh_json_get(other, "rtt_ns");
    CHECK(off && rtt && off->n == 2 && rtt->n == 2, "otherData lacks offset_ns / rtt_ns");
    if (off && rtt && off->n == 2 && rtt->n == 2) {
        double o = off->items[1].num, r = rtt->items[1].num;
        CHECK(r > 0 && fabs(o) <= r / 2 + 1000, "rank 1 offset %g ns with round trip %g ns", o, r);
    }
done:
    sh_json_free(doc);
}

/* A 2-stage pipeline: each rank's pipeline track holds every micro-batch's forward and
 * backward (stage and micro-batch in the args) inside its step, and the second stage's
 * first forward waits for the first stage: idle time shows. */
#define PIPE_STEPS 3
#define PIPE_MB 4
static void pipeline_stages_show_micro_batches_and_idle(void)
{
    char cmdargs[256];
    snprintf(cmdargs, sizeof cmdargs,
             "mlp.cfg --data . -n 2 --pipeline 2 --micro-batches %d --max-steps %d --threads 1 --quiet "
             "--timeline pipe.json", PIPE_MB, PIPE_STEPS);
    int rc = run(cmdargs);
    CHECK(rc == 0, "exit %d: %s", rc, out);
    sh_json *doc = load("pipe.json");
    const sh_json *ev = doc ? events(doc) : NULL;
    if (!ev) goto done;
    int seen[3] = {0};
    check_structure(ev, seen, 3);
    check_track_names(ev, 2);
    span steps[2][PIPE_STEPS];
    memset(steps, 0, sizeof steps);
    for (size_t i = 0; i < ev->n; i++) {
        const sh_json *e = &ev->items[i];
        const char *c = sh_json_str(e, "cat");
        long s = step_of(e);
        int p = (int)sh_json_num(e, "pid", -1);
        if (!c || strcmp(c, "step") || s < 0 || s >= PIPE_STEPS || p < 0 || p > 1) continue;
        steps[p][s].ts = sh_json_num(e, "ts", 0);
        steps[p][s].end = steps[p][s].ts + sh_json_num(e, "dur", 0);
    }
    int mb_seen[2][2][PIPE_MB] = {{{0}}}, inside = 1, stage_ok = 1;
    for (size_t i = 0; i < ev->n; i++) {
        const sh_json *e = &ev->items[i];
        const char *c = sh_json_str(e, "cat"), *nm = sh_json_str(e, "name");
        if (!c || strcmp(c, "pipeline") || !nm) continue;
        int p = (int)sh_json_num(e, "pid", -1);
        long s = step_of(e);
        if (p < 0 || p > 1 || s < 0 || s >= PIPE_STEPS) continue;
        double ts = sh_json_num(e, "ts", 0), end = ts + sh_json_num(e, "dur", 0);
        inside &= ts >= steps[p][s].ts - 0.002 && end <= steps[p][s].end + 0.002;
        const sh_json *args = sh_json_get(e, "args");
        int fwd = !strcmp(nm, "forward"), bwd = !strcmp(nm, "backward");
        if (!fwd && !bwd) continue;
        stage_ok &= sh_json_num(args, "stage", -1) == p;
        int m = (int)sh_json_num(args, "micro_batch", -1);
        if (m >= 0 && m < PIPE_MB) mb_seen[p][bwd][m]++;
    }
    CHECK(inside, "a pipeline event outside its step");
    CHECK(stage_ok, "a micro-batch event names another stage than its rank's");
    for (int p = 0; p < 2; p++) {
        for (int m = 0; m < PIPE_MB; m++)
            CHECK(mb_seen[p][0][m] == PIPE_STEPS && mb_seen[p][1][m] == PIPE_STEPS,
                  "rank %d micro-batch %d: %d forwards, %d backwards, want %d each", p, m, mb_seen[p][0][m],
                  mb_seen[p][1][m], PIPE_STEPS);
        CHECK(count_cat(ev, p, "pipeline", "pipeline pass") == PIPE_STEPS, "rank %d: %d passes", p,
              count_cat(ev, p, "pipeline", "pipeline pass"));
    }
    CHECK(count_cat(ev, 1, "pipeline", "idle") >= PIPE_STEPS, "stage 1 idle events: %d",
          count_cat(ev, 1, "pipeline", "idle"));
done:
    sh_json_free(doc);
}

static void steps_window_keeps_only_its_steps(void)
{
    int rc = run("other.cfg --data . --max-steps 6 --threads 1 --quiet --timeline win.json --timeline-steps 2:4");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    sh_json *doc = load("win.json");
    const sh_json *ev = doc ? events(doc) : NULL;
    if (!ev) goto done;
    int got[8] = {0};
    for (size_t i = 0; i < ev->n; i++) {
        const char *ph = sh_json_str(&ev->items[i], "ph");
        if (!ph || strcmp(ph, "X")) continue;
        long s = step_of(&ev->items[i]);
        CHECK(s == 2 || s == 3, "event of step %ld outside 2:4", s);
        if (s >= 0 && s < 8) got[s]++;
    }
    CHECK(got[2] > 0 && got[3] > 0, "steps 2 and 3 missing: %d %d", got[2], got[3]);
done:
    sh_json_free(doc);
}

static void parameter_server_pulls_and_pushes_carry_clocks(void)
{
    int rc = run("other.cfg --data . --ps -n 2 --max-steps 4 --threads 1 --quiet --consistency ssp --staleness 1 "
                 "--timeline ps.json");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    sh_json *doc = load("ps.json");
    const sh_json *ev = doc ? events(doc) : NULL;
    if (!ev) goto done;
    int seen[4] = {0};
    check_structure(ev, seen, 4);
    CHECK(seen[0] && seen[1] && seen[2], "server and two workers: %d %d %d", seen[0], seen[1], seen[2]);
    for (int w = 1; w <= 2; w++) {
        CHECK(count_cat(ev, w, "ps", "push") == 4, "worker rank %d: %d pushes", w, count_cat(ev, w, "ps", "push"));
        CHECK(count_cat(ev, w, "ps", "pull") >= 3, "worker rank %d: %d pulls", w, count_cat(ev, w, "ps", "pull"));
    }
    CHECK(count_cat(ev, 0, "ps", "push") >= 6, "server applied %d pushes", count_cat(ev, 0, "ps", "push"));
    int clocks_ok = 1;
    for (size_t i = 0; i < ev->n; i++) {
        const sh_json *e = &ev->items[i];
        const char *c = sh_json_str(e, "cat");
        if (c && !strcmp(c, "ps")) clocks_ok &= sh_json_num(sh_json_get(e, "args"), "clock", -1) >= 0;
    }
    CHECK(clocks_ok, "a parameter-server event without its clock");
done:
    sh_json_free(doc);
}

static void bad_flags_are_refused_in_one_line(void)
{
    int rc = run("other.cfg --data . --timeline x.json --timeline-steps 5:3");
    CHECK(rc == 2 && strstr(out, "--timeline-steps 5:3") && strchr(out, '\n') == strrchr(out, '\n'),
          "exit %d: %s", rc, out);
    rc = run("other.cfg --data . --timeline-steps 1:3");
    CHECK(rc == 2 && strstr(out, "needs --timeline"), "exit %d: %s", rc, out);
    rc = run("other.cfg --data . --max-steps 2 --timeline /nonexistent-dir/t.json");
    CHECK(rc == 1 && strstr(out, "/nonexistent-dir/t.json") && strstr(out, "cannot create"), "exit %d: %s", rc, out);
}

int main(void)
{
    check_begin("test_timeline", 120);
    if (tiny_make_dir(dir, sizeof dir) != 0) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(one_rank_records_every_stage);
    RUN(two_ranks_two_pids_buckets_inside_steps);
    RUN(pipeline_stages_show_micro_batches_and_idle);
    RUN(steps_window_keeps_only_its_steps);
    RUN(parameter_server_pulls_and_pushes_carry_clocks);
    RUN(bad_flags_are_refused_in_one_line);
    tiny_remove_dir(dir);
    return check_end();
}
