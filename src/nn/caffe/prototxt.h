/* prototxt.h — protobuf's text format (Caffe's .prototxt: net and solver descriptions) read
 * into a tree of fields by name, without a schema; typed getters that name path:line on a
 * bad value and remember which fields were read, so that a field nobody maps is reported.
 * Not here: what the fields mean (caffe_net.c, caffe_solver.c).
 * Proved by tests/nn/test_caffe_prototxt.c and tests/fuzz/test_fuzz_prototxt.c. */
#ifndef SH_PROTOTXT_H
#define SH_PROTOTXT_H

#include "shoal/result.h"

typedef struct sh_ptx sh_ptx;   /* a message: its fields in file order */

typedef struct {
    char *name;
    int line;
    sh_ptx *msg;     /* a nested message, or NULL for a scalar */
    char *text;      /* a scalar's token (a string's unescaped contents) */
    int is_string;   /* the scalar was quoted */
    int used;        /* some getter read it */
} sh_ptx_field;

/* Parse text (name: its path in messages). Syntax errors are SHOAL_ERR_FORMAT "name:line:
 * what; what to do". */
shoal_result sh_ptx_parse(const char *text, const char *name, sh_ptx **out);
/* Read and parse a file; a NUL byte or a file over 64 MiB is refused. */
shoal_result sh_ptx_load(const char *path, sh_ptx **out);
void sh_ptx_destroy(sh_ptx *m);     /* the root only; NULL is fine */

const char *sh_ptx_path(const sh_ptx *m);
int sh_ptx_line(const sh_ptx *m);   /* where the message opened (1 for the root) */
int sh_ptx_nfields(const sh_ptx *m);
sh_ptx_field *sh_ptx_field_at(sh_ptx *m, int i);
/* How many times name occurs, and its i-th occurrence (NULL past the end); neither marks
 * it read. */
int sh_ptx_count(const sh_ptx *m, const char *name);
sh_ptx_field *sh_ptx_nth(sh_ptx *m, const char *name, int i);
/* The first name's nested message, marked read; NULL when absent. A scalar there is
 * SHOAL_ERR_FORMAT. */
shoal_result sh_ptx_msg(sh_ptx *m, const char *name, sh_ptx **out);

/* Scalars (the last occurrence wins, as protobuf's parser does for a non-repeated field).
 * Absent: *out = def. Present but not of the type, or outside [min, max]: SHOAL_ERR_FORMAT
 * "path:line: what: field name = value ...". */
shoal_result sh_ptx_int(sh_ptx *m, const char *what, const char *name, long long def,
                        long long min, long long max, long long *out);
shoal_result sh_ptx_float(sh_ptx *m, const char *what, const char *name, double def, double *out);
shoal_result sh_ptx_bool(sh_ptx *m, const char *what, const char *name, int def, int *out);
/* A string (quoted) or an enum (an identifier, or its number when numbers is not NULL:
 * numbers[i] is names[i]'s); the pointer lives as long as the tree. */
shoal_result sh_ptx_str(sh_ptx *m, const char *what, const char *name, const char *def,
                        const char **out);
shoal_result sh_ptx_enum(sh_ptx *m, const char *what, const char *name, const char *const *names,
                         int nnames, int def, int *out);
/* The i-th occurrence of a repeated integer field. */
shoal_result sh_ptx_int_at(sh_ptx *m, const char *what, const char *name, int i, long long min,
                           long long max, long long *out);
/* Marks every occurrence of name (and all below it) read: fields that are known and ignored. */
void sh_ptx_skip(sh_ptx *m, const char *name);
void sh_ptx_skip_all(sh_ptx *m);    /* every field of m, and all below */

/* The first field below m (depth first) that no getter read: its dotted path from m
 * ("convolution_param.dilation") in buf and its line; 0 when every field was read. */
int sh_ptx_first_unread(const sh_ptx *m, char *buf, int buf_nbytes, int *line);

/* "path:line: " + message, SHOAL_ERR_FORMAT. */
shoal_result sh_ptx_fail(const sh_ptx *m, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
