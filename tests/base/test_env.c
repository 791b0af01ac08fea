/* test_env.c — proves src/base/env.c: every row of the table is well-formed, typed access
 * gives the default when unset and refuses a non-number or a value out of bounds naming the
 * variable and the range, a name not in the table is a shoal bug (assertion), and
 * `shoal env` prints every row.
 * Not here: what the subsystems do with the values. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/env.h"
#include "base/err.h"
#include "check.h"

/* Variables set by the launchers that start ranks for us, not by shoal. */
static const char *const launcher_prefixes[] = {"OMPI_", "PMIX_", "PMI_", "MPI_", "SLURM_",
                                                "OPENBLAS_"};

static int is_int_row(const sh_env_var *v) { return v->min <= v->max; }

static size_t row_count(void)
{
    size_t n = 0;
    while (sh_env_var_at(n)) n++;
    return n;
}

/* The process's value of a variable, put back after a test changes it. */
typedef struct {
    const char *name;
    char *saved; /* NULL: was unset */
} saved_var;

static saved_var save_var(const char *name)
{
    const char *s = getenv(name);
    return (saved_var){name, s ? strdup(s) : NULL};
}

static void restore_var(saved_var *s)
{
    if (s->saved) setenv(s->name, s->saved, 1);
    else unsetenv(s->name);
    free(s->saved);
    s->saved = NULL;
}

static void every_row_is_well_formed(void)
{
    size_t n = row_count();
    CHECK(n >= 40, "the table has only %zu rows", n);
    for (size_t i = 0; i < n; i++) {
        const sh_env_var *v = sh_env_var_at(i);
        const char *name = v->name ? v->name : "(null)";
        CHECK(v->name && v->name[0], "row %zu has no name", i);
        if (!v->name) continue;
        int launcher = 0;
        for (size_t k = 0; k < sizeof launcher_prefixes / sizeof launcher_prefixes[0]; k++)
            if (!strncmp(name, launcher_prefixes[k], strlen(launcher_prefixes[k]))) launcher = 1;
        CHECK(!strncmp(name, "SHOAL_", 6) || launcher,
              "%s is neither SHOAL_* nor a launcher's variable", name);
        int chars_ok = 1;
        for (const char *c = name; *c; c++)
            if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
                  *c == '_'))
                chars_ok = 0;
        CHECK(chars_ok, "%s: a variable name is letters, digits and _", name);
        CHECK(v->help && strlen(v->help) >= 8, "%s: help missing or too short: \"%s\"", name,
              v->help ? v->help : "(null)");
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(sh_env_var_at(j)->name, name) != 0, "%s is in the table twice (rows %zu, %zu)",
                  name, j, i);
        if (v->def) CHECK(v->def[0], "%s: an empty default is no default: use NULL", name);
        if (is_int_row(v) && v->def) {
            char *end = NULL;
            errno = 0;
            long d = strtol(v->def, &end, 10);
            CHECK(errno == 0 && end != v->def && *end == 0, "%s: default \"%s\" is not an integer",
                  name, v->def);
            CHECK(d >= v->min && d <= v->max, "%s: default %s outside %ld..%ld", name, v->def, v->min,
                  v->max);
        }
        /* no variable takes a negative value: a negative lower bound is a typo */
        if (is_int_row(v)) CHECK(v->min >= 0, "%s: a negative lower bound %ld", name, v->min);
    }
    CHECK(sh_env_var_at(n) == NULL && sh_env_var_at(n + 1000) == NULL, "rows past the end");
}

