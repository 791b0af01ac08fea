/* cfg.c — Darknet-style .cfg files: lines into sections of key=value, the sections and keys
 * read back, did-you-mean errors for keys no parser asked for, Darknet's ignored keys said once.
 * Not here: the typed getters (cfg_value.c), what any key means ([net]: net_config.c; layers:
 * layer_*.c).
 * Proved by tests/nn/test_cfg.c. */
#include "nn/cfg_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "nn/caffe/caffe.h"

/* Syntax, as Darknet's read_cfg reads it: every whitespace character of a line is removed
 * (so "layers = -1, -4" is "layers=-1,-4"); then a line is blank, a comment ('#' or ';'
 * first), a [section] header or key=value. Darknet has no trailing comments, so "0.1 # x"
 * is the value "0.1#x" and fails as a number. */

/* Darknet's data augmentation in [net] that no reader of the data in use applied (a reader
 * that applies one reads the key, so it never gets here): the images are trained on as they
 * are, which changes what a Darknet user expects of the run, so each is said once per file
 * at the default level (warn). The one list of them: a data reader that learns a key takes
 * it from here. */
static const char *const darknet_augmentation[] = {
    "hue", "saturation", "exposure", "angle", "aspect", "jitter", "max_crop", "min_crop",
    "max_ratio", "min_ratio", "flip", "mosaic", "blur", "gaussian_noise", "mixup", "cutmix",
};

/* Darknet keys that shoal reads nowhere and that do not change the model's shape or
 * arithmetic in a way shoal could honour: input handling, GPU/memory switches, per-layer
 * loading flags, what Darknet's CPU code reads and then leaves alone ([cost] ratio, noobj,
 * thresh; [softmax] spatial; [convolutional] dot), and [net] seen= (writing.cfg's; Darknet
 * itself reads it nowhere). Each is a warning once per file, never silently accepted. */
static const char *const darknet_ignored[] = {
    /* [net] input handling */
    "center", "letter_box", "resize", "random", "track", "augment_speed", "contrastive",
    "unsupervised", "label_smooth_eps", "adversarial_lr", "attention",
    /* [net] run-time switches */
    "notruth", "clip", "sequential_subdivisions", "try_fix_nan",
    "max_chart_loss", "cudnn_half", "loss_scale", "dynamic_minibatch", "optimized_memory",
    "workspace_size_limit_MB", "learning_rate_min", "sgdr_cycle", "sgdr_mult",
    "equidistant_point", "batches_per_cycle", "transpose", "flag_vec", "show_receptive_field",
    "policy_rate",
    /* per-layer weight-file and training flags */
    "truth", "onlyforward", "stopbackward", "dontsave", "dontload", "numload",
    "dontloadscales", "smooth", "flipped", "train_only_bn", "stream", "wait_stream",
    "antialiasing", "learning_rate",
    /* read by Darknet's parser, used only on its GPU or nowhere */
    "seen", "dot", "spatial", "ratio", "noobj", "thresh",
};

/* 2: augmentation (said in one line), 1: another key Darknet has, 0: unknown. */
static int is_darknet_ignored(const char *key)
{
    for (size_t i = 0; i < sizeof darknet_augmentation / sizeof darknet_augmentation[0]; i++)
        if (strcmp(darknet_augmentation[i], key) == 0) return 2;
    for (size_t i = 0; i < sizeof darknet_ignored / sizeof darknet_ignored[0]; i++)
        if (strcmp(darknet_ignored[i], key) == 0) return 1;
    return 0;
}

/* --- growing arrays ---------------------------------------------------------------------- */

shoal_result sh_cfg_grow(void **arr, int *cap, int need, size_t nbytes_each, const char *what)
{
    if (need <= *cap) return SHOAL_OK;
    int ncap = *cap ? *cap * 2 : 8;
    while (ncap < need) ncap *= 2;
    void *p = realloc(*arr, (size_t)ncap * nbytes_each);
    if (!p)
        return SH_FAIL(SHOAL_ERR_NOMEM, "cfg: out of memory growing %s to %d entries", what,
                       ncap);
    *arr = p;
    *cap = ncap;
    return SHOAL_OK;
}

