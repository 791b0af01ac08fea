/* test_json.c — proves src/io/json.c: documents parse into the tree they spell (objects,
 * arrays, strings with escapes, numbers with fractions and exponents, true/false/null);
 * malformed text is refused with the line and column of the fault; nesting past the bound
 * is refused instead of exhausting the stack. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "io/json.h"

static void parses_nested_documents(void)
{
    char err[128] = "";
    sh_json *v = sh_json_parse(" {\"a\": [1, -2.5e2, true, null, \"x\\\"y\\n\\u0041\"],\n \"b\": {\"c\": 0.125}} ", err,
                               sizeof err);
    CHECK(v != NULL, "%s", err);
    if (!v) return;
    const sh_json *a = sh_json_get(v, "a");
    CHECK(a && a->kind == SH_JSON_ARR && a->n == 5, "a");
    if (a && a->n == 5) {
        CHECK(a->items[0].num == 1 && a->items[1].num == -250 && a->items[2].kind == SH_JSON_BOOL &&
              a->items[2].num == 1 && a->items[3].kind == SH_JSON_NULL, "items");
        CHECK(!strcmp(a->items[4].str, "x\"y\nA"), "string \"%s\"", a->items[4].str);
    }
    CHECK(sh_json_num(sh_json_get(v, "b"), "c", -1) == 0.125, "b.c");
    CHECK(sh_json_num(v, "missing", 7) == 7 && !sh_json_str(v, "b"), "defaults");
    sh_json_free(v);
}

static void malformed_text_names_line_and_column(void)
{
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"a\": 1,\n \"b\" 2}", "line 2, column 6"},
        {"[1, 2", "expected ',' or ']'"},
        {"\"open", "unterminated"},
        {"01", "text after"},
        {"{} x", "text after"},
        {"-", "bad number"},
        {"[1.]", "bad fraction"},
        {"\"\\q\"", "bad escape"},
        {"", "bad number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[128] = "";
        sh_json *v = sh_json_parse(bad[i].text, err, sizeof err);
        CHECK(!v && strstr(err, bad[i].want), "\"%s\": %s (want %s)", bad[i].text, err, bad[i].want);
        sh_json_free(v);
    }
}

static void deep_nesting_is_refused(void)
{
    char text[400], err[128] = "";
    memset(text, '[', 300);
    text[300] = 0;
    sh_json *v = sh_json_parse(text, err, sizeof err);
    CHECK(!v && strstr(err, "nested too deep"), "%s", err);
    sh_json_free(v);
}

int main(void)
{
    check_begin("test_json", 10);
    RUN(parses_nested_documents);
    RUN(malformed_text_names_line_and_column);
    RUN(deep_nesting_is_refused);
    return check_end();
}
