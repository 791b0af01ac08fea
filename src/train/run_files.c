/* run_files.c — where a run's files go: output paths checked before step 1, a free name for a
 * checkpoint nobody named (CFGNAME.ckpt, else CFGNAME-K.ckpt: an existing file is never
 * replaced unless the user named it), the run's folder under --logdir, and the current
 * directory or /tmp for a final file whose own path fails.
 * Not here: what the files hold (snapshot.c), when they are written (trainer.c).
 * Proved by tests/cli/test_train_files.c and tests/train/test_trainer.c. */
#include "train/run_files.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/err.h"
#include "base/log.h"
#include "train/trainer_internal.h"

/* Numbered names tried before giving up: NAME.ckpt, NAME-1.ckpt, ... */
#define FREE_NAME_TRIES 1000

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

shoal_result sh_run_files_check(sh_trainer *t)
{
    const sh_train_opts *o = &t->opts;
    const sh_strategy *s = t->strategy;
    int writes = sh_strategy_writes(s);
    /* PATH.worker<k> beside the checkpoint: every rank with state of its own writes one */
    if (o->save_path && (writes || sh_strategy_rank_state_count(s)))
        SH_TRY(sh_atomic_check_writable(o->save_path, "--save"));
    if (o->save_darknet_path && writes) SH_TRY(sh_atomic_check_writable(o->save_darknet_path, "--save-darknet"));
    if (o->save_caffe_path && writes) SH_TRY(sh_atomic_check_writable(o->save_caffe_path, "--save-caffe"));
    return SHOAL_OK;
}

/* dir/stem<-k>ext: "lenet.ckpt", "lenet-2.ckpt"; dir "" is none. */
static shoal_result numbered(const char *dir, const char *base, int k, char *out, size_t n)
{
    const char *dot = strrchr(base, '.');
    size_t stem = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    const char *ext = base + stem;
    char num[16] = "";
    if (k) snprintf(num, sizeof num, "-%d", k);
    if (!strcmp(dir, ".")) dir = "";
    int m = snprintf(out, n, "%s%s%.*s%s%s", dir, *dir ? "/" : "", (int)stem, base, num, ext);
    if (m < 0 || (size_t)m >= n) return SH_FAIL(SHOAL_ERR_INVALID, "path %s/%s is too long", dir, base);
    return SHOAL_OK;
}

/* A value the writing rank knows, told to every rank where the strategy agrees (collective). */
static shoal_result from_writer(sh_trainer *t, double *v)
{
    sh_strategy *s = t->strategy;
    if (!sh_strategy_agrees(s)) return SHOAL_OK;
    if (!sh_strategy_writes(s)) *v = 0;
    return s->ops->sum(s, v, 1);
}

/* 1 on every rank when any rank's flag is set (collective where the strategy agrees). */
static shoal_result any_rank(sh_trainer *t, int *flag)
{
    sh_strategy *s = t->strategy;
    if (!sh_strategy_agrees(s)) return SHOAL_OK;
    double v = *flag;
    SH_TRY(s->ops->sum(s, &v, 1));
    *flag = v > 0;
    return SHOAL_OK;
}

/* The first numbered form of dir/base that names no file (and no PATH.worker0 beside it), as
 * the writer sees it, on every rank. */
static shoal_result free_name(sh_trainer *t, const char *dir, const char *base, char *out, size_t n)
{
    double k = 0;
    char worker[1100];
    if (sh_strategy_writes(t->strategy))
        for (; k < FREE_NAME_TRIES; k++) {
            SH_TRY(numbered(dir, base, (int)k, out, n));
            snprintf(worker, sizeof worker, "%s.worker0", out);
            if (!exists(out) && !exists(worker)) break;
        }
    SH_TRY(from_writer(t, &k));
    if (k >= FREE_NAME_TRIES)
        return SH_FAIL(SHOAL_ERR_IO, "%s%s%s and %d numbered names beside it all exist; remove some", dir,
                       *dir ? "/" : "", base, FREE_NAME_TRIES - 1);
    return numbered(dir, base, (int)k, out, n);
}

shoal_result sh_run_files_unnamed(sh_trainer *t, const char **path)
{
    if (!t->unnamed_path[0]) SH_TRY(free_name(t, "", t->default_save_path, t->unnamed_path, sizeof t->unnamed_path));
    *path = t->unnamed_path;
    return SHOAL_OK;
}

static shoal_result write_kind(sh_trainer *t, sh_run_file_kind kind, const char *path)
{
    switch (kind) {
    case SH_RUN_FILE_CKPT: return sh_trainer_save(t, path);
    case SH_RUN_FILE_DARKNET: /* Darknet counts images seen: steps times the global batch */
        return sh_snapshot_save_darknet(t, path, (uint64_t)t->steps_done * (uint64_t)t->global_batch);
    case SH_RUN_FILE_CAFFE: return sh_snapshot_save_caffe(t, path);
    }
    return SH_FAIL(SHOAL_ERR_INTERNAL, "run_files: unknown file kind %d", (int)kind);
}

/* Failures that are about the file, which another place may cure. */
static int file_trouble(shoal_result rc) { return rc == SHOAL_ERR_IO || rc == SHOAL_ERR_INVALID; }

