/* test_docs.c — proves that every code block of README.md and docs/NAME.md works as written, a
 * fresh clone's walk-through: each block says what it is by its info string. ```c blocks are
 * compiled against include/ (linked with libshoal.a when they have a main); ```sh blocks run in
 * a scratch folder that sees the checkout's build/, examples/, scripts/, bench/ and docs/, and
 * must exit 0; ```sh {skip: WHY} blocks (a cluster, the emulated network, root, a long run)
 * are not run, but each `shoal` command in them is run with --help appended, which checks its
 * subcommand and every flag and value before it; ```text, ```cfg, ```ini, ```json blocks are
 * read, not run. A block without an info string fails: say what it is. */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "lib/run.h"

enum { BLOCK_NBYTES = 1 << 16 };

static char scratch[PATH_MAX], root[PATH_MAX], bin_dir[PATH_MAX], out[1 << 16];

/* The checkout's folders in a scratch folder, so blocks write nothing into the checkout. */
static int make_scratch(void)
{
    snprintf(scratch, sizeof scratch, "/tmp/shoal-docs-XXXXXX");
    if (!mkdtemp(scratch)) return -1;
    const char *dirs[] = {"examples", "scripts", "bench", "docs", "include", "src", "tests", "Makefile"};
    char link[PATH_MAX + 64], target[PATH_MAX + 64];
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(link, sizeof link, "%s/%s", scratch, dirs[i]);
        snprintf(target, sizeof target, "%s/%s", root, dirs[i]);
        if (symlink(target, link) != 0) return -1;
    }
    /* build/ holds links to the binary and libraries under test, nothing a block could remove */
    snprintf(link, sizeof link, "%s/build", scratch);
    if (mkdir(link, 0755) != 0) return -1;
    const char *built[] = {"shoal", "libshoal.a", "libshoal.so", "libshoal.so.0"};
    for (size_t i = 0; i < sizeof built / sizeof built[0]; i++) {
        snprintf(link, sizeof link, "%s/build/%s", scratch, built[i]);
        snprintf(target, sizeof target, "%s/%s", bin_dir, built[i]);
        if (access(target, F_OK) == 0 && symlink(target, link) != 0) return -1;
    }
    return 0;
}

/* `sh -c text` in the scratch folder, with a deadline; the exit status. */
static int run_sh(const char *text, int deadline_s)
{
    char path[PATH_MAX + 32], cmd[PATH_MAX * 2 + 64];
    snprintf(path, sizeof path, "%s/block.sh", scratch);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "set -e\n%s", text);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cd %s && timeout %d sh block.sh 2>&1", scratch, deadline_s);
    return sh_test_run(cmd, out, sizeof out);
}

/* The command lines of a block: continuations joined, comments dropped. */
static int next_command(const char **p, char *line, size_t nbytes)
{
    size_t n = 0;
    while (**p) {
        const char *e = strchr(*p, '\n');
        size_t len = e ? (size_t)(e - *p) : strlen(*p);
        int cont = len && (*p)[len - 1] == '\\';
        if (n + len + 1 < nbytes) {
            memcpy(line + n, *p, len - (size_t)cont);
            n += len - (size_t)cont;
        }
        *p += len + (e != NULL);
        if (!cont) break;
    }
    line[n] = 0;
    char *hash = strstr(line, " #");
    if (hash) *hash = 0;
    return n > 0 || **p;
}

/* Each `build/shoal ...` or `shoal ...` line of a block not run, with --help after its flags. */
static void check_flags(const char *file, int at, const char *body)
{
    const char *p = body;
    char line[4096];
    while (next_command(&p, line, sizeof line)) {
        char *s = line;
        while (*s == ' ') s++;
        if (strncmp(s, "build/shoal ", 12) && strncmp(s, "shoal ", 6)) continue;
        if (strpbrk(s, "|;&>$`(")) continue; /* pipes, redirections, shell values: not a plain command */
        if (strstr(s, "shoal launch ") == s || strstr(s, "build/shoal launch ") == s) continue; /* runs another program */
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "%s%s --help >/dev/null", strncmp(s, "shoal ", 6) ? "" : "build/", s);
        int rc = run_sh(cmd, 60);
        CHECK(rc == 0, "%s:%d: `%s` is refused (exit %d): %s", file, at, s, rc, out);
    }
}

static void compile_c(const char *file, int at, const char *body)
{
    char src[PATH_MAX + 16], cmd[PATH_MAX * 5];
    snprintf(src, sizeof src, "%s/block.c", scratch);
    FILE *f = fopen(src, "w");
    if (!f) return;
    fputs(body, f);
    fclose(f);
    if (strstr(body, "int main"))
        snprintf(cmd, sizeof cmd, "cc -std=c11 -Wall -Wextra -Werror -I%s/include %s -o %s/block %s/libshoal.a "
                 "-pthread -lcrypto -ljpeg -lpng -lz -ldl -lm -lrt -lprotobuf-c 2>&1", root, src, scratch, bin_dir);
    else
        snprintf(cmd, sizeof cmd, "cc -std=c11 -Wall -Wextra -Werror -Wno-unused-function -I%s/include -c %s -o "
                 "%s/block.o 2>&1", root, src, scratch);
    int rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc == 0, "%s:%d: the C block does not compile: %s", file, at, out);
}

