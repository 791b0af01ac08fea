/* flags.c — reads a subcommand's arguments through its flag table (flags.h) and writes its
 * --help from the same rows: long and short spellings, "=value" or a separate value, whole
 * numbers checked against their bounds, one usage error naming the flag (and, for an unknown
 * one, the nearest).
 * Not here: what a flag means (cmd_*.c), printing usage errors (main.c).
 * Proved by tests/cli/test_flags.c and tests/cli/test_cli.c. */
#include "cli/flags.h"

#include <inttypes.h>
#include <string.h>

#include "base/util.h"
#include "cli/cli.h"

/* --help's layout: the flags' column, then the help text up to the width. */
#define HELP_INDENT 22
#define HELP_WIDTH 90
#define MAX_GROUPS 24

/* The row argv's flag `a` names, and where its "=value" starts (NULL: none). */
static const sh_flag *find_row(const sh_flag_table *t, const char *a, const char **eq)
{
    *eq = NULL;
    for (size_t k = 0; k < t->nflags; k++) {
        const sh_flag *f = &t->flags[k];
        size_t n = 0;
        if (a[1] == '-' && f->name && !strncmp(a + 2, f->name, strlen(f->name)))
            n = 2 + strlen(f->name);
        else if (a[1] != '-' && f->alias && a[1] == f->alias)
            n = 2;
        if (!n || (a[n] && a[n] != '=')) continue;
        if (a[n] == '=') *eq = a + n + 1;
        return f;
    }
    return NULL;
}

static int missing(const sh_flag_table *t, const sh_flag *f, const char *spelled)
{
    if (!f->bad && t->style == SH_FLAGS_NEEDS && f->kind == SH_FLAG_INT)
        return sh_cli_usage_error(t->cmd, "%s needs an integer in %d..%d", spelled, (int)f->min, (int)f->max);
    if (!f->bad && t->style == SH_FLAGS_NEEDS && f->kind == SH_FLAG_I64)
        return sh_cli_usage_error(t->cmd, "%s needs an integer >= %" PRId64, spelled, f->min);
    return sh_cli_usage_error(t->cmd, "%s needs %s", spelled, f->need ? f->need : "a value");
}

static int bad_number(const sh_flag_table *t, const sh_flag *f, const char *spelled, const char *v)
{
    if (f->bad) return sh_cli_usage_error(t->cmd, "%s %s, not \"%s\"", spelled, f->bad, v);
    if (t->style == SH_FLAGS_NEEDS) return missing(t, f, spelled);
    return sh_cli_usage_error(t->cmd, "%s \"%s\": expected an integer in %" PRId64 "..%" PRId64, spelled, v,
                              f->min, f->max);
}

/* Store value (NULL for a switch) where row f says. 0 or SH_EXIT_USAGE (printed). */
static int store(const sh_flag_table *t, const sh_flag *f, const char *spelled, const char *v, void *dst)
{
    char *at = (char *)dst + f->offset;
    int64_t x = 0;
    switch (f->kind) {
    case SH_FLAG_SWITCH: *(int *)at = 1; return 0;
    case SH_FLAG_STR: *(const char **)at = v; return 0;
    case SH_FLAG_INT:
    case SH_FLAG_I64:
        if (!sh_cli_parse_i64(v, f->min, f->max, &x)) return bad_number(t, f, spelled, v);
        if (f->kind == SH_FLAG_INT) *(int *)at = (int)x;
        else *(int64_t *)at = x;
        return 0;
    case SH_FLAG_CALL: return f->call(dst, f, spelled, v, t->cmd);
    }
    return SH_EXIT_USAGE;
}

static int unknown(const sh_flag_table *t, const char *a)
{
    char name[64];
    size_t n = strcspn(a, "=");
    snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name - 1 ? n : sizeof name - 1), a);
    /* "--epoch" and "-epochs" (one dash, Darknet's habit) both get the nearest long name */
    const sh_flag *near = a[1] == '-' ? sh_flags_nearest(t, name + 2) : n > 2 ? sh_flags_nearest(t, name + 1) : NULL;
    char hint[96] = "";
    if (near) snprintf(hint, sizeof hint, " (did you mean \"--%s\"?)", near->name);
    if (t->bare_unknown) return sh_cli_usage_error(t->cmd, "unknown option %s%s", a, hint);
    return sh_cli_usage_error(t->cmd, "unknown option \"%s\"%s", a, hint);
}