shoal_result sh_cfg_dup_str(const char *s, size_t n, char **out)
{
    char *p = malloc(n + 1);
    if (!p) return SH_FAIL(SHOAL_ERR_NOMEM, "cfg: out of memory copying %zu bytes", n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    *out = p;
    return SHOAL_OK;
}

/* --- parsing ----------------------------------------------------------------------------- */

static void section_destroy(sh_cfg_section *s)
{
    if (!s) return;
    for (int i = 0; i < s->nkv; i++) {
        free(s->kv[i].key);
        free(s->kv[i].val);
    }
    for (int i = 0; i < s->nknown; i++) free(s->known[i].key);
    free(s->kv);
    free(s->known);
    free(s->name);
    free(s);
}

void sh_cfg_destroy(sh_cfg *cfg)
{
    if (!cfg) return;
    for (int i = 0; i < cfg->nsec; i++) section_destroy(cfg->sec[i]);
    for (int i = 0; i < cfg->nignored; i++) free(cfg->ignored_logged[i]);
    free(cfg->ignored_logged);
    free(cfg->sec);
    free(cfg->path);
    free(cfg);
}

/* Keys one section may hold: Darknet's largest sections read a few dozen. */
#define SH_CFG_KEYS_MAX 512

cfg_kv *sh_cfg_find_kv(const sh_cfg_section *s, const char *key)
{
    for (int i = 0; i < s->nkv; i++)
        if (strcmp(s->kv[i].key, key) == 0) return &s->kv[i];
    return NULL;
}

static int valid_section_name(const char *p, size_t n)
{
    if (n == 0) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static shoal_result add_section(sh_cfg *cfg, const char *name, size_t n, int line)
{
    sh_cfg_section *s = calloc(1, sizeof *s);
    if (!s) return SH_FAIL(SHOAL_ERR_NOMEM, "cfg: out of memory for a section");
    s->cfg = cfg;
    s->line = line;
    shoal_result rc = sh_cfg_dup_str(name, n, &s->name);
    if (rc == SHOAL_OK)
        rc = sh_cfg_grow((void **)&cfg->sec, &cfg->cap_sec, cfg->nsec + 1, sizeof *cfg->sec,
                  "section list");
    if (rc != SHOAL_OK) {
        section_destroy(s);
        return rc;
    }
    cfg->sec[cfg->nsec++] = s;
    return SHOAL_OK;
}

static shoal_result add_kv(sh_cfg *cfg, const char *line_text, int line)
{
    const char *eq = strchr(line_text, '=');
    sh_cfg_section *s = cfg->nsec ? cfg->sec[cfg->nsec - 1] : NULL;
    if (!eq)
        return SH_FAIL(SHOAL_ERR_FORMAT,
                       "%s:%d: %s%s%s\"%s\" is not key=value, a [section] header or a comment; "
                       "fix the line or start it with '#'",
                       cfg->path, line, s ? "[" : "", s ? s->name : "", s ? "] " : "",
                       line_text);
    size_t klen = (size_t)(eq - line_text);
    if (klen == 0)
        return SH_FAIL(SHOAL_ERR_FORMAT, "%s:%d: \"%s\" has no key before '='; write key=value",
                       cfg->path, line, line_text);
    if (!s)
        return SH_FAIL(SHOAL_ERR_FORMAT,
                       "%s:%d: key \"%.*s\" comes before any [section]; the file must start "
                       "with [net] (or [network])",
                       cfg->path, line, (int)klen, line_text);
    const char *val = eq + 1;
    if (!*val)
        return SH_FAIL(SHOAL_ERR_FORMAT,
                       "%s:%d: [%s] %.*s has an empty value; give it a value or remove the line",
                       cfg->path, line, s->name, (int)klen, line_text);
    if (s->nkv >= SH_CFG_KEYS_MAX) /* bounds the checks below, which look at every key */
        return SH_FAIL(SHOAL_ERR_FORMAT, "%s:%d: [%s] has more than %d keys; no layer reads that "
                       "many: is this a model file?", cfg->path, line, s->name, SH_CFG_KEYS_MAX);
    for (int i = 0; i < s->nkv; i++)
        if (strlen(s->kv[i].key) == klen && memcmp(s->kv[i].key, line_text, klen) == 0)
            return SH_FAIL(SHOAL_ERR_FORMAT,
                           "%s:%d: [%s] duplicate key \"%s\" (first set on line %d); keep "
                           "one of the two",
                           cfg->path, line, s->name, s->kv[i].key, s->kv[i].line);
    SH_TRY(sh_cfg_grow((void **)&s->kv, &s->cap_kv, s->nkv + 1, sizeof *s->kv, "key list"));
    cfg_kv *kv = &s->kv[s->nkv];
    memset(kv, 0, sizeof *kv);
    kv->line = line;
    SH_TRY(sh_cfg_dup_str(line_text, klen, &kv->key));
    shoal_result rc = sh_cfg_dup_str(val, strlen(val), &kv->val);
    if (rc != SHOAL_OK) {
        free(kv->key);
        return rc;
    }
    s->nkv++;
    return SHOAL_OK;
}

/* One line, whitespace already removed. */
static shoal_result parse_line(sh_cfg *cfg, char *text, int line)
{
    if (text[0] == 0 || text[0] == '#' || text[0] == ';') return SHOAL_OK;
    if (text[0] == '[') {
        size_t n = strlen(text);
        char *close = strchr(text, ']');
        if (!close || (size_t)(close - text) != n - 1 || !valid_section_name(text + 1, n - 2))
            return SH_FAIL(SHOAL_ERR_FORMAT,
                           "%s:%d: bad section header \"%s\"; write [name] with letters, "
                           "digits, '_' or '-' and nothing after ']'",
                           cfg->path, line, text);
        if (cfg->nsec == 0 && strcmp(text, "[net]") != 0 && strcmp(text, "[network]") != 0)
            return SH_FAIL(SHOAL_ERR_FORMAT,
                           "%s:%d: first section is %s; a model file must start with [net] "
                           "(or [network]) giving batch, width, height and channels",
                           cfg->path, line, text);
        return add_section(cfg, text + 1, n - 2, line);
    }
    return add_kv(cfg, text, line);
}

shoal_result sh_cfg_parse(const char *text, const char *name, sh_cfg **out)
{
    shoal_result rc = SHOAL_OK;
    sh_cfg *cfg = NULL;
    char *buf = NULL;
    *out = NULL;
    if (!text || !name) return SH_FAIL(SHOAL_ERR_INVALID, "sh_cfg_parse: text and name are required");
    cfg = calloc(1, sizeof *cfg);
    if (!cfg) return SH_FAIL(SHOAL_ERR_NOMEM, "cfg: out of memory for %s", name);
    SH_TRY_GOTO(sh_cfg_dup_str(name, strlen(name), &cfg->path), rc, done);
    size_t cap = 256;
    buf = malloc(cap);
    if (!buf) {
        rc = SH_FAIL(SHOAL_ERR_NOMEM, "cfg: out of memory reading %s", name);
        goto done;
    }
    int line = 0;
    const char *p = text;
    if (!strncmp(p, "\xEF\xBB\xBF", 3)) p += 3; /* a UTF-8 byte-order mark from some editors */
    while (*p) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        line++;
        if (len + 1 > cap) {
            while (cap < len + 1) cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                rc = SH_FAIL(SHOAL_ERR_NOMEM, "cfg: out of memory for %s:%d (%zu bytes)", name,
                             line, len);
                goto done;
            }
            buf = nb;
        }
        size_t n = 0;
        for (size_t i = 0; i < len; i++) {
            char c = p[i];
            if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') continue;
            if (c == 0) break;
            buf[n++] = c;
        }
        buf[n] = 0;
        SH_TRY_GOTO(parse_line(cfg, buf, line), rc, done);
        p += len;
        if (*p == '\n') p++;
    }
    if (cfg->nsec == 0) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT,
                     "%s: no sections; a model file starts with [net] and lists one section "
                     "per layer",
                     name);
        goto done;
    }
    *out = cfg;
    cfg = NULL;
