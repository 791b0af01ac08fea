/* test_cfg.c — proves src/nn/cfg.c: Darknet .cfg syntax, typed getters, errors with
 * path:line, did-you-mean, ignored Darknet keys, defaulted keys, the content hash, and that
 * every examples/ model file and Darknet's own model files parse. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "check.h"
#include "nn/cfg.h"

static sh_cfg *parse_ok(const char *text)
{
    sh_cfg *c = NULL;
    CHECK_OK(sh_cfg_parse(text, "t.cfg", &c));
    return c;
}

/* the error text of parsing text, which must fail with SHOAL_ERR_FORMAT */
static const char *parse_err(const char *text)
{
    sh_cfg *c = NULL;
    shoal_result rc = sh_cfg_parse(text, "t.cfg", &c);
    CHECK(rc == SHOAL_ERR_FORMAT, "want FORMAT for <<%s>>, got %s", text, shoal_result_name(rc));
    CHECK(c == NULL, "no cfg on error");
    sh_cfg_destroy(c);
    return shoal_last_error_message();
}

#define CHECK_HAS(hay, needle) \
    CHECK(strstr((hay), (needle)) != NULL, "\"%s\" not in: %s", (needle), (hay))

static void reads_sections_keys_comments_and_darknet_whitespace(void)
{
    sh_cfg *c = parse_ok("# a comment\n"
                         "[net]\r\n"
                         "batch = 64\n"
                         "  learning_rate=0.01  \n"
                         "\n"
                         "; another comment\n"
                         "[convolutional]\n"
                         "filters\t=\t20\n"
                         "activation=linear\n"
                         "[route]\n"
                         "layers = -1, -4\n"
                         "[maxpool]"); /* no final newline */
    if (!c) return;
    CHECK(sh_cfg_nsections(c) == 4, "sections %d", sh_cfg_nsections(c));
    CHECK(strcmp(sh_cfg_path(c), "t.cfg") == 0, "path %s", sh_cfg_path(c));
    sh_cfg_section *net = sh_cfg_section_at(c, 0), *conv = sh_cfg_section_at(c, 1);
    sh_cfg_section *route = sh_cfg_section_at(c, 2), *mp = sh_cfg_section_at(c, 3);
    CHECK(sh_cfg_section_at(c, 4) == NULL && sh_cfg_section_at(c, -1) == NULL, "bounds");
    CHECK(strcmp(sh_cfg_section_name(net), "net") == 0, "%s", sh_cfg_section_name(net));
    CHECK(strcmp(sh_cfg_section_name(mp), "maxpool") == 0, "%s", sh_cfg_section_name(mp));
    CHECK(sh_cfg_section_line(net) == 2 && sh_cfg_section_line(conv) == 7 &&
              sh_cfg_section_line(mp) == 12,
          "lines %d %d %d", sh_cfg_section_line(net), sh_cfg_section_line(conv),
          sh_cfg_section_line(mp));
    int batch = 0, filters = 0;
    float lr = 0;
    const char *act = NULL;
    CHECK_OK(sh_cfg_int(net, "batch", 1, 1, 1 << 20, &batch));
    CHECK_OK(sh_cfg_float(net, "learning_rate", 0.001f, 0, 10, &lr));
    CHECK_OK(sh_cfg_int(conv, "filters", 1, 1, 100000, &filters));
    CHECK_OK(sh_cfg_str(conv, "activation", "logistic", &act));
    CHECK(batch == 64 && filters == 20, "batch %d filters %d", batch, filters);
    CHECK_NEAR(lr, 0.01f, 0);
    CHECK(act && strcmp(act, "linear") == 0, "activation %s", act ? act : "(null)");
    CHECK(sh_cfg_key_line(net, "learning_rate") == 4, "line %d",
          sh_cfg_key_line(net, "learning_rate"));
    CHECK(sh_cfg_key_line(net, "absent") == 2, "absent key gives section line");
    int layers[4] = {0}, n = 0;
    CHECK_OK(sh_cfg_int_list(route, "layers", layers, 4, &n));
    CHECK(n == 2 && layers[0] == -1 && layers[1] == -4, "n %d: %d %d", n, layers[0], layers[1]);
    sh_cfg_destroy(c);
}

/* appends "section@line:key " to a 512-byte buffer */
static void collect(void *p, const char *sec, int line, const char *key)
{
    char *buf = p;
    size_t len = strlen(buf);
    snprintf(buf + len, 512 - len, "%s@%d:%s ", sec, line, key);
}

