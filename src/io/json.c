/* json.c — the JSON reader (json.h): recursive descent over the RFC 8259 grammar, nesting
 * bounded (64) so hostile input cannot exhaust the stack.
 * Not here: writing JSON. Proved by tests/io/test_json.c. */
#include "io/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t pos;
    char *err;
    size_t err_nbytes;
    int failed;
} parser;

static void fail(parser *p, const char *why)
{
    if (!p->failed && p->err) {
        size_t line = 1, col = 1;
        for (size_t i = 0; i < p->pos && p->s[i]; i++) {
            if (p->s[i] == '\n') line++, col = 1;
            else col++;
        }
        snprintf(p->err, p->err_nbytes, "line %zu, column %zu: %s", line, col, why);
    }
    p->failed = 1;
}

static void skip_ws(parser *p)
{
    while (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' || p->s[p->pos] == '\r') p->pos++;
}

static int value(parser *p, sh_json *out, int depth);

static char *string(parser *p)
{
    if (p->s[p->pos] != '"') {
        fail(p, "expected a string");
        return NULL;
    }
    p->pos++;
    size_t cap = 16, n = 0;
    char *b = malloc(cap);
    if (!b) return fail(p, "out of memory"), NULL;
    for (;;) {
        char c = p->s[p->pos++];
        if (c == 0 || (unsigned char)c < 0x20) {
            fail(p, "unterminated string or control character");
            free(b);
            return NULL;
        }
        if (c == '"') break;
        if (c == '\\') {
            char e = p->s[p->pos++];
            switch (e) {
            case '"': case '\\': case '/': c = e; break;
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': {
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    char h = p->s[p->pos++];
                    v <<= 4;
                    if (h >= '0' && h <= '9') v |= (unsigned)(h - '0');
                    else if (h >= 'a' && h <= 'f') v |= (unsigned)(h - 'a' + 10);
                    else if (h >= 'A' && h <= 'F') v |= (unsigned)(h - 'A' + 10);
                    else {
                        fail(p, "bad \\u escape");
                        free(b);
                        return NULL;
                    }
                }
                c = v < 0x80 ? (char)v : '?';
                break;
            }
            default:
                fail(p, "bad escape");
                free(b);
                return NULL;
            }
        }
        if (n + 2 > cap) {
            char *g = realloc(b, cap *= 2);
            if (!g) {
                free(b);
                return fail(p, "out of memory"), NULL;
            }
            b = g;
        }
        b[n++] = c;
    }
    b[n] = 0;
    return b;
}

static int number(parser *p, sh_json *out)
{
    const char *start = p->s + p->pos;
    size_t i = p->pos;
    if (p->s[i] == '-') i++;
    if (p->s[i] == '0') i++;
    else if (p->s[i] >= '1' && p->s[i] <= '9') while (p->s[i] >= '0' && p->s[i] <= '9') i++;
    else return fail(p, "bad number"), 0;
    if (p->s[i] == '.') {
        i++;
        if (!(p->s[i] >= '0' && p->s[i] <= '9')) return fail(p, "bad fraction"), 0;
        while (p->s[i] >= '0' && p->s[i] <= '9') i++;
    }
    if (p->s[i] == 'e' || p->s[i] == 'E') {
        i++;
        if (p->s[i] == '+' || p->s[i] == '-') i++;
        if (!(p->s[i] >= '0' && p->s[i] <= '9')) return fail(p, "bad exponent"), 0;
        while (p->s[i] >= '0' && p->s[i] <= '9') i++;
    }
    out->kind = SH_JSON_NUM;
    out->num = strtod(start, NULL);
    p->pos = i;
    return 1;
}

static int push(sh_json *v, size_t *cap)
{
    if (v->n == *cap) {
        size_t grown = *cap ? *cap * 2 : 8;
        sh_json *items = realloc(v->items, grown * sizeof *v->items);
        if (!items) return 0;
        v->items = items;
        if (v->kind == SH_JSON_OBJ) {
            char **keys = realloc(v->keys, grown * sizeof *v->keys);
            if (!keys) return 0;
            v->keys = keys;
        }
        *cap = grown;
    }
    memset(&v->items[v->n], 0, sizeof v->items[0]);
    return 1;
}