done:
    free(buf);
    sh_cfg_destroy(cfg);
    return rc;
}

shoal_result sh_cfg_load(const char *path, sh_cfg **out)
{
    shoal_result rc = SHOAL_OK;
    FILE *f = NULL;
    char *text = NULL;
    *out = NULL;
    if (!path) return SH_FAIL(SHOAL_ERR_INVALID, "sh_cfg_load: path is NULL");
    if (sh_caffe_is_prototxt(path)) return sh_caffe_cfg_load(path, out); /* Caffe's model */
    f = fopen(path, "rb");
    if (!f)
        return SH_FAIL(SHOAL_ERR_IO, "cannot open model file %s: %s; check the path", path,
                       strerror(errno));
    size_t cap = 4096, n = 0;
    text = malloc(cap);
    if (!text) {
        rc = SH_FAIL(SHOAL_ERR_NOMEM, "cfg: out of memory reading %s", path);
        goto done;
    }
    for (;;) {
        if (n + 1 >= cap) {
            char *nt = realloc(text, cap * 2);
            if (!nt) {
                rc = SH_FAIL(SHOAL_ERR_NOMEM, "cfg: out of memory reading %s (%zu bytes)", path,
                             cap * 2);
                goto done;
            }
            text = nt;
            cap *= 2;
        }
        size_t got = fread(text + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        rc = SH_FAIL(SHOAL_ERR_IO, "reading model file %s failed: %s", path, strerror(errno));
        goto done;
    }
    text[n] = 0;
    if (memchr(text, 0, n)) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s: contains a NUL byte; a model file is text", path);
        goto done;
    }
    SH_TRY_GOTO(sh_cfg_parse(text, path, out), rc, done);
done:
    free(text);
    if (f) fclose(f);
    return rc;
}

