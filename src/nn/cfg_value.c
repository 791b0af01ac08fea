/* cfg_value.c — a cfg section's typed getters: strict integers, decimals, strings and comma
 * lists, each key asked for remembered (for did-you-mean and the defaults listed at info), the
 * error that names file:line, section and key.
 * Not here: reading the file into sections (cfg.c), unknown and ignored keys (cfg.c).
 * Proved by tests/nn/test_cfg.c. */
#include "nn/cfg_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

/* Remember that the section's parser asked for key; mark the pair used. */
static shoal_result note_key(sh_cfg_section *s, const char *key, cfg_kv **kv_out)
{
    cfg_kv *kv = sh_cfg_find_kv(s, key);
    if (kv) kv->used = 1;
    *kv_out = kv;
    for (int i = 0; i < s->nknown; i++)
        if (strcmp(s->known[i].key, key) == 0) {
            if (kv) s->known[i].defaulted = 0;
            return SHOAL_OK;
        }
    SH_TRY(sh_cfg_grow((void **)&s->known, &s->cap_known, s->nknown + 1, sizeof *s->known,
                "known-key list"));
    cfg_known *k = &s->known[s->nknown];
    k->defaulted = kv == NULL;
    SH_TRY(sh_cfg_dup_str(key, strlen(key), &k->key));
    s->nknown++;
    return SHOAL_OK;
}

static void unmark_defaulted(sh_cfg_section *s, const char *key)
{
    for (int i = 0; i < s->nknown; i++)
        if (strcmp(s->known[i].key, key) == 0) s->known[i].defaulted = 0;
}

shoal_result sh_cfg_fail_at(const sh_cfg_section *s, const char *key, shoal_result rc,
                            const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return SH_FAIL(rc, "%s:%d: [%s] %s", s->cfg->path, sh_cfg_key_line(s, key), s->name, msg);
}

/* Strict decimal integer: optional sign, digits, nothing else. */
static shoal_result parse_int(const sh_cfg_section *s, const char *key, const char *txt,
                              int min, int max, int *out)
{
    const char *p = txt;
    if (*p == '+' || *p == '-') p++;
    if (*p < '0' || *p > '9')
        return sh_cfg_fail_at(s, key, SHOAL_ERR_FORMAT,
                              "%s=%s: not an integer; write a whole number such as %d", key, txt,
                              min > 0 ? min : 0);
    errno = 0;
    char *end = NULL;
    long v = strtol(txt, &end, 10);
    if (*end)
        return sh_cfg_fail_at(s, key, SHOAL_ERR_FORMAT,
                              "%s=%s: junk \"%s\" after the integer; write a whole number only "
                              "(comments go on their own line)",
                              key, txt, end);
    if (errno == ERANGE || v < min || v > max)
        return sh_cfg_fail_at(s, key, SHOAL_ERR_FORMAT,
                              "%s=%s: out of range; it must be between %d and %d", key, txt, min,
                              max);
    *out = (int)v;
    return SHOAL_OK;
}

/* Decimal float: digits, sign, '.', exponent; no hex, inf or nan. */
static shoal_result parse_float(const sh_cfg_section *s, const char *key, const char *txt,
                                float min, float max, float *out)
{
    const char *stop = txt;  /* first character that cannot be part of a decimal */
    int digits = 0;
    for (; *stop && (strchr("+-.eE", *stop) || (*stop >= '0' && *stop <= '9')); stop++)
        if (*stop >= '0' && *stop <= '9') digits = 1;
    errno = 0;
    char *end = NULL;
    float v = digits ? strtof(txt, &end) : 0.0f;
    if (!digits || end == txt)
        return sh_cfg_fail_at(s, key, SHOAL_ERR_FORMAT,
                              "%s=%s: not a number; write a decimal such as 0.001 or 1e-3", key,
                              txt);
    if (end != stop || *stop) {
        const char *junk = end < stop ? end : stop;
        return sh_cfg_fail_at(s, key, SHOAL_ERR_FORMAT,
                              "%s=%s: junk \"%s\" after the number; write the number only "
                              "(comments go on their own line)",
                              key, txt, junk);
    }
    if (!isfinite(v) || v < min || v > max)
        return sh_cfg_fail_at(s, key, SHOAL_ERR_FORMAT,
                              "%s=%s: out of range; it must be between %g and %g", key, txt,
                              (double)min, (double)max);
    *out = v;
    return SHOAL_OK;
}

