/* prototxt.c — protobuf's text format read into a tree of named fields (no schema): scalars
 * keep their token, messages nest ({} or <>), "name: [a, b]" lists become repeated fields,
 * '#' comments, adjacent strings joined, C escapes in strings; typed getters that say
 * path:line and mark what they read.
 * Not here: Caffe's meaning of any field (caffe_net.c, caffe_solver.c).
 * Proved by tests/nn/test_caffe_prototxt.c and tests/fuzz/test_fuzz_prototxt.c. */
#include "nn/caffe/prototxt.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

#define MAX_DEPTH 64                       /* nested messages: deeper is refused, not recursed */
#define MAX_FILE_NBYTES ((size_t)64 << 20)

struct sh_ptx {
    const char *path;  /* the root's copy */
    int line;
    sh_ptx_field *f;
    int n, cap;
    char *own_path;    /* root only */
};

typedef struct {
    const char *s, *path;
    size_t at;
    int line;
} lexer;

static shoal_result fail_at(const char *path, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static shoal_result fail_at(const char *path, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return SH_FAIL(SHOAL_ERR_FORMAT, "%s:%d: %s", path, line, msg);
}

shoal_result sh_ptx_fail(const sh_ptx *m, int line, const char *fmt, ...)
{
    char msg[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return SH_FAIL(SHOAL_ERR_FORMAT, "%s:%d: %s", m->path, line, msg);
}

static void msg_free(sh_ptx *m)
{
    if (!m) return;
    for (int i = 0; i < m->n; i++) {
        free(m->f[i].name);
        free(m->f[i].text);
        msg_free(m->f[i].msg);
    }
    free(m->f);
    free(m->own_path);
    free(m);
}

void sh_ptx_destroy(sh_ptx *m) { msg_free(m); }

static shoal_result new_msg(const char *path, int line, sh_ptx **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return SH_FAIL(SHOAL_ERR_NOMEM, "prototxt: out of memory");
    (*out)->path = path;
    (*out)->line = line;
    return SHOAL_OK;
}

static shoal_result add_field(sh_ptx *m, sh_ptx_field **out)
{
    if (m->n == m->cap) {
        int ncap = m->cap ? 2 * m->cap : 8;
        void *p = realloc(m->f, (size_t)ncap * sizeof *m->f);
        if (!p) return SH_FAIL(SHOAL_ERR_NOMEM, "prototxt: out of memory for %d fields", ncap);
        m->f = p;
        m->cap = ncap;
    }
    *out = &m->f[m->n++];
    memset(*out, 0, sizeof **out);
    return SHOAL_OK;
}

/* --- lexing ------------------------------------------------------------------------------ */

static void skip_space(lexer *lx)
{
    for (;;) {
        char c = lx->s[lx->at];
        if (c == '\n') {
            lx->line++;
            lx->at++;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') {
            lx->at++;
        } else if (c == '#') {
            while (lx->s[lx->at] && lx->s[lx->at] != '\n') lx->at++;
        } else {
            return;
        }
    }
}

static int is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_word(char c)
{
    return is_ident_start(c) || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+';
}

static shoal_result dup_n(const char *s, size_t n, char **out)
{
    *out = malloc(n + 1);
    if (!*out) return SH_FAIL(SHOAL_ERR_NOMEM, "prototxt: out of memory for %zu bytes", n + 1);
    memcpy(*out, s, n);
    (*out)[n] = 0;
    return SHOAL_OK;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One or more adjacent quoted strings, unescaped and joined, into *out. */
static shoal_result read_string(lexer *lx, char **out)
{
    size_t cap = 32, n = 0;
    char *buf = malloc(cap);
    if (!buf) return SH_FAIL(SHOAL_ERR_NOMEM, "prototxt: out of memory");
    shoal_result rc = SHOAL_OK;
    int first_line = lx->line;
    while (lx->s[lx->at] == '"' || lx->s[lx->at] == '\'') {
        char q = lx->s[lx->at++];
        for (;;) {
            char c = lx->s[lx->at];
            if (c == 0 || c == '\n') {
                rc = fail_at(lx->path, first_line, "string not closed before the end of the line; add the "
                             "closing %c", q);
                goto done;
            }
            lx->at++;
            if (c == q) break;
            if (c == '\\') {
                char e = lx->s[lx->at];
                if (e == 0) continue;
                lx->at++;
                switch (e) {
                case 'n': c = '\n'; break;
                case 't': c = '\t'; break;
                case 'r': c = '\r'; break;
                case 'x': {
                    int v = 0, k = 0, h;
                    while (k < 2 && (h = hexval(lx->s[lx->at])) >= 0) { v = 16 * v + h; lx->at++; k++; }
                    c = (char)v;
                    break;
                }
                default:
                    if (e >= '0' && e <= '7') {
                        int v = e - '0', k = 1;
                        while (k < 3 && lx->s[lx->at] >= '0' && lx->s[lx->at] <= '7') v = 8 * v + (lx->s[lx->at++] - '0'), k++;
                        c = (char)v;
                    } else {
                        c = e; /* \" \' \\ and the rest stand for themselves */
                    }
                }
            }
            if (n + 2 > cap) {
                char *nb = realloc(buf, cap *= 2);
                if (!nb) {
                    rc = SH_FAIL(SHOAL_ERR_NOMEM, "prototxt: out of memory");
                    goto done;
                }
                buf = nb;
            }
            buf[n++] = c;
        }
        skip_space(lx);
    }
    buf[n] = 0;
    *out = buf;
    buf = NULL;
done:
    free(buf);
    return rc;
}

/* --- parsing ----------------------------------------------------------------------------- */

static shoal_result parse_body(lexer *lx, sh_ptx *m, char close, int depth);

static shoal_result parse_value(lexer *lx, sh_ptx *m, const char *name, size_t name_len, int line, int depth)
{
    sh_ptx_field *f = NULL;
    char c = lx->s[lx->at];
    if (c == '{' || c == '<') {
        if (depth >= MAX_DEPTH)
            return fail_at(lx->path, lx->line, "messages nested more than %d deep", MAX_DEPTH);
        lx->at++;
        SH_TRY(add_field(m, &f));
        f->line = line;
        SH_TRY(dup_n(name, name_len, &f->name));
        SH_TRY(new_msg(m->path, line, &f->msg));
        return parse_body(lx, f->msg, c == '{' ? '}' : '>', depth + 1);
    }
    if (c == '"' || c == '\'') {
        SH_TRY(add_field(m, &f));
        f->line = line;
        f->is_string = 1;
        SH_TRY(dup_n(name, name_len, &f->name));
        return read_string(lx, &f->text);
    }
    size_t start = lx->at;
    while (is_word(lx->s[lx->at])) lx->at++;
    if (lx->at == start) {
        if (c == 0) return fail_at(lx->path, lx->line, "%.*s has no value before the end of the file", (int)name_len, name);
        return fail_at(lx->path, lx->line, "%.*s: unexpected '%c' where a value should be; write name: value or "
                       "name { ... }", (int)name_len, name, c);
    }
    SH_TRY(add_field(m, &f));
    f->line = line;
    SH_TRY(dup_n(name, name_len, &f->name));
    return dup_n(lx->s + start, lx->at - start, &f->text);
}

static shoal_result parse_field(lexer *lx, sh_ptx *m, int depth)
{
    size_t start = lx->at;
    int line = lx->line;
    if (!is_ident_start(lx->s[lx->at]))
        return fail_at(lx->path, line, "unexpected '%c'; a field starts with its name", lx->s[lx->at]);
    while (is_ident_start(lx->s[lx->at]) || (lx->s[lx->at] >= '0' && lx->s[lx->at] <= '9')) lx->at++;
    const char *name = lx->s + start;
    size_t name_len = lx->at - start;
    skip_space(lx);
    int colon = lx->s[lx->at] == ':';
    if (colon) {
        lx->at++;
        skip_space(lx);
    } else if (lx->s[lx->at] != '{' && lx->s[lx->at] != '<') {
        return fail_at(lx->path, line, "%.*s needs ':' before its value (or '{' for a message)", (int)name_len, name);
    }
    if (colon && lx->s[lx->at] == '[') { /* name: [v1, v2, ...]: the field repeated */
        lx->at++;
        skip_space(lx);
        while (lx->s[lx->at] != ']') {
            SH_TRY(parse_value(lx, m, name, name_len, lx->line, depth));
            skip_space(lx);
            if (lx->s[lx->at] == ',') {
                lx->at++;
                skip_space(lx);
            } else if (lx->s[lx->at] != ']') {
                return fail_at(lx->path, lx->line, "%.*s: list not closed; separate values with ',' and end with "
                               "']'", (int)name_len, name);
            }
        }
        lx->at++;
        return SHOAL_OK;
    }
    return parse_value(lx, m, name, name_len, line, depth);
}

static shoal_result parse_body(lexer *lx, sh_ptx *m, char close, int depth)
{
    int open_line = lx->line;
    for (;;) {
        skip_space(lx);
        char c = lx->s[lx->at];
        if (c == 0) {
            if (!close) return SHOAL_OK;
            return fail_at(lx->path, open_line, "message opened here is not closed with '%c' before the end of the "
                           "file", close);
        }
        if (close && c == close) {
            lx->at++;
            return SHOAL_OK;
        }
        if (c == '}' || c == '>')
            return fail_at(lx->path, lx->line, "'%c' closes no open message; remove it or open one before", c);
        SH_TRY(parse_field(lx, m, depth));
        skip_space(lx);
        if (lx->s[lx->at] == ',' || lx->s[lx->at] == ';') lx->at++;
    }
}

shoal_result sh_ptx_parse(const char *text, const char *name, sh_ptx **out)
{
    *out = NULL;
    sh_ptx *root = NULL;
    shoal_result rc = new_msg(NULL, 1, &root);
    if (rc != SHOAL_OK) return rc;
    if ((rc = dup_n(name, strlen(name), &root->own_path)) != SHOAL_OK) goto fail;
    root->path = root->own_path;
    lexer lx = {text, root->path, 0, 1};
    if (!strncmp(text, "\xEF\xBB\xBF", 3)) lx.at = 3;
    /* nested messages take the root's path through new_msg */
    if ((rc = parse_body(&lx, root, 0, 0)) != SHOAL_OK) goto fail;
    *out = root;
    return SHOAL_OK;
fail:
    msg_free(root);
    return rc;
}

shoal_result sh_ptx_load(const char *path, sh_ptx **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return SH_FAIL(SHOAL_ERR_IO, "cannot open %s: %s; check the path", path, strerror(errno));
    shoal_result rc = SHOAL_OK;
    size_t cap = 1 << 16, n = 0;
    char *text = malloc(cap);
    if (!text) {
        fclose(f);
        return SH_FAIL(SHOAL_ERR_NOMEM, "prototxt: out of memory reading %s", path);
    }
    for (;;) {
        if (n + 1 >= cap) {
            if (cap >= MAX_FILE_NBYTES) {
                rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s: over %zu MiB; a .prototxt is a short text file", path,
                             MAX_FILE_NBYTES >> 20);
                goto done;
            }
            char *nt = realloc(text, cap *= 2);
            if (!nt) {
                rc = SH_FAIL(SHOAL_ERR_NOMEM, "prototxt: out of memory reading %s", path);
                goto done;
            }
            text = nt;
        }
        size_t got = fread(text + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        rc = SH_FAIL(SHOAL_ERR_IO, "reading %s failed: %s", path, strerror(errno));
        goto done;
    }
    text[n] = 0;
    if (memchr(text, 0, n)) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s: contains a NUL byte; a .prototxt is text (a binary .caffemodel goes "
                     "to --weights)", path);
        goto done;
    }
    rc = sh_ptx_parse(text, path, out);
done:
    free(text);
    fclose(f);
    return rc;
}

/* --- access ------------------------------------------------------------------------------ */

const char *sh_ptx_path(const sh_ptx *m) { return m->path; }
int sh_ptx_line(const sh_ptx *m) { return m->line; }
int sh_ptx_nfields(const sh_ptx *m) { return m->n; }
sh_ptx_field *sh_ptx_field_at(sh_ptx *m, int i) { return i >= 0 && i < m->n ? &m->f[i] : NULL; }

int sh_ptx_count(const sh_ptx *m, const char *name)
{
    int k = 0;
    for (int i = 0; i < m->n; i++) k += strcmp(m->f[i].name, name) == 0;
    return k;
}

sh_ptx_field *sh_ptx_nth(sh_ptx *m, const char *name, int nth)
{
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->f[i].name, name) == 0 && nth-- == 0) return &m->f[i];
    return NULL;
}