static void missing_keys_take_defaults_and_are_listed(void)
{
    sh_cfg *c = parse_ok("[net]\nbatch=2\n[connected]\noutput=10\n");
    if (!c) return;
    sh_cfg_section *net = sh_cfg_section_at(c, 0), *fc = sh_cfg_section_at(c, 1);
    int batch = 0, subdiv = 0, out = 0;
    float mom = 0;
    const char *act = NULL;
    CHECK_OK(sh_cfg_int(net, "batch", 1, 1, 1000, &batch));
    CHECK_OK(sh_cfg_int(net, "subdivisions", 1, 1, 1000, &subdiv));
    CHECK_OK(sh_cfg_float(net, "momentum", 0.9f, 0, 1, &mom));
    CHECK_OK(sh_cfg_int(fc, "output", 1, 1, 1000, &out));
    CHECK_OK(sh_cfg_str(fc, "activation", "logistic", &act));
    CHECK(sh_cfg_has(fc, "batch_normalize") == 0, "absent");
    CHECK(sh_cfg_has(fc, "output") == 1, "present");
    int list[2], n = 5;
    CHECK_OK(sh_cfg_int_list(fc, "layers", list, 2, &n));
    CHECK(n == 0, "missing list gives 0 values, got %d", n);
    CHECK(subdiv == 1 && batch == 2 && out == 10, "values");
    CHECK_NEAR(mom, 0.9f, 0);
    CHECK(act && strcmp(act, "logistic") == 0, "string default");
    char seen[512] = "";
    sh_cfg_each_defaulted(c, collect, seen);
    /* has() and lists are not defaults: only subdivisions, momentum, activation */
    CHECK(strcmp(seen, "net@1:subdivisions net@1:momentum connected@3:activation ") == 0,
          "defaulted: %s", seen);
    CHECK_OK(sh_cfg_check_unused(net));
    CHECK_OK(sh_cfg_check_unused(fc));
    sh_cfg_destroy(c);
}

static void syntax_errors_name_path_line_and_fix(void)
{
    const char *m;
    m = parse_err("[net]\nbatch=1\nthis line is junk\n");
    CHECK_HAS(m, "t.cfg:3:");
    CHECK_HAS(m, "not key=value");
    m = parse_err("batch=1\n[net]\n");
    CHECK_HAS(m, "t.cfg:1:");
    CHECK_HAS(m, "before any [section]");
    m = parse_err("[net]\nbatch=1\nwidth=28\nbatch=2\n");
    CHECK_HAS(m, "t.cfg:4: [net] duplicate key \"batch\" (first set on line 2)");
    m = parse_err("[net]\nbatch=\n");
    CHECK_HAS(m, "t.cfg:2: [net] batch has an empty value");
    m = parse_err("[net]\n=3\n");
    CHECK_HAS(m, "t.cfg:2:");
    m = parse_err("[net]\n[conv\n");
    CHECK_HAS(m, "t.cfg:2: bad section header");
    m = parse_err("[net]\n[conv]x\n");
    CHECK_HAS(m, "bad section header");
    m = parse_err("[net]\n[]\n");
    CHECK_HAS(m, "bad section header");
    m = parse_err("[convolutional]\nfilters=3\n");
    CHECK_HAS(m, "t.cfg:1: first section is [convolutional]");
    m = parse_err("# only a comment\n\n");
    CHECK_HAS(m, "no sections");
    /* a UTF-8 byte-order mark is skipped */
    sh_cfg *bom = parse_ok("\xEF\xBB\xBF[net]\nbatch=1\n");
    CHECK(bom && sh_cfg_nsections(bom) == 1, "BOM skipped");
    sh_cfg_destroy(bom);
    /* a crafted section of 200k keys is refused at the cap, not checked in quadratic time */
    size_t cap = 200000 * 16 + 32, len = 0;
    char *many = malloc(cap);
    if (many) {
        len += (size_t)snprintf(many, cap, "[net]\n");
        for (int i = 0; i < 200000; i++) len += (size_t)snprintf(many + len, cap - len, "k%d=1\n", i);
        m = parse_err(many);
        CHECK_HAS(m, "t.cfg:514: [net] has more than 512 keys");
        free(many);
    }
    /* the same key in two sections is fine */
    sh_cfg *c = parse_ok("[network]\nbatch=1\n[maxpool]\nsize=2\n[maxpool]\nsize=2\n");
    CHECK(c && sh_cfg_nsections(c) == 3, "three sections");
    sh_cfg_destroy(c);
}