/* One attempt at path, agreed by every rank: *failed on all of them when the writer failed. */
static shoal_result attempt(sh_trainer *t, sh_run_file_kind kind, const char *path, int *failed, char *why,
                            size_t why_nbytes)
{
    shoal_result rc = write_kind(t, kind, path);
    if (rc != SHOAL_OK && !file_trouble(rc)) return rc;
    *failed = rc != SHOAL_OK;
    if (*failed) snprintf(why, why_nbytes, "%s", shoal_last_error_message());
    return any_rank(t, failed);
}

shoal_result sh_run_files_save(sh_trainer *t, sh_run_file_kind kind, const char *path, char *written,
                               size_t written_nbytes, char *fallback, size_t fallback_nbytes)
{
    char why[1024] = "", alt[1100];
    int failed = 0;
    fallback[0] = 0;
    snprintf(written, written_nbytes, "%s", path);
    SH_TRY(attempt(t, kind, path, &failed, why, sizeof why));
    if (!failed) return SHOAL_OK;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    /* the current directory unless path was in it already, then /tmp */
    const char *dirs[2] = {slash ? "." : "/tmp", slash ? "/tmp" : NULL};
    for (int d = 0; d < 2 && dirs[d] && failed; d++) {
        char why2[1024] = "";
        SH_TRY(free_name(t, dirs[d], base, alt, sizeof alt));
        SH_TRY(attempt(t, kind, alt, &failed, why2, sizeof why2));
    }
    if (!sh_strategy_writes(t->strategy)) return SHOAL_OK; /* the writer says it */
    if (failed) {
        snprintf(fallback, fallback_nbytes, "could not write %s (%s), nor a copy in %s%s", path, why,
                 slash ? "the current directory or " : "", "/tmp");
        written[0] = 0;
    } else {
        snprintf(fallback, fallback_nbytes, "could not write %s (%s); wrote %s instead", path, why, alt);
        snprintf(written, written_nbytes, "%s", alt);
    }
    SH_LOG_W("train", "%s", fallback);
    return SHOAL_OK;
}

/* mkdir -p of path's folders and of path itself. */
static shoal_result make_dirs(const char *path)
{
    char p[4096];
    if ((size_t)snprintf(p, sizeof p, "%s", path) >= sizeof p)
        return SH_FAIL(SHOAL_ERR_INVALID, "--logdir %s: path too long", path);
    for (char *c = p + 1;; c++) {
        if (*c != '/' && *c) continue;
        char keep = *c;
        *c = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return SH_FAIL(SHOAL_ERR_IO, "--logdir: cannot create the folder %s: %s", p, strerror(errno));
        *c = keep;
        if (!keep) break;
    }
    return SHOAL_OK;
}

/* 1 when dir holds TensorBoard event files already. */
static int holds_events(const char *dir)
{
    DIR *d = opendir(dir);
    int found = 0;
    for (struct dirent *e; d && !found && (e = readdir(d));) found = !strncmp(e->d_name, "events.out.tfevents.", 20);
    if (d) closedir(d);
    return found;
}

/* CFGNAME: the model file's name without its folder and extension. */
static void cfg_stem(const char *cfg_path, char *out, size_t n)
{
    const char *base = strrchr(cfg_path, '/');
    base = base ? base + 1 : cfg_path;
    const char *dot = strrchr(base, '.');
    size_t len = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    snprintf(out, n, "%.*s", (int)len, base);
}

shoal_result sh_run_files_run_dir(const char *logdir, const char *run_name, const char *cfg_path, int resumed,
                                  char *out, size_t out_nbytes)
{
    SH_TRY(make_dirs(logdir));
    if (run_name && *run_name) {
        if (strchr(run_name, '/') || !strcmp(run_name, "..") || !strcmp(run_name, "."))
            return SH_FAIL(SHOAL_ERR_INVALID, "--run-name \"%s\": a folder name without \"/\"", run_name);
        if ((size_t)snprintf(out, out_nbytes, "%s/%s", logdir, run_name) >= out_nbytes)
            return SH_FAIL(SHOAL_ERR_INVALID, "--logdir %s/%s: path too long", logdir, run_name);
        if (!resumed && holds_events(out))
            SH_LOG_W("train", "--logdir %s: run \"%s\" already has events; this run's are added to them (TensorBoard "
                     "and shoal plot draw them as one run); give another --run-name for a run of its own", logdir,
                     run_name);
        return make_dirs(out);
    }
    char stem[256], stamp[32];
    cfg_stem(cfg_path ? cfg_path : "run", stem, sizeof stem);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    for (int k = 1; k < FREE_NAME_TRIES; k++) {
        char num[16] = "";
        if (k > 1) snprintf(num, sizeof num, "-%d", k);
        if ((size_t)snprintf(out, out_nbytes, "%s/%s-%s%s", logdir, stem, stamp, num) >= out_nbytes)
            return SH_FAIL(SHOAL_ERR_INVALID, "--logdir %s: path too long", logdir);
        if (mkdir(out, 0755) == 0) return SHOAL_OK;
        if (errno != EEXIST)
            return SH_FAIL(SHOAL_ERR_IO, "--logdir: cannot create the run's folder %s: %s", out, strerror(errno));
    }
    return SH_FAIL(SHOAL_ERR_IO, "--logdir %s: %d runs named %s-%s exist; give --run-name", logdir,
                   FREE_NAME_TRIES - 1, stem, stamp);
}