/* The rows tests and other code rely on are there with the documented shape. */
static void known_rows_have_their_documented_bounds(void)
{
    struct { const char *name; const char *def; long min, max; } want[] = {
        {"SHOAL_TIMEOUT", "60000", 1, 86400000},
        {"SHOAL_MASTER_PORT", "29500", 1, 65535},
        {"SHOAL_RANK", NULL, 0, 1 << 20},
        {"SHOAL_WORLD_SIZE", NULL, 1, 1 << 20},
        {"SHOAL_LOG", "warn", 1, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const sh_env_var *v = NULL;
        for (size_t k = 0; sh_env_var_at(k); k++)
            if (!strcmp(sh_env_var_at(k)->name, want[i].name)) v = sh_env_var_at(k);
        CHECK(v != NULL, "%s missing from the table", want[i].name);
        if (!v) continue;
        CHECK((v->def == NULL) == (want[i].def == NULL) &&
                  (!v->def || !strcmp(v->def, want[i].def)),
              "%s: default %s, want %s", want[i].name, v->def ? v->def : "none",
              want[i].def ? want[i].def : "none");
        CHECK(v->min == want[i].min && v->max == want[i].max, "%s: bounds %ld..%ld, want %ld..%ld",
              want[i].name, v->min, v->max, want[i].min, want[i].max);
    }
}

static int message_names(const char *name, long min, long max)
{
    char range[64];
    snprintf(range, sizeof range, "%ld..%ld", min, max);
    const char *m = shoal_last_error_message();
    return strstr(m, name) != NULL && strstr(m, range) != NULL;
}

/* For every integer row: unset gives the default (or a refusal naming it when it has none),
 * both bounds are accepted, one past either bound and non-numbers are refused. */
static void every_integer_row_reads_default_and_enforces_bounds(void)
{
    for (size_t i = 0; sh_env_var_at(i); i++) {
        const sh_env_var *v = sh_env_var_at(i);
        if (!is_int_row(v)) continue;
        saved_var s = save_var(v->name);
        long x = -12345;

        unsetenv(v->name);
        if (v->def) {
            shoal_result rc = sh_env_long(v->name, &x);
            CHECK(rc == SHOAL_OK && x == strtol(v->def, NULL, 10), "%s unset: %s, value %ld, default %s",
                  v->name, shoal_result_name(rc), x, v->def);
            /* set but empty is the same as unset */
            setenv(v->name, "", 1);
            x = -12345;
            rc = sh_env_long(v->name, &x);
            CHECK(rc == SHOAL_OK && x == strtol(v->def, NULL, 10), "%s empty: %s, value %ld",
                  v->name, shoal_result_name(rc), x);
        } else {
            CHECK_RC(sh_env_long(v->name, &x), SHOAL_ERR_INVALID);
            CHECK(strstr(shoal_last_error_message(), v->name) &&
                      strstr(shoal_last_error_message(), "not set"),
                  "%s unset without default: %s", v->name, shoal_last_error_message());
        }

        char buf[64];
        long bounds[2] = {v->min, v->max};
        for (int b = 0; b < 2; b++) {
            snprintf(buf, sizeof buf, "%ld", bounds[b]);
            setenv(v->name, buf, 1);
            x = -12345;
            shoal_result rc = sh_env_long(v->name, &x);
            CHECK(rc == SHOAL_OK && x == bounds[b], "%s=%s (a bound): %s, value %ld (%s)", v->name,
                  buf, shoal_result_name(rc), x, shoal_last_error_message());
        }

        const char *bad[4];
        char below[64], above[64];
        int nbad = 0;
        snprintf(below, sizeof below, "%ld", v->min - 1);
        bad[nbad++] = below;
        if (v->max < LONG_MAX) snprintf(above, sizeof above, "%ld", v->max + 1);
        else snprintf(above, sizeof above, "%s", "9223372036854775808"); /* LONG_MAX + 1 */
        bad[nbad++] = above;
        bad[nbad++] = "not-a-number";
        bad[nbad++] = "12x";
        for (int k = 0; k < nbad; k++) {
            setenv(v->name, bad[k], 1);
            x = -12345;
            shoal_result rc = sh_env_long(v->name, &x);
            CHECK(rc == SHOAL_ERR_INVALID, "%s=%s: %s, want SHOAL_ERR_INVALID", v->name, bad[k],
                  shoal_result_name(rc));
            CHECK(x == -12345, "%s=%s: the output was written on a refusal (%ld)", v->name, bad[k], x);
            CHECK(message_names(v->name, v->min, v->max), "%s=%s: message lacks name or range: %s",
                  v->name, bad[k], shoal_last_error_message());
            CHECK(strstr(shoal_last_error_message(), bad[k]) != NULL,
                  "%s=%s: message does not quote the value: %s", v->name, bad[k],
                  shoal_last_error_message());
        }
        restore_var(&s);
    }
}

static void timeout_messages_say_what_was_wrong(void)
{
    saved_var s = save_var("SHOAL_TIMEOUT");
    long x = 0;
    setenv("SHOAL_TIMEOUT", "0", 1);
    CHECK_RC(sh_env_long("SHOAL_TIMEOUT", &x), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(), "SHOAL_TIMEOUT=0 is out of range; expected 1..86400000"),
          "message: %s", shoal_last_error_message());
    setenv("SHOAL_TIMEOUT", "soon", 1);
    CHECK_RC(sh_env_long("SHOAL_TIMEOUT", &x), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(),
                 "SHOAL_TIMEOUT=\"soon\" is not an integer; expected 1..86400000"),
          "message: %s", shoal_last_error_message());
    CHECK(strstr(shoal_last_error_message(), "in ms") != NULL, "message carries the help: %s",
          shoal_last_error_message());
    setenv("SHOAL_TIMEOUT", "-5", 1);
    CHECK_RC(sh_env_long("SHOAL_TIMEOUT", &x), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(), "SHOAL_TIMEOUT=-5 is out of range"), "message: %s",
          shoal_last_error_message());
    restore_var(&s);
}