static void bad_values_fail_with_key_value_and_range(void)
{
    sh_cfg *c = parse_ok("[net]\n"
                         "a=abc\n"     /* 2 */
                         "b=12x\n"     /* 3 */
                         "c=0\n"       /* 4 */
                         "d=1.5\n"     /* 5 */
                         "e=.001#lr\n" /* 6 */
                         "f=nan\n"     /* 7 */
                         "g=2.5\n"     /* 8 */
                         "h=99999999999\n" /* 9 */
                         "i=1,,2\n"    /* 10 */
                         "j=1,2,3\n"   /* 11 */
                         "k=1e-3\n"    /* 12 */
                         "l=-7\n"      /* 13 */
                         "m=0x10\n");  /* 14 */
    if (!c) return;
    sh_cfg_section *s = sh_cfg_section_at(c, 0);
    int iv = 0;
    float fv = 0;
    int list[4], n = 0;
    CHECK_RC(sh_cfg_int(s, "a", 1, 0, 10, &iv), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "t.cfg:2: [net] a=abc: not an integer");
    CHECK_RC(sh_cfg_int(s, "b", 1, 0, 100, &iv), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "t.cfg:3: [net] b=12x: junk \"x\"");
    CHECK_RC(sh_cfg_int(s, "c", 1, 1, 8, &iv), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "t.cfg:4: [net] c=0: out of range; it must be between 1 and 8");
    CHECK_RC(sh_cfg_int(s, "d", 1, 0, 8, &iv), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "t.cfg:5:");
    CHECK_RC(sh_cfg_float(s, "e", 1, 0, 8, &fv), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "t.cfg:6: [net] e=.001#lr: junk \"#lr\"");
    CHECK_RC(sh_cfg_float(s, "f", 1, 0, 8, &fv), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "not a number");
    CHECK_RC(sh_cfg_float(s, "g", 1, 0, 1, &fv), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "t.cfg:8: [net] g=2.5: out of range");
    CHECK_RC(sh_cfg_int(s, "h", 1, 0, 2147483647, &iv), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "out of range");
    CHECK_RC(sh_cfg_int_list(s, "i", list, 4, &n), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "t.cfg:10: [net] i=1,,2: empty item 2");
    CHECK_RC(sh_cfg_int_list(s, "j", list, 2, &n), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "more than 2 values");
    CHECK_OK(sh_cfg_float(s, "k", 1, 0, 1, &fv));
    CHECK_NEAR(fv, 1e-3f, 0);
    CHECK_OK(sh_cfg_int(s, "l", 1, -10, 10, &iv));
    CHECK(iv == -7, "negative int %d", iv);
    CHECK_RC(sh_cfg_float(s, "m", 1, 0, 100, &fv), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "m=0x10: junk \"x10\"");
    float fl[3];
    CHECK_OK(sh_cfg_float_list(s, "j", fl, 3, &n));
    CHECK(n == 3 && fl[2] == 3.0f, "float list n %d", n);
    sh_cfg_destroy(c);
}

static void unknown_key_suggests_closest_known_key(void)
{
    sh_cfg *c = parse_ok("[net]\nbatch=1\n[convolutional]\nfilter=20\nsize=3\n"
                         "[maxpool]\nstirde=2\n[connected]\nweird_thing=1\n[softmax]\nx=1\n");
    if (!c) return;
    sh_cfg_section *conv = sh_cfg_section_at(c, 1), *mp = sh_cfg_section_at(c, 2);
    sh_cfg_section *fc = sh_cfg_section_at(c, 3), *sm = sh_cfg_section_at(c, 4);
    int v;
    CHECK_OK(sh_cfg_int(conv, "filters", 1, 1, 100, &v));
    CHECK_OK(sh_cfg_int(conv, "size", 1, 1, 100, &v));
    CHECK_OK(sh_cfg_int(conv, "stride", 1, 1, 100, &v));
    CHECK_RC(sh_cfg_check_unused(conv), SHOAL_ERR_FORMAT);
    CHECK(strcmp(shoal_last_error_message(),
                 "t.cfg:4: [convolutional] unknown key \"filter\"; did you mean \"filters\"?") == 0,
          "message: %s", shoal_last_error_message());
    CHECK_OK(sh_cfg_int(mp, "size", 1, 1, 100, &v));
    CHECK_OK(sh_cfg_int(mp, "stride", 1, 1, 100, &v));
    CHECK_RC(sh_cfg_check_unused(mp), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "t.cfg:7: [maxpool] unknown key \"stirde\"; did you mean \"stride\"?");
    CHECK_OK(sh_cfg_int(fc, "output", 1, 1, 100, &v));
    CHECK_RC(sh_cfg_check_unused(fc), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "unknown key \"weird_thing\"; remove it (this section takes: output)");
    CHECK(strstr(shoal_last_error_message(), "did you mean") == NULL, "no far suggestion");
    CHECK_RC(sh_cfg_check_unused(sm), SHOAL_ERR_FORMAT);
    CHECK_HAS(shoal_last_error_message(), "t.cfg:11: [softmax] unknown key \"x\"; this section takes no keys");
    sh_cfg_destroy(c);
}

