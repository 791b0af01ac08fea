/* json.h — a small JSON reader: parses a whole document (RFC 8259) into a tree, for
 * `shoal plot` (timelines, benchmark rows) and the tests that check what shoal wrote.
 * Not here: writing JSON (each writer prints its own). Proved by tests/io/test_json.c and
 * tests/cli/test_timeline.c. */
#ifndef SH_JSON_H
#define SH_JSON_H

#include <stddef.h>

typedef enum { SH_JSON_NULL, SH_JSON_BOOL, SH_JSON_NUM, SH_JSON_STR, SH_JSON_ARR, SH_JSON_OBJ } sh_json_kind;

typedef struct sh_json {
    sh_json_kind kind;
    double num;          /* SH_JSON_NUM, SH_JSON_BOOL (0 or 1) */
    char *str;           /* SH_JSON_STR: unescaped (\uXXXX below 0x80 only) */
    struct sh_json *items;    /* SH_JSON_ARR, SH_JSON_OBJ: n values */
    char **keys;         /* SH_JSON_OBJ: n keys */
    size_t n;
} sh_json;

/* Parse text; NULL on malformed input (or no memory) with err set to "line L, column C:
 * reason". The caller frees the tree with sh_json_free. */
sh_json *sh_json_parse(const char *text, char *err, size_t err_nbytes);
/* Parse a file's content (NULL when unreadable or malformed; err says which). */
sh_json *sh_json_parse_file(const char *path, char *err, size_t err_nbytes);
void sh_json_free(sh_json *v);
/* Object member by key, NULL when absent or v is not an object. */
const sh_json *sh_json_get(const sh_json *v, const char *key);
/* Number member, or dflt when absent / not a number. */
double sh_json_num(const sh_json *v, const char *key, double dflt);
/* String member, or NULL. */
const char *sh_json_str(const sh_json *v, const char *key);

#endif