/* A Python block parses under Debian's python3 (it may need a cluster or data to run). */
static void compile_python(const char *file, int at, const char *body)
{
    char src[PATH_MAX + 16], cmd[PATH_MAX * 2 + 64];
    snprintf(src, sizeof src, "%s/block.py", scratch);
    FILE *f = fopen(src, "w");
    if (!f) return;
    fputs(body, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -m py_compile %s 2>&1", src);
    int rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc == 0, "%s:%d: the Python block does not parse: %s", file, at, out);
}

/* Every fenced block of path, by its info string. */
static void check_file(const char *path)
{
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot read %s", path);
    if (!f) return;
    static char body[BLOCK_NBYTES];
    char line[4096], info[256] = "";
    int in = 0, at = 0, lineno = 0;
    size_t n = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (strncmp(line, "```", 3)) {
            size_t len = strlen(line);
            if (in && n + len < sizeof body) memcpy(body + n, line, len + 1), n += len;
            continue;
        }
        if (!in) {
            snprintf(info, sizeof info, "%.250s", line + 3);
            info[strcspn(info, "\n")] = 0;
            in = 1, at = lineno, n = 0, body[0] = 0;
            continue;
        }
        in = 0;
        const char *skip = strstr(info, "{skip:");
        if (!info[0])
            CHECK(0, "%s:%d: a code block without an info string: say ```sh, ```c, ```text, ```cfg (and "
                  "{skip: WHY} for commands that cannot run here)", path, at);
        else if (!strncmp(info, "c", 1) && (info[1] == 0 || info[1] == ' '))
            compile_c(path, at, body);
        else if (!strcmp(info, "python"))
            compile_python(path, at, body);
        else if (!strncmp(info, "sh", 2) && skip)
            check_flags(path, at, body);
        else if (!strncmp(info, "sh", 2)) {
            int rc = run_sh(body, 240);
            CHECK(rc == 0, "%s:%d: the block exits %d: %s", path, at, rc, out);
        } else
            CHECK(!strcmp(info, "text") || !strcmp(info, "cfg") || !strcmp(info, "ini") || !strcmp(info, "json") ||
                      !strcmp(info, "prototxt"),
                  "%s:%d: unknown info string \"%s\"", path, at, info);
    }
    fclose(f);
    CHECK(!in, "%s: a block opened at line %d is not closed", path, at);
}

static void every_block_of_the_docs_works(void)
{
    char path[PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/README.md", root);
    check_file(path);
    snprintf(path, sizeof path, "%s/docs", root);
    DIR *d = opendir(path);
    CHECK(d != NULL, "no %s", path);
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".md")) continue;
        snprintf(path, sizeof path, "%s/docs/%s", root, e->d_name);
        check_file(path);
    }
    if (d) closedir(d);
}

/* docs/shoal.1 (make install's man page) names every subcommand shoal --help lists. */
static void man_page_names_every_subcommand(void)
{
    char path[PATH_MAX + 32], cmd[PATH_MAX + 64], help[8192];
    snprintf(path, sizeof path, "%s/docs/shoal.1", root);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "no man page %s", path);
    if (!f) return;
    static char man[1 << 16];
    size_t n = fread(man, 1, sizeof man - 1, f);
    man[n] = 0;
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s --help", sh_test_shoal_bin());
    CHECK(sh_test_run(cmd, help, sizeof help) == 0, "shoal --help");
    for (char *l = strtok(help, "\n"); l; l = strtok(NULL, "\n")) {
        char sub[32], want[64];
        if (strncmp(l, "  ", 2) || sscanf(l, "  %31s", sub) != 1) continue; /* the list's lines */
        snprintf(want, sizeof want, "shoal %s", sub);
        CHECK(strstr(man, want) != NULL, "docs/shoal.1 does not name \"%s\"", want);
    }
}

int main(void)
{
    check_begin("test_docs", 280);
    if (check_under_san()) { /* the docs are the same; their C blocks would need the sanitizers' flags */
        printf("test_docs: skipped under sanitizers\n");
        return check_end();
    }
    char resolved[PATH_MAX];
    if (!realpath(sh_test_shoal_bin(), resolved) || !getcwd(root, sizeof root)) {
        CHECK(0, "cannot resolve the binary or the checkout");
        return check_end();
    }
    snprintf(bin_dir, sizeof bin_dir, "%s", resolved);
    *strrchr(bin_dir, '/') = 0;
    if (make_scratch()) {
        CHECK(0, "cannot make the scratch folder");
        return check_end();
    }
    RUN(every_block_of_the_docs_works);
    RUN(man_page_names_every_subcommand);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf %s", scratch);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", scratch);
    return check_end();
}