/* --- accessors --------------------------------------------------------------------------- */

const char *sh_cfg_path(const sh_cfg *cfg) { return cfg->path; }
int sh_cfg_nsections(const sh_cfg *cfg) { return cfg->nsec; }

sh_cfg_section *sh_cfg_section_at(sh_cfg *cfg, int i)
{
    if (i < 0 || i >= cfg->nsec) return NULL;
    return cfg->sec[i];
}

const char *sh_cfg_section_name(const sh_cfg_section *s) { return s->name; }
int sh_cfg_section_line(const sh_cfg_section *s) { return s->line; }

int sh_cfg_key_line(const sh_cfg_section *s, const char *key)
{
    const cfg_kv *kv = key ? sh_cfg_find_kv(s, key) : NULL;
    return kv ? kv->line : s->line;
}

/* FNV-1a over a canonical form: section names in order and, inside each, key=value pairs
 * sorted by key (their order in the file does not change the model). */
static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t sh_cfg_hash(const sh_cfg *cfg)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < cfg->nsec; i++) {
        const sh_cfg_section *s = cfg->sec[i];
        h = fnv(h, "[", 1);
        h = fnv(h, s->name, strlen(s->name) + 1);
        /* selection order over the keys: no allocation, n is small */
        const char *prev = NULL;
        for (int done = 0; done < s->nkv; done++) {
            const cfg_kv *best = NULL;
            for (int j = 0; j < s->nkv; j++) {
                const cfg_kv *kv = &s->kv[j];
                if (prev && strcmp(kv->key, prev) <= 0) continue;
                if (!best || strcmp(kv->key, best->key) < 0) best = kv;
            }
            SH_ASSERT(best != NULL);  /* keys are unique, so one is always left */
            h = fnv(h, best->key, strlen(best->key) + 1);
            h = fnv(h, best->val, strlen(best->val) + 1);
            prev = best->key;
        }
    }
    return h;
}

