/* json.c — the tests' JSON reader (json.h): recursive descent over the RFC 8259 grammar.
 * Not here: anything shoal itself uses. */
#include "json.h"

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
    if (!p->failed && p->err) snprintf(p->err, p->err_nbytes, "byte %zu: %s", p->pos, why);
    p->failed = 1;
}

static void skip_ws(parser *p)
{
    while (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' || p->s[p->pos] == '\r') p->pos++;
}

static int value(parser *p, tj *out, int depth);

static char *string(parser *p)
{
    if (p->s[p->pos] != '"') {
        fail(p, "expected a string");
        return NULL;
    }
    p->pos++;
    size_t cap = 16, n = 0;
    char *b = malloc(cap);
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
        if (n + 2 > cap) b = realloc(b, cap *= 2);
        b[n++] = c;
    }
    b[n] = 0;
    return b;
}

static int number(parser *p, tj *out)
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
    out->kind = TJ_NUM;
    out->num = strtod(start, NULL);
    p->pos = i;
    return 1;
}

static int push(tj *v, size_t *cap)
{
    if (v->n == *cap) {
        *cap = *cap ? *cap * 2 : 8;
        v->items = realloc(v->items, *cap * sizeof *v->items);
        if (v->kind == TJ_OBJ) v->keys = realloc(v->keys, *cap * sizeof *v->keys);
    }
    memset(&v->items[v->n], 0, sizeof v->items[0]);
    return 1;
}

static int container(parser *p, tj *out, int depth, char close)
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
        push(out, &cap);
        if (out->kind == TJ_OBJ) {
            char *k = string(p);
            if (!k) return 0;
            out->keys[out->n] = k;
            skip_ws(p);
            if (p->s[p->pos++] != ':') {
                out->n++;
                return fail(p, "expected ':'"), 0;
            }
        }
        int ok = value(p, &out->items[out->n], depth + 1);
        out->n++;
        if (!ok) return 0;
        skip_ws(p);
        char c = p->s[p->pos++];
        if (c == close) return 1;
        if (c != ',') return fail(p, close == ']' ? "expected ',' or ']'" : "expected ',' or '}'"), 0;
    }
}

static int value(parser *p, tj *out, int depth)
{
    if (depth > 64) return fail(p, "nested too deep"), 0;
    skip_ws(p);
    char c = p->s[p->pos];
    if (c == '{') {
        out->kind = TJ_OBJ;
        return container(p, out, depth, '}');
    }
    if (c == '[') {
        out->kind = TJ_ARR;
        return container(p, out, depth, ']');
    }
    if (c == '"') {
        out->kind = TJ_STR;
        out->str = string(p);
        return out->str != NULL;
    }
    if (!strncmp(p->s + p->pos, "true", 4) || !strncmp(p->s + p->pos, "false", 5)) {
        out->kind = TJ_BOOL;
        out->num = c == 't';
        p->pos += c == 't' ? 4 : 5;
        return 1;
    }
    if (!strncmp(p->s + p->pos, "null", 4)) {
        out->kind = TJ_NULL;
        p->pos += 4;
        return 1;
    }
    return number(p, out);
}

static void free_inner(tj *v)
{
    for (size_t i = 0; i < v->n; i++) {
        free_inner(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
}

tj *tj_parse(const char *text, char *err, size_t err_nbytes)
{
    parser p = {text, 0, err, err_nbytes, 0};
    tj *v = calloc(1, sizeof *v);
    int ok = value(&p, v, 0);
    skip_ws(&p);
    if (ok && text[p.pos] != 0) {
        fail(&p, "text after the document");
        ok = 0;
    }
    if (!ok) {
        tj_free(v);
        return NULL;
    }
    return v;
}

tj *tj_parse_file(const char *path, char *err, size_t err_nbytes)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_nbytes, "cannot open %s", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    b[got] = 0;
    tj *v = tj_parse(b, err, err_nbytes);
    free(b);
    return v;
}

void tj_free(tj *v)
{
    if (!v) return;
    free_inner(v);
    free(v);
}

const tj *tj_get(const tj *v, const char *key)
{
    if (!v || v->kind != TJ_OBJ) return NULL;
    for (size_t i = 0; i < v->n; i++)
        if (!strcmp(v->keys[i], key)) return &v->items[i];
    return NULL;
}

double tj_num(const tj *v, const char *key, double dflt)
{
    const tj *m = tj_get(v, key);
    return m && m->kind == TJ_NUM ? m->num : dflt;
}

const char *tj_str(const tj *v, const char *key)
{
    const tj *m = tj_get(v, key);
    return m && m->kind == TJ_STR ? m->str : NULL;
}