/* The last occurrence, every occurrence marked read. */
static sh_ptx_field *last(sh_ptx *m, const char *name)
{
    sh_ptx_field *f = NULL;
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->f[i].name, name) == 0) {
            f = &m->f[i];
            f->used = 1;
        }
    return f;
}

static void mark_all(sh_ptx *m)
{
    for (int i = 0; i < m->n; i++) {
        m->f[i].used = 1;
        if (m->f[i].msg) mark_all(m->f[i].msg);
    }
}

void sh_ptx_skip_all(sh_ptx *m) { mark_all(m); }

void sh_ptx_skip(sh_ptx *m, const char *name)
{
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->f[i].name, name) == 0) {
            m->f[i].used = 1;
            if (m->f[i].msg) mark_all(m->f[i].msg);
        }
}

shoal_result sh_ptx_msg(sh_ptx *m, const char *name, sh_ptx **out)
{
    *out = NULL;
    sh_ptx_field *f = sh_ptx_nth(m, name, 0);
    if (!f) return SHOAL_OK;
    f->used = 1;
    if (!f->msg) return sh_ptx_fail(m, f->line, "%s is a message: write %s { ... }", name, name);
    *out = f->msg;
    return SHOAL_OK;
}

static shoal_result scalar(sh_ptx *m, const char *what, sh_ptx_field *f)
{
    if (f->msg) return sh_ptx_fail(m, f->line, "%s: %s takes a value, not a message", what, f->name);
    return SHOAL_OK;
}

