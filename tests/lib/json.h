/* json.h — a small JSON reader for tests: parses a whole document (RFC 8259) into a tree, so
 * tests can check what shoal wrote (timelines, --json lines) without trusting shoal's writer.
 * Not here: writing JSON. Used by tests/cli/test_timeline.c and tests/cli/test_plot.c. */
#ifndef SH_TEST_JSON_H
#define SH_TEST_JSON_H

#include <stddef.h>

typedef enum { TJ_NULL, TJ_BOOL, TJ_NUM, TJ_STR, TJ_ARR, TJ_OBJ } tj_kind;

typedef struct tj {
    tj_kind kind;
    double num;          /* TJ_NUM, TJ_BOOL (0 or 1) */
    char *str;           /* TJ_STR: unescaped (\uXXXX below 0x80 only) */
    struct tj *items;    /* TJ_ARR, TJ_OBJ: n values */
    char **keys;         /* TJ_OBJ: n keys */
    size_t n;
} tj;

/* Parse text; NULL on malformed input with *err set to the byte offset and a reason. */
tj *tj_parse(const char *text, char *err, size_t err_nbytes);
/* Parse a file's content (NULL when unreadable or malformed; err says which). */
tj *tj_parse_file(const char *path, char *err, size_t err_nbytes);
void tj_free(tj *v);
/* Object member by key, NULL when absent or v is not an object. */
const tj *tj_get(const tj *v, const char *key);
/* Number member, or dflt when absent / not a number. */
double tj_num(const tj *v, const char *key, double dflt);
/* String member, or NULL. */
const char *tj_str(const tj *v, const char *key);

#endif