static void darknet_augmentation_keys_are_ignored_not_errors(void)
{
    sh_cfg *c = parse_ok("[net]\nbatch=1\nhue=.1\nsaturation=1.5\nexposure=1.5\nangle=7\n"
                         "jitter=.2\nflip=0\n[convolutional]\nfilters=2\nhue=3\n");
    if (!c) return;
    int v;
    CHECK_OK(sh_cfg_int(sh_cfg_section_at(c, 0), "batch", 1, 1, 10, &v));
    CHECK_OK(sh_cfg_check_unused(sh_cfg_section_at(c, 0)));
    CHECK_OK(sh_cfg_int(sh_cfg_section_at(c, 1), "filters", 1, 1, 10, &v));
    CHECK_OK(sh_cfg_check_unused(sh_cfg_section_at(c, 1)));
    /* a getter that does use an otherwise-ignored key makes it ordinary */
    float h = 0;
    CHECK_OK(sh_cfg_float(sh_cfg_section_at(c, 0), "hue", 0, -1, 1, &h));
    CHECK_NEAR(h, 0.1f, 0);
    sh_cfg_destroy(c);
}

/* Run check_unused on every section of text with stderr captured; returns what was logged. */
static void capture_ignored_log(const char *text, char *log, size_t cap)
{
    sh_cfg *c = parse_ok(text);
    log[0] = 0;
    if (!c) return;
    char path[] = "/tmp/shoal_test_cfg_log_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) {
        sh_cfg_destroy(c);
        return;
    }
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    for (int i = 0; i < sh_cfg_nsections(c); i++) CHECK_OK(sh_cfg_check_unused(sh_cfg_section_at(c, i)));
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, log, cap - 1);
    log[n > 0 ? n : 0] = 0;
    close(fd);
    unlink(path);
    sh_cfg_destroy(c);
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void ignored_keys_are_warned_once_per_file(void)
{
    static char log[8192];
    const char *text = "[net]\nhue=.1\njitter=.2\n[maxpool]\nhue=.3\n[maxpool]\njitter=.1\n";
    capture_ignored_log(text, log, sizeof log);
    CHECK(count_of(log, "ignoring Darknet key \"hue\"") == 1, "hue once: %s", log);
    CHECK(count_of(log, "ignoring Darknet key \"jitter\"") == 1, "jitter once: %s", log);
    CHECK_HAS(log, "t.cfg:2: [net] ignoring Darknet key \"hue\"");
    CHECK_HAS(log, "warn");
    /* a second file lists them again */
    capture_ignored_log(text, log, sizeof log);
    CHECK(count_of(log, "ignoring Darknet key \"hue\"") == 1, "new file, listed again: %s", log);
}

static void hash_ignores_comments_whitespace_and_key_order(void)
{
    sh_cfg *a = parse_ok("[net]\nbatch=64\nwidth=28\n[connected]\noutput=10\n");
    sh_cfg *b = parse_ok("# same model\n[net]\n width = 28\n\nbatch = 64\n;x\n[connected]\r\n"
                         "output=10");
    sh_cfg *d = parse_ok("[net]\nbatch=64\nwidth=28\n[connected]\noutput=11\n");
    sh_cfg *e = parse_ok("[net]\nbatch=64\nwidth=28\n[dropout]\noutput=10\n");
    sh_cfg *f = parse_ok("[net]\nbatch=64\nwidth=28\n[connected]\noutput=10\n[softmax]\n");
    if (a && b && d && e && f) {
        CHECK(sh_cfg_hash(a) == sh_cfg_hash(b), "same content, same hash");
        CHECK(sh_cfg_hash(a) != sh_cfg_hash(d), "value changes hash");
        CHECK(sh_cfg_hash(a) != sh_cfg_hash(e), "section name changes hash");
        CHECK(sh_cfg_hash(a) != sh_cfg_hash(f), "extra section changes hash");
    }
    sh_cfg_destroy(a);
    sh_cfg_destroy(b);
    sh_cfg_destroy(d);
    sh_cfg_destroy(e);
    sh_cfg_destroy(f);
}