/* --- unknown keys ------------------------------------------------------------------------ */

static char lower(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c; }

/* Optimal-string-alignment distance (Levenshtein plus swaps of neighbours), case-blind:
 * "filter" -> "filters" is 1, "sizee" -> "size" is 1, "stirde" -> "stride" is 1. */
static int edit_distance(const char *a, const char *b)
{
    enum { MAXLEN = 64 };
    size_t na = strlen(a), nb = strlen(b);
    if (na >= MAXLEN || nb >= MAXLEN) return INT_MAX;
    int d[MAXLEN + 1][MAXLEN + 1];
    for (size_t i = 0; i <= na; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= nb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= na; i++)
        for (size_t j = 1; j <= nb; j++) {
            int cost = lower(a[i - 1]) != lower(b[j - 1]);
            int best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best) best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
                lower(a[i - 2]) == lower(b[j - 1]) && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[na][nb];
}

static const char *closest_known(const sh_cfg_section *s, const char *key)
{
    const char *best = NULL;
    int best_d = INT_MAX;
    for (int i = 0; i < s->nknown; i++) {
        int d = edit_distance(key, s->known[i].key);
        if (d < best_d) {
            best_d = d;
            best = s->known[i].key;
        }
    }
    /* close means: at most a third of the key's letters wrong, and at least one allowed */
    int limit = (int)strlen(key) / 3;
    if (limit < 1) limit = 1;
    return best_d <= limit ? best : NULL;
}

/* 1 when this file's line was warned about already in this process (a job reads its cfg more
 * than once: the whole model, then a rank's part): one warning a file. */
static int said_before(const char *path, int line)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static uint64_t said[16];
    static int nsaid;
    uint64_t h = 1469598103934665603ull ^ (uint64_t)line; /* FNV-1a of path and line */
    for (const char *p = path; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    int found = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nsaid && !found; i++) found = said[i] == h;
    if (!found && nsaid < 16) said[nsaid++] = h;
    pthread_mutex_unlock(&mu);
    return found;
}

static void log_ignored(sh_cfg_section *s, const cfg_kv *kv, int augments, char *aug, size_t aug_nbytes)
{
    sh_cfg *cfg = s->cfg;
    for (int i = 0; i < cfg->nignored; i++)
        if (strcmp(cfg->ignored_logged[i], kv->key) == 0) return;
    char *copy = NULL;
    if (sh_cfg_grow((void **)&cfg->ignored_logged, &cfg->cap_ignored, cfg->nignored + 1,
             sizeof *cfg->ignored_logged, "ignored-key list") == SHOAL_OK &&
        sh_cfg_dup_str(kv->key, strlen(kv->key), &copy) == SHOAL_OK)
        cfg->ignored_logged[cfg->nignored++] = copy;
    else
        sh_err_clear();  /* only costs a repeated log line */
    size_t len = strlen(aug);
    if (augments) /* said together, once per section, by sh_cfg_check_unused */
        snprintf(aug + len, aug_nbytes - len, "%s%s=%s", len ? ", " : "", kv->key, kv->val);
    else
        SH_LOG_W("nn", "%s:%d: [%s] ignoring Darknet key \"%s\" (shoal does not use it; said "
                       "once per file)",
                 cfg->path, kv->line, s->name, kv->key);
}