shoal_result sh_cfg_int(sh_cfg_section *s, const char *key, int def, int min, int max, int *out)
{
    cfg_kv *kv = NULL;
    SH_TRY(note_key(s, key, &kv));
    if (!kv) {
        *out = def;
        return SHOAL_OK;
    }
    SH_TRY(parse_int(s, key, kv->val, min, max, out));
    return SHOAL_OK;
}

shoal_result sh_cfg_float(sh_cfg_section *s, const char *key, float def, float min, float max,
                          float *out)
{
    cfg_kv *kv = NULL;
    SH_TRY(note_key(s, key, &kv));
    if (!kv) {
        *out = def;
        return SHOAL_OK;
    }
    SH_TRY(parse_float(s, key, kv->val, min, max, out));
    return SHOAL_OK;
}

shoal_result sh_cfg_str(sh_cfg_section *s, const char *key, const char *def, const char **out)
{
    cfg_kv *kv = NULL;
    SH_TRY(note_key(s, key, &kv));
    *out = kv ? kv->val : def;
    return SHOAL_OK;
}

/* Split a comma list into items, calling each(item) on a scratch copy. */
typedef shoal_result (*item_fn)(const sh_cfg_section *s, const char *key, const char *item,
                                void *out, int i);

static shoal_result parse_list(sh_cfg_section *s, const char *key, int max, int *n, item_fn fn,
                               void *out)
{
    cfg_kv *kv = NULL;
    *n = 0;
    SH_TRY(note_key(s, key, &kv));
    unmark_defaulted(s, key);  /* a list has no default value to fall back to */
    if (!kv) return SHOAL_OK;
    char item[128];
    const char *p = kv->val;
    int count = 0;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0)
            return sh_cfg_fail_at(s, key, SHOAL_ERR_FORMAT,
                                  "%s=%s: empty item %d in the list; write values separated by "
                                  "single commas",
                                  key, kv->val, count + 1);
        if (count >= max)
            return sh_cfg_fail_at(s, key, SHOAL_ERR_FORMAT,
                                  "%s=%s: more than %d values; shoal takes at most %d here", key,
                                  kv->val, max, max);
        if (len >= sizeof item)
            return sh_cfg_fail_at(s, key, SHOAL_ERR_FORMAT,
                                  "%s: item %d is %zu characters long; that is not a number",
                                  key, count + 1, len);
        memcpy(item, p, len);
        item[len] = 0;
        SH_TRY(fn(s, key, item, out, count));
        count++;
        if (!comma) break;
        p = comma + 1;
    }
    *n = count;
    return SHOAL_OK;
}

static shoal_result int_item(const sh_cfg_section *s, const char *key, const char *item,
                             void *out, int i)
{
    return parse_int(s, key, item, INT_MIN, INT_MAX, (int *)out + i);
}

static shoal_result float_item(const sh_cfg_section *s, const char *key, const char *item,
                               void *out, int i)
{
    return parse_float(s, key, item, -HUGE_VALF, HUGE_VALF, (float *)out + i);
}

shoal_result sh_cfg_int_list(sh_cfg_section *s, const char *key, int *out, int max, int *n)
{
    SH_TRY(parse_list(s, key, max, n, int_item, out));
    return SHOAL_OK;
}

shoal_result sh_cfg_float_list(sh_cfg_section *s, const char *key, float *out, int max, int *n)
{
    SH_TRY(parse_list(s, key, max, n, float_item, out));
    return SHOAL_OK;
}

int sh_cfg_has(sh_cfg_section *s, const char *key)
{
    cfg_kv *kv = NULL;
    /* Out of memory only costs a did-you-mean candidate; the pair is still marked used. */
    if (note_key(s, key, &kv) != SHOAL_OK) {
        sh_err_clear();
        kv = sh_cfg_find_kv(s, key);
        if (kv) kv->used = 1;
    }
    unmark_defaulted(s, key);
    return kv != NULL;
}