static shoal_result parse_ll(sh_ptx *m, const char *what, const sh_ptx_field *f, long long min, long long max,
                             long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = f->is_string ? 0 : strtoll(f->text, &end, 0);
    if (f->is_string || !end || *end || end == f->text || errno == ERANGE)
        return sh_ptx_fail(m, f->line, "%s: %s = %s%s%s is not an integer", what, f->name, f->is_string ? "\"" : "",
                           f->text, f->is_string ? "\"" : "");
    if (v < min || v > max)
        return sh_ptx_fail(m, f->line, "%s: %s = %lld is outside %lld..%lld", what, f->name, v, min, max);
    *out = v;
    return SHOAL_OK;
}

shoal_result sh_ptx_int(sh_ptx *m, const char *what, const char *name, long long def, long long min,
                        long long max, long long *out)
{
    sh_ptx_field *f = last(m, name);
    *out = def;
    if (!f) return SHOAL_OK;
    SH_TRY(scalar(m, what, f));
    return parse_ll(m, what, f, min, max, out);
}

shoal_result sh_ptx_int_at(sh_ptx *m, const char *what, const char *name, int i, long long min, long long max,
                           long long *out)
{
    sh_ptx_field *f = sh_ptx_nth(m, name, i);
    *out = 0;
    if (!f) return sh_ptx_fail(m, m->line, "%s: %s has no value %d", what, name, i + 1);
    f->used = 1;
    SH_TRY(scalar(m, what, f));
    return parse_ll(m, what, f, min, max, out);
}