shoal_result sh_cfg_check_unused(sh_cfg_section *s)
{
    char aug[512] = "";
    int aug_line = 0;
    for (int i = 0; i < s->nkv; i++) {
        cfg_kv *kv = &s->kv[i];
        if (kv->used) continue;
        int ignored = is_darknet_ignored(kv->key);
        if (ignored == 2 && !aug_line) aug_line = kv->line;
        if (ignored) {
            log_ignored(s, kv, ignored == 2, aug, sizeof aug);
            continue;
        }
        const char *near = closest_known(s, kv->key);
        if (near)
            return SH_FAIL(SHOAL_ERR_FORMAT, "%s:%d: [%s] unknown key \"%s\"; did you mean \"%s\"?",
                           s->cfg->path, kv->line, s->name, kv->key, near);
        char known[512];
        size_t len = 0;
        known[0] = 0;
        for (int j = 0; j < s->nknown && len + 1 < sizeof known; j++) {
            int w = snprintf(known + len, sizeof known - len, "%s%s", j ? ", " : "",
                             s->known[j].key);
            if (w < 0) break;
            len += (size_t)w;
        }
        if (len >= sizeof known) len = sizeof known - 1;
        if (s->nknown)
            return SH_FAIL(SHOAL_ERR_FORMAT,
                           "%s:%d: [%s] unknown key \"%s\"; remove it (this section takes: %s)",
                           s->cfg->path, kv->line, s->name, kv->key, known);
        return SH_FAIL(SHOAL_ERR_FORMAT,
                       "%s:%d: [%s] unknown key \"%s\"; this section takes no keys, remove it",
                       s->cfg->path, kv->line, s->name, kv->key);
    }
    if (aug[0] && sh_log_rank() <= 0 && !said_before(s->cfg->path, aug_line)) /* rank 0 says it for the job */
        SH_LOG_W("nn", "%s:%d: [%s] %s: Darknet's data augmentation, which shoal does not apply to this data; "
                 "it trains on the images as they are", s->cfg->path, aug_line, s->name, aug);
    return SHOAL_OK;
}

void sh_cfg_each_defaulted(const sh_cfg *cfg, void (*fn)(void *ctx, const char *section,
                                                           int line, const char *key), void *ctx)
{
    for (int i = 0; i < cfg->nsec; i++) {
        const sh_cfg_section *s = cfg->sec[i];
        for (int j = 0; j < s->nknown; j++)
            if (s->known[j].defaulted) fn(ctx, s->name, s->line, s->known[j].key);
    }
}

/* --- building in memory ------------------------------------------------------------------ */

shoal_result sh_cfg_create(const char *path, sh_cfg **out)
{
    *out = NULL;
    sh_cfg *cfg = calloc(1, sizeof *cfg);
    if (!cfg) return SH_FAIL(SHOAL_ERR_NOMEM, "cfg: out of memory for %s", path);
    shoal_result rc = sh_cfg_dup_str(path, strlen(path), &cfg->path);
    if (rc != SHOAL_OK) {
        free(cfg);
        return rc;
    }
    *out = cfg;
    return SHOAL_OK;
}

shoal_result sh_cfg_add_section(sh_cfg *cfg, const char *name, int line, sh_cfg_section **out)
{
    SH_TRY(add_section(cfg, name, strlen(name), line));
    *out = cfg->sec[cfg->nsec - 1];
    return SHOAL_OK;
}

shoal_result sh_cfg_add_key(sh_cfg_section *s, const char *key, const char *value, int line)
{
    if (sh_cfg_find_kv(s, key))
        return SH_FAIL(SHOAL_ERR_INTERNAL, "%s:%d: [%s] key %s set twice while translating the model",
                       s->cfg->path, line, s->name, key);
    SH_TRY(sh_cfg_grow((void **)&s->kv, &s->cap_kv, s->nkv + 1, sizeof *s->kv, "key list"));
    cfg_kv *kv = &s->kv[s->nkv];
    memset(kv, 0, sizeof *kv);
    kv->line = line;
    SH_TRY(sh_cfg_dup_str(key, strlen(key), &kv->key));
    shoal_result rc = sh_cfg_dup_str(value, strlen(value), &kv->val);
    if (rc != SHOAL_OK) {
        free(kv->key);
        return rc;
    }
    s->nkv++;
    return SHOAL_OK;
}