static void str_and_is_set_follow_the_environment(void)
{
    saved_var a = save_var("SHOAL_ALGO"), h = save_var("SHOAL_HOST_ID");
    unsetenv("SHOAL_ALGO");
    CHECK(sh_env_str("SHOAL_ALGO") && !strcmp(sh_env_str("SHOAL_ALGO"), "auto"), "default: %s",
          sh_env_str("SHOAL_ALGO") ? sh_env_str("SHOAL_ALGO") : "(null)");
    CHECK(!sh_env_is_set("SHOAL_ALGO"), "unset SHOAL_ALGO reads as set");
    setenv("SHOAL_ALGO", "ring", 1);
    CHECK(sh_env_str("SHOAL_ALGO") && !strcmp(sh_env_str("SHOAL_ALGO"), "ring"), "set: %s",
          sh_env_str("SHOAL_ALGO"));
    CHECK(sh_env_is_set("SHOAL_ALGO"), "SHOAL_ALGO=ring reads as unset");
    setenv("SHOAL_ALGO", "", 1);
    CHECK(sh_env_str("SHOAL_ALGO") && !strcmp(sh_env_str("SHOAL_ALGO"), "auto"),
          "empty reads as the default: %s", sh_env_str("SHOAL_ALGO"));
    CHECK(!sh_env_is_set("SHOAL_ALGO"), "empty SHOAL_ALGO reads as set");
    unsetenv("SHOAL_HOST_ID");
    CHECK(sh_env_str("SHOAL_HOST_ID") == NULL, "no default gives NULL: %s", sh_env_str("SHOAL_HOST_ID"));
    setenv("SHOAL_HOST_ID", "node7", 1);
    CHECK(sh_env_str("SHOAL_HOST_ID") && !strcmp(sh_env_str("SHOAL_HOST_ID"), "node7"), "host id");
    restore_var(&a);
    restore_var(&h);
}

/* Runs fn in a child with stderr captured: returns its wait status, the text in out. */
static int run_child(void (*fn)(void), char *out, size_t cap)
{
    int fd[2];
    out[0] = 0;
    if (pipe(fd) != 0) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        alarm(10);
        fn();
        _exit(0);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(fd[0], out + n, cap - 1 - n)) > 0) n += (size_t)r;
    out[n] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return st;
}

static void read_unknown_str(void) { (void)sh_env_str("SHOAL_NOT_A_VARIABLE"); }
static void read_unknown_is_set(void) { (void)sh_env_is_set("SHOAL_NOT_A_VARIABLE"); }
static void read_unknown_long(void)
{
    long x;
    (void)sh_env_long("SHOAL_NOT_A_VARIABLE", &x);
}
static void read_string_as_long(void)
{
    long x;
    (void)sh_env_long("SHOAL_ALGO", &x);
}

/* env.h: "an unlisted variable is a shoal bug": the process stops with an assertion naming
 * env.c, whether or not the variable happens to be set. */
static void unlisted_variable_is_an_assertion(void)
{
    setenv("SHOAL_NOT_A_VARIABLE", "1", 1);
    struct { void (*fn)(void); const char *what; } cases[] = {
        {read_unknown_str, "sh_env_str"},
        {read_unknown_is_set, "sh_env_is_set"},
        {read_unknown_long, "sh_env_long"},
        {read_string_as_long, "sh_env_long of a string variable"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[1024];
        int st = run_child(cases[i].fn, out, sizeof out);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "%s: child status %#x, want SIGABRT",
              cases[i].what, st);
        CHECK(strstr(out, "shoal bug: assertion") && strstr(out, "env.c:"),
              "%s: stderr does not name the assertion: %s", cases[i].what, out);
    }
    unsetenv("SHOAL_NOT_A_VARIABLE");
}

static void print_lists_every_row_with_default_and_value(void)
{
    saved_var s = save_var("SHOAL_SPIN_US");
    setenv("SHOAL_SPIN_US", "777123", 1);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL, "open_memstream");
    if (!f) return;
    sh_env_print(f);
    fclose(f);
    size_t lines = 0;
    for (size_t i = 0; i < len; i++) lines += buf[i] == '\n';
    CHECK(lines == row_count() + 1, "%zu lines for %zu rows and a header", lines, row_count());
    for (size_t i = 0; sh_env_var_at(i); i++) {
        const sh_env_var *v = sh_env_var_at(i);
        char want[512];
        snprintf(want, sizeof want, "\n%-28s %-12s ", v->name, v->def ? v->def : "-");
        CHECK(strstr(buf, want) != NULL, "%s: row not printed with its default", v->name);
        CHECK(strstr(buf, v->help) != NULL, "%s: help not printed", v->name);
    }
    CHECK(strstr(buf, "777123") != NULL, "the current value of SHOAL_SPIN_US is not printed");
    free(buf);
    restore_var(&s);
}

int main(void)
{
    check_begin("test_env", 30);
    RUN(every_row_is_well_formed);
    RUN(known_rows_have_their_documented_bounds);
    RUN(every_integer_row_reads_default_and_enforces_bounds);
    RUN(timeout_messages_say_what_was_wrong);
    RUN(str_and_is_set_follow_the_environment);
    RUN(unlisted_variable_is_an_assertion);
    RUN(print_lists_every_row_with_default_and_value);
    return check_end();
}