shoal_result sh_ptx_float(sh_ptx *m, const char *what, const char *name, double def, double *out)
{
    sh_ptx_field *f = last(m, name);
    *out = def;
    if (!f) return SHOAL_OK;
    SH_TRY(scalar(m, what, f));
    const char *t = f->text;
    char *end = NULL;
    double v = 0;
    if (!f->is_string) {
        if (!strcmp(t, "inf") || !strcmp(t, "infinity")) v = INFINITY, end = (char *)t + strlen(t);
        else if (!strcmp(t, "-inf") || !strcmp(t, "-infinity")) v = -INFINITY, end = (char *)t + strlen(t);
        else if (!strcmp(t, "nan")) v = NAN, end = (char *)t + strlen(t);
        else v = strtod(t, &end);
        if (end && end != t && (*end == 'f' || *end == 'F') && end[1] == 0) end++; /* 1.5f */
    }
    if (f->is_string || !end || *end || end == t)
        return sh_ptx_fail(m, f->line, "%s: %s = %s is not a number", what, name, t);
    *out = v;
    return SHOAL_OK;
}

shoal_result sh_ptx_bool(sh_ptx *m, const char *what, const char *name, int def, int *out)
{
    sh_ptx_field *f = last(m, name);
    *out = def;
    if (!f) return SHOAL_OK;
    SH_TRY(scalar(m, what, f));
    const char *t = f->text;
    if (!f->is_string && (!strcmp(t, "true") || !strcmp(t, "True") || !strcmp(t, "t") || !strcmp(t, "1"))) *out = 1;
    else if (!f->is_string && (!strcmp(t, "false") || !strcmp(t, "False") || !strcmp(t, "f") || !strcmp(t, "0")))
        *out = 0;
    else return sh_ptx_fail(m, f->line, "%s: %s = %s is not true or false", what, name, t);
    return SHOAL_OK;
}

