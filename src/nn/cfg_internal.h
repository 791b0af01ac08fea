/* cfg_internal.h — a parsed cfg's insides, shared by cfg.c (files into sections, unknown keys)
 * and cfg_value.c (the typed getters).
 * Not here: the API (nn/cfg.h). Proved by tests/nn/test_cfg.c. */
#ifndef SH_CFG_INTERNAL_H
#define SH_CFG_INTERNAL_H

#include <stddef.h>

#include "nn/cfg.h"

typedef struct {
    char *key, *val;
    int line;
    int used;        /* some getter asked for it */
} cfg_kv;

typedef struct {
    char *key;
    int defaulted;   /* asked for and absent: the default was used */
} cfg_known;

struct sh_cfg_section {
    sh_cfg *cfg;
    char *name;
    int line;
    cfg_kv *kv;
    int nkv, cap_kv;
    cfg_known *known;  /* keys the section's parser asked for, in order of asking */
    int nknown, cap_known;
};

struct sh_cfg {
    char *path;
    sh_cfg_section **sec;
    int nsec, cap_sec;
    char **ignored_logged;  /* Darknet keys already listed as ignored in this file */
    int nignored, cap_ignored;
};

/* cfg.c: *arr grown (doubling) to hold need entries of nbytes_each, what named in the
 * out-of-memory error; a terminated copy of s[0, n); key's pair in s, or NULL. */
shoal_result sh_cfg_grow(void **arr, int *cap, int need, size_t nbytes_each, const char *what);
shoal_result sh_cfg_dup_str(const char *s, size_t n, char **out);
cfg_kv *sh_cfg_find_kv(const sh_cfg_section *s, const char *key);

#endif