int sh_flags_parse(const sh_flag_table *t, int argc, char **argv, int first, void *dst, int *next)
{
    int i = first;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            sh_flags_help(t, stdout);
            return SH_FLAGS_HELP;
        }
        if (t->dashdash_stops && !strcmp(a, "--")) {
            i++;
            break;
        }
        if (a[0] != '-' || !a[1]) {
            int rc = t->positional ? t->positional(dst, a, t->cmd)
                                   : sh_cli_usage_error(t->cmd, "unexpected argument \"%s\"", a);
            if (rc == SH_FLAGS_STOP) break;
            if (rc) return rc;
            continue;
        }
        const char *v = NULL;
        const sh_flag *f = find_row(t, a, &v);
        if (!f) return unknown(t, a);
        char spelled[64];
        snprintf(spelled, sizeof spelled, "%.*s", (int)strcspn(a, "="), a);
        if (f->arg == NULL && v) return sh_cli_usage_error(t->cmd, "%s takes no value", spelled);
        if (f->arg && !v) {
            if (i + 1 >= argc && f->kind == SH_FLAG_CALL && !f->need) return f->call(dst, f, spelled, NULL, t->cmd);
            if (i + 1 >= argc) return missing(t, f, spelled);
            v = argv[++i];
        }
        int rc = store(t, f, spelled, v, dst);
        if (rc) return rc;
    }
    if (next) *next = i;
    return 0;
}

const sh_flag *sh_flags_nearest(const sh_flag_table *t, const char *name)
{
    const sh_flag *best = NULL;
    int best_d = 0;
    if (!*name) return NULL;
    for (size_t k = 0; k < t->nflags; k++) {
        if (!t->flags[k].name) continue;
        /* a name it begins (a shortened flag) is as near as can be */
        int d = strncmp(t->flags[k].name, name, strlen(name)) ? sh_edit_distance(name, t->flags[k].name) : 0;
        if (!best || d < best_d) {
            best = &t->flags[k];
            best_d = d;
        }
    }
    int limit = (int)strlen(name) / 3;
    return best && best_d <= (limit < 2 ? 2 : limit) ? best : NULL;
}

/* Words of text from column `col` on, wrapped at HELP_WIDTH onto lines indented to
 * HELP_INDENT. */
static void wrap(FILE *f, const char *text, int col)
{
    const char *p = text;
    while (*p) {
        size_t w = strcspn(p, " ");
        if (col > HELP_INDENT && col + 1 + (int)w > HELP_WIDTH) {
            fprintf(f, "\n%*s", HELP_INDENT, "");
            col = HELP_INDENT;
        } else if (col > HELP_INDENT) {
            fputc(' ', f);
            col++;
        }
        fprintf(f, "%.*s", (int)w, p);
        col += (int)w;
        p += w;
        while (*p == ' ') p++;
    }
    fputc('\n', f);
}

static void help_row(FILE *f, const sh_flag *r)
{
    char left[96];
    int n = 0;
    if (r->alias && r->name) n = snprintf(left, sizeof left, "  -%c, --%s", r->alias, r->name);
    else if (r->alias) n = snprintf(left, sizeof left, "  -%c", r->alias);
    else n = snprintf(left, sizeof left, "  --%s", r->name);
    if (r->arg) n += snprintf(left + n, sizeof left - (size_t)n, " %s", r->arg);
    fputs(left, f);
    if (n + 2 > HELP_INDENT) fprintf(f, "\n%*s", HELP_INDENT, "");
    else fprintf(f, "%*s", HELP_INDENT - n, "");
    wrap(f, r->help ? r->help : "", HELP_INDENT);
}

void sh_flags_help(const sh_flag_table *t, FILE *f)
{
    const char *groups[MAX_GROUPS];
    int ngroups = 0;
    for (size_t k = 0; k < t->nflags; k++) {
        const char *g = t->flags[k].group ? t->flags[k].group : "Options";
        int seen = 0;
        for (int j = 0; j < ngroups && !seen; j++) seen = !strcmp(groups[j], g);
        if (!seen && ngroups < MAX_GROUPS) groups[ngroups++] = g;
    }
    fputs(t->usage, f);
    for (int j = 0; j < ngroups; j++) {
        fprintf(f, "\n%s:\n", groups[j]);
        for (size_t k = 0; k < t->nflags; k++)
            if (!strcmp(t->flags[k].group ? t->flags[k].group : "Options", groups[j])) help_row(f, &t->flags[k]);
    }
    fprintf(f, "\n  -h, --help%*sthis text\n", HELP_INDENT - 12, "");
    if (t->tail) fprintf(f, "\n%s", t->tail);
}
