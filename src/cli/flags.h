/* flags.h — a subcommand's flags as one table: each row a flag's long name, short alias,
 * argument, heading, help line and where its value goes; the table parses argv and writes
 * --help, grouped under the headings.
 * Not here: what a value means (each cmd_*.c; shoal_train_opts_set for shoal train).
 * Proved by tests/cli/test_flags.c (parsing, messages, help layout) and tests/cli/test_cli.c. */
#ifndef SH_CLI_FLAGS_H
#define SH_CLI_FLAGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    SH_FLAG_SWITCH, /* no value: the int at offset becomes 1 */
    SH_FLAG_STR,    /* the const char * at offset: the value, borrowed from argv */
    SH_FLAG_INT,    /* the int at offset: a whole number in [min, max] */
    SH_FLAG_I64,    /* the int64_t at offset: a whole number in [min, max] */
    SH_FLAG_CALL,   /* call(): the row parses and stores the value itself */
} sh_flag_kind;

typedef struct sh_flag sh_flag;

/* A SH_FLAG_CALL row's setter: dst is the subcommand's options, spelled the flag as given
 * ("-n" or "--nranks"), value NULL for a switch, or for a missing value when the row has no
 * `need` (the setter words that message). Returns 0, or SH_EXIT_USAGE after printing one
 * usage error (sh_cli_usage_error with cmd). */
typedef int (*sh_flag_call_fn)(void *dst, const sh_flag *f, const char *spelled, const char *value,
                               const char *cmd);

struct sh_flag {
    const char *name;     /* long name without "--" ("epochs"); NULL: the alias only */
    char alias;           /* short name ('n' is -n); 0: none */
    const char *arg;      /* the value's name in --help ("N", "FILE"); NULL: a switch */
    sh_flag_kind kind;
    size_t offset;        /* where the value goes: offsetof(options struct, field) */
    int64_t min, max;     /* SH_FLAG_INT, SH_FLAG_I64 */
    const char *group;    /* the heading it is listed under; NULL: "Options" */
    const char *help;     /* one paragraph, wrapped by --help */
    const char *need;     /* a missing value: "NAME needs <need>"; NULL: "a value" */
    const char *bad;      /* a bad number: "NAME <bad>, not \"VALUE\""; NULL: the table's style */
    sh_flag_call_fn call; /* SH_FLAG_CALL */
};

/* How a table words a bad or missing whole number (rows without their own `bad`). */
typedef enum {
    SH_FLAGS_EXPECTED, /* NAME "abc": expected an integer in 1..64 (missing: NAME needs a value) */
    SH_FLAGS_NEEDS,    /* NAME needs an integer in 1..64 (SH_FLAG_I64: NAME needs an integer >= 0) */
} sh_flags_style;

/* What an argument that is not a flag does: 0 taken (stored in dst), SH_FLAGS_STOP to end
 * parsing there (it and what follows are the caller's: shoal launch's command), or
 * SH_EXIT_USAGE after printing one usage error. */
typedef int (*sh_flags_positional_fn)(void *dst, const char *arg, const char *cmd);

typedef struct {
    const char *cmd;        /* "train": messages read "shoal train: ..." */
    const char *usage;      /* --help above the flags: the usage line(s) and a paragraph */
    const char *tail;       /* --help below the flags; NULL: none */
    const sh_flag *flags;
    size_t nflags;
    sh_flags_style style;
    int bare_unknown;       /* 1: "unknown option --x", else "unknown option \"--x\"" */
    int dashdash_stops;     /* 1: "--" ends the flags (what follows is the caller's) */
    sh_flags_positional_fn positional; /* NULL: every positional is "unexpected argument" */
} sh_flag_table;

#define SH_FLAGS_STOP 1  /* from a positional function */
#define SH_FLAGS_HELP (-1) /* from sh_flags_parse: --help was printed; exit 0 */

/* Parse argv[first..argc) into dst: "--name value", "--name=value", "-n value", "-n=value"
 * and switches "--name". Returns 0 with *next the index after the last argument taken
 * (argc, or where parsing stopped), SH_FLAGS_HELP after printing --help to stdout, or
 * SH_EXIT_USAGE after printing one usage error to stderr (an unknown flag names the nearest
 * one). next may be NULL. */
int sh_flags_parse(const sh_flag_table *t, int argc, char **argv, int first, void *dst, int *next);

/* --help: t->usage, the flags under their headings (in the order the headings first come),
 * then t->tail. */
void sh_flags_help(const sh_flag_table *t, FILE *f);

/* The row whose long name begins with name, else the one nearest to it (edit distance), or
 * NULL when none is within a third of its length (at least 2 edits): "did you mean" of
 * unknown flags. */
const sh_flag *sh_flags_nearest(const sh_flag_table *t, const char *name);

#endif
