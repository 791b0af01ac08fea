/* test_caffe_prototxt.c — proves src/nn/caffe/prototxt.c: nested messages ({} and <>),
 * lists, comments, joined and escaped strings, numbers, enums and bools through the typed
 * getters; the first unread field's dotted path; and syntax errors naming file:line. */
#include "check.h"
#include "nn/caffe/prototxt.h"

static void reads_fields_of_every_kind(void)
{
    const char *text =
        "# a comment\n"
        "name: \"a\" 'b'  # joined\n"
        "layer {\n"
        "  type: \"Convolution\"\n"
        "  convolution_param < num_output: 0x10 kernel_size: 3 kernel_size: 3 >\n"
        "  bias: -2.5e-1 on: true mode: ACROSS; esc: \"q\\\"\\n\\101\"\n"
        "}\n"
        "dim: [1, 2, 3]\n"
        "layer { }\n";
    sh_ptx *root = NULL;
    CHECK_OK(sh_ptx_parse(text, "t.prototxt", &root));
    if (!root) return;
    const char *s = NULL;
    CHECK_OK(sh_ptx_str(root, "t", "name", "", &s));
    CHECK(!strcmp(s, "ab"), "joined strings: %s", s);
    CHECK(sh_ptx_count(root, "layer") == 2 && sh_ptx_count(root, "dim") == 3, "counts");
    long long v = 0;
    CHECK_OK(sh_ptx_int_at(root, "t", "dim", 2, 0, 10, &v));
    CHECK(v == 3, "list value %lld", v);
    sh_ptx *layer = sh_ptx_nth(root, "layer", 0)->msg, *cp = NULL;
    CHECK_OK(sh_ptx_msg(layer, "convolution_param", &cp));
    CHECK(cp && sh_ptx_line(cp) == 5, "message line");
    CHECK_OK(sh_ptx_int(cp, "t", "num_output", 0, 0, 100, &v));
    CHECK(v == 16, "hex integer %lld", v);
    double d = 0;
    int b = 0, e = -1;
    CHECK_OK(sh_ptx_float(layer, "t", "bias", 0, &d));
    CHECK(d == -0.25, "float %g", d);
    CHECK_OK(sh_ptx_bool(layer, "t", "on", 0, &b));
    const char *const modes[] = {"ACROSS", "WITHIN"};
    CHECK_OK(sh_ptx_enum(layer, "t", "mode", modes, 2, 1, &e));
    CHECK(b == 1 && e == 0, "bool %d enum %d", b, e);
    CHECK_OK(sh_ptx_str(layer, "t", "esc", "", &s));
    CHECK(!strcmp(s, "q\"\nA"), "escapes: %s", s);
    char path[128];
    int line = 0;
    CHECK(sh_ptx_first_unread(root, path, sizeof path, &line) && !strcmp(path, "layer") && line == 3,
          "the layer itself is unread first: %s at %d", path, line);
    sh_ptx_nth(root, "layer", 0)->used = sh_ptx_nth(root, "layer", 1)->used = 1;
    CHECK(sh_ptx_first_unread(root, path, sizeof path, &line), "something unread");
    CHECK(!strcmp(path, "layer.type") && line == 4, "first unread %s at %d", path, line);
    CHECK_RC(sh_ptx_int(layer, "t", "bias", 0, 0, 9, &v), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error_message(), "t.prototxt:6:") && strstr(shoal_last_error_message(), "not an integer"),
          "%s", shoal_last_error_message());
    CHECK_RC(sh_ptx_enum(layer, "t", "on", modes, 2, 0, &e), SHOAL_ERR_FORMAT);
    sh_ptx_destroy(root);
}

static void syntax_errors_name_the_line(void)
{
    const char *bad[][2] = {
        {"a: 1\nb {\n c: 2\n", "x.prototxt:2: message opened here is not closed"},
        {"a: 1\n}\n", "x.prototxt:2: '}' closes no open message"},
        {"a: \"open\n", "x.prototxt:1: string not closed"},
        {"a 1\n", "x.prototxt:1: a needs ':'"},
        {"a: [1, 2\nb: 3\n", "x.prototxt:2: a: list not closed"},
        {"\n\n3: 4\n", "x.prototxt:3: unexpected '3'"},
        {"a:\n", "x.prototxt:2: a has no value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sh_ptx *root = NULL;
        CHECK_RC(sh_ptx_parse(bad[i][0], "x.prototxt", &root), SHOAL_ERR_FORMAT);
        CHECK(root == NULL && strstr(shoal_last_error_message(), bad[i][1]), "want \"%s\": %s", bad[i][1],
              shoal_last_error_message());
    }
    /* nesting deeper than the limit is refused, not recursed into */
    char deep[1024] = "";
    for (int i = 0; i < 100; i++) strcat(deep, "a{");
    sh_ptx *root = NULL;
    CHECK_RC(sh_ptx_parse(deep, "d.prototxt", &root), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error_message(), "nested more than"), "%s", shoal_last_error_message());
}

int main(void)
{
    check_begin("test_caffe_prototxt", 30);
    RUN(reads_fields_of_every_kind);
    RUN(syntax_errors_name_the_line);
    return check_end();
}