static int container(parser *p, sh_json *out, int depth, char close)
{
    size_t cap = 0;
    p->pos++;
    skip_ws(p);
    if (p->s[p->pos] == close) {
        p->pos++;
        return 1;
    }
    for (;;) {
        skip_ws(p);
        if (!push(out, &cap)) return fail(p, "out of memory"), 0;
        if (out->kind == SH_JSON_OBJ) {
            char *k = string(p);
            if (!k) return 0;
            out->keys[out->n] = k;
            skip_ws(p);
            if (p->s[p->pos] != ':') {
                out->n++;
                return fail(p, "expected ':'"), 0;
            }
            p->pos++;
        }
        int ok = value(p, &out->items[out->n], depth + 1);
        out->n++;
        if (!ok) return 0;
        skip_ws(p);
        char c = p->s[p->pos];
        if (c != close && c != ',') return fail(p, close == ']' ? "expected ',' or ']'" : "expected ',' or '}'"), 0;
        p->pos++;
        if (c == close) return 1;
    }
}

static int value(parser *p, sh_json *out, int depth)
{
    if (depth > 64) return fail(p, "nested too deep"), 0;
    skip_ws(p);
    char c = p->s[p->pos];
    if (c == '{') {
        out->kind = SH_JSON_OBJ;
        return container(p, out, depth, '}');
    }
    if (c == '[') {
        out->kind = SH_JSON_ARR;
        return container(p, out, depth, ']');
    }
    if (c == '"') {
        out->kind = SH_JSON_STR;
        out->str = string(p);
        return out->str != NULL;
    }
    if (!strncmp(p->s + p->pos, "true", 4) || !strncmp(p->s + p->pos, "false", 5)) {
        out->kind = SH_JSON_BOOL;
        out->num = c == 't';
        p->pos += c == 't' ? 4 : 5;
        return 1;
    }
    if (!strncmp(p->s + p->pos, "null", 4)) {
        out->kind = SH_JSON_NULL;
        p->pos += 4;
        return 1;
    }
    return number(p, out);
}

static void free_inner(sh_json *v)
{
    for (size_t i = 0; i < v->n; i++) {
        free_inner(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
}

sh_json *sh_json_parse(const char *text, char *err, size_t err_nbytes)
{
    parser p = {text, 0, err, err_nbytes, 0};
    sh_json *v = calloc(1, sizeof *v);
    if (!v) {
        snprintf(err, err_nbytes, "out of memory");
        return NULL;
    }
    int ok = value(&p, v, 0);
    if (ok) skip_ws(&p); /* after a failure pos may stand past the terminating NUL */
    if (ok && text[p.pos] != 0) {
        fail(&p, "text after the document");
        ok = 0;
    }
    if (!ok) {
        sh_json_free(v);
        return NULL;
    }
    return v;
}

sh_json *sh_json_parse_file(const char *path, char *err, size_t err_nbytes)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_nbytes, "cannot open %s", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!b) {
        fclose(f);
        snprintf(err, err_nbytes, "cannot read %s", path);
        return NULL;
    }
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    b[got] = 0;
    sh_json *v = sh_json_parse(b, err, err_nbytes);
    free(b);
    return v;
}

void sh_json_free(sh_json *v)
{
    if (!v) return;
    free_inner(v);
    free(v);
}

const sh_json *sh_json_get(const sh_json *v, const char *key)
{
    if (!v || v->kind != SH_JSON_OBJ) return NULL;
    for (size_t i = 0; i < v->n; i++)
        if (!strcmp(v->keys[i], key)) return &v->items[i];
    return NULL;
}

double sh_json_num(const sh_json *v, const char *key, double dflt)
{
    const sh_json *m = sh_json_get(v, key);
    return m && m->kind == SH_JSON_NUM ? m->num : dflt;
}

const char *sh_json_str(const sh_json *v, const char *key)
{
    const sh_json *m = sh_json_get(v, key);
    return m && m->kind == SH_JSON_STR ? m->str : NULL;
}