static void load_reads_a_file_and_reports_missing_ones(void)
{
    char path[] = "/tmp/shoal_test_cfg_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    const char *text = "[net]\nbatch=3\n\n[dropout]\nprobability=.5\n";
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write");
    close(fd);
    sh_cfg *c = NULL;
    CHECK_OK(sh_cfg_load(path, &c));
    if (c) {
        CHECK(sh_cfg_nsections(c) == 2, "two sections");
        CHECK(strcmp(sh_cfg_path(c), path) == 0, "path kept");
        CHECK(sh_cfg_section_line(sh_cfg_section_at(c, 1)) == 4, "line");
    }
    sh_cfg_destroy(c);
    /* an error names the real path */
    FILE *f = fopen(path, "w");
    fputs("[net]\nbatch=3\nnope\n", f);
    fclose(f);
    c = NULL;
    CHECK_RC(sh_cfg_load(path, &c), SHOAL_ERR_FORMAT);
    char want[64];
    snprintf(want, sizeof want, "%s:3:", path);
    CHECK_HAS(shoal_last_error_message(), want);
    unlink(path);
    CHECK_RC(sh_cfg_load(path, &c), SHOAL_ERR_IO);
    CHECK_HAS(shoal_last_error_message(), path);
    CHECK(c == NULL, "no cfg");
}

/* Load every *.cfg of a directory; returns how many loaded, counts failures as CHECKs.
 * With allow_dup, a file may be refused only for a duplicate key: some of Darknet's files set
 * batch twice (Darknet silently keeps the first), which shoal refuses by design. */
static int load_dir(const char *dir, int must_exist, int allow_dup)
{
    DIR *d = opendir(dir);
    if (!d) {
        CHECK(!must_exist, "cannot open %s", dir);
        return 0;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".cfg") != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        sh_cfg *c = NULL;
        shoal_result rc = sh_cfg_load(path, &c);
        if (allow_dup && rc == SHOAL_ERR_FORMAT &&
            strstr(shoal_last_error_message(), "duplicate key"))
            continue;
        CHECK(rc == SHOAL_OK, "%s: %s", path, shoal_last_error());
        if (c) {
            n++;
            const char *first = sh_cfg_section_name(sh_cfg_section_at(c, 0));
            CHECK(!strcmp(first, "net") || !strcmp(first, "network"), "%s starts with %s", path,
                  first);
            CHECK(sh_cfg_nsections(c) >= 2, "%s has layers", path);
        }
        sh_cfg_destroy(c);
    }
    closedir(d);
    return n;
}

static void every_example_and_darknet_model_file_parses(void)
{
    /* the tests run from the repository root (make test) */
    int n = load_dir("examples", 1, 0);
    CHECK(n >= 5, "examples/*.cfg loaded: %d, want lenet mlp mlp-wide resnet-small resnet18", n);
    /* Darknet's own files, when the darknet package is installed: syntax compatibility */
    if (access("/usr/share/darknet/cfg", R_OK) == 0) {
        int m = load_dir("/usr/share/darknet/cfg", 0, 1);
        CHECK(m >= 10, "darknet cfgs loaded: %d", m);
    }
}

int main(void)
{
    check_begin("test_cfg", 30);
    setenv("SHOAL_LOG", "info", 1); /* read once, at the first log line */
    RUN(reads_sections_keys_comments_and_darknet_whitespace);
    RUN(missing_keys_take_defaults_and_are_listed);
    RUN(syntax_errors_name_path_line_and_fix);
    RUN(bad_values_fail_with_key_value_and_range);
    RUN(unknown_key_suggests_closest_known_key);
    RUN(darknet_augmentation_keys_are_ignored_not_errors);
    RUN(ignored_keys_are_warned_once_per_file);
    RUN(hash_ignores_comments_whitespace_and_key_order);
    RUN(load_reads_a_file_and_reports_missing_ones);
    RUN(every_example_and_darknet_model_file_parses);
    return check_end();
}