shoal_result sh_ptx_str(sh_ptx *m, const char *what, const char *name, const char *def, const char **out)
{
    sh_ptx_field *f = last(m, name);
    *out = def;
    if (!f) return SHOAL_OK;
    SH_TRY(scalar(m, what, f));
    *out = f->text;
    return SHOAL_OK;
}

shoal_result sh_ptx_enum(sh_ptx *m, const char *what, const char *name, const char *const *names, int nnames,
                         int def, int *out)
{
    sh_ptx_field *f = last(m, name);
    *out = def;
    if (!f) return SHOAL_OK;
    SH_TRY(scalar(m, what, f));
    for (int i = 0; i < nnames; i++)
        if (!strcmp(f->text, names[i])) {
            *out = i;
            return SHOAL_OK;
        }
    char *end = NULL;
    long v = strtol(f->text, &end, 10);
    if (!f->is_string && end && !*end && end != f->text && v >= 0 && v < nnames) {
        *out = (int)v;
        return SHOAL_OK;
    }
    char list[256] = "";
    size_t len = 0;
    for (int i = 0; i < nnames && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", names[i]);
    return sh_ptx_fail(m, f->line, "%s: %s = %s is not one of %s", what, name, f->text, list);
}

static int unread(const sh_ptx *m, char *buf, int cap, int len, int *line)
{
    for (int i = 0; i < m->n; i++) {
        const sh_ptx_field *f = &m->f[i];
        int l = len + snprintf(buf + len, (size_t)(cap - len), "%s%s", len ? "." : "", f->name);
        if (l >= cap) l = cap - 1;
        if (!f->used) {
            *line = f->line;
            return 1;
        }
        if (f->msg && unread(f->msg, buf, cap, l, line)) return 1;
        buf[len] = 0;
    }
    return 0;
}

int sh_ptx_first_unread(const sh_ptx *m, char *buf, int buf_nbytes, int *line)
{
    buf[0] = 0;
    return unread(m, buf, buf_nbytes, 0, line);
}
