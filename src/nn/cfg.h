/* cfg.h — reading Darknet-style .cfg model files: sections, key=value, typed getters that
 * remember which keys were read, and errors that name file:line.
 * Not here: what the keys mean (net_config.c for [net], layer_*.c for the layers).
 * Proved by tests/nn/test_cfg.c. */
#ifndef SH_CFG_H
#define SH_CFG_H

#include <stdint.h>
#include "shoal/result.h"

typedef struct sh_cfg sh_cfg;                 /* a whole file */
typedef struct sh_cfg_section sh_cfg_section; /* one [name] and its keys */

/* Parse a file. Syntax errors (a line that is neither [section], key=value, a comment '#'
 * or ';', nor blank; a key before any section; a duplicate key) are SHOAL_ERR_FORMAT
 * "path:line: ...". */
shoal_result sh_cfg_load(const char *path, sh_cfg **out);
/* Same from text in memory; name is used in messages as the path. */
shoal_result sh_cfg_parse(const char *text, const char *name, sh_cfg **out);
void sh_cfg_destroy(sh_cfg *cfg);

const char *sh_cfg_path(const sh_cfg *cfg);
int sh_cfg_nsections(const sh_cfg *cfg);
sh_cfg_section *sh_cfg_section_at(sh_cfg *cfg, int i);
const char *sh_cfg_section_name(const sh_cfg_section *s); /* "net", "convolutional" */
int sh_cfg_section_line(const sh_cfg_section *s);         /* line of the [name] header */
/* Hash of the file's meaningful content (sections, keys, values; not comments or
 * whitespace): ranks compare it to be sure they built the same model. */
uint64_t sh_cfg_hash(const sh_cfg *cfg);

/* Typed getters. Missing key: *out = def and the key is recorded as defaulted. Present but
 * malformed (not a number, trailing junk, empty) or out of [min, max]:
 * SHOAL_ERR_FORMAT "path:line: [section] key=value: what is wrong; what to do". Every
 * getter records the key as known to this section, for sh_cfg_check_unused. */
shoal_result sh_cfg_int(sh_cfg_section *s, const char *key, int def, int min, int max, int *out);
shoal_result sh_cfg_float(sh_cfg_section *s, const char *key, float def, float min, float max,
                          float *out);
/* String value or def; the pointer lives as long as the cfg. */
shoal_result sh_cfg_str(sh_cfg_section *s, const char *key, const char *def, const char **out);
/* Comma-separated lists ("0.1,.1,.1"): at most max values; *n is how many (0 when missing). */
shoal_result sh_cfg_int_list(sh_cfg_section *s, const char *key, int *out, int max, int *n);
shoal_result sh_cfg_float_list(sh_cfg_section *s, const char *key, float *out, int max, int *n);
/* 1 when the key is present (and records it as known). */
int sh_cfg_has(sh_cfg_section *s, const char *key);
/* Line of a key (or of the section when absent), for messages about its value. */
int sh_cfg_key_line(const sh_cfg_section *s, const char *key);

/* After a section's parser ran: a key that no getter asked for is an error naming it, with
 * "did you mean" the closest known key when one is close — unless it is one of Darknet's
 * keys that shoal does not use (augmentation: hue, saturation, exposure, angle, jitter, ...),
 * which is a warning, once per file and key, instead. */
shoal_result sh_cfg_check_unused(sh_cfg_section *s);

/* Fail with "path:line: [section] " + message, line taken from key (or the section when
 * key is NULL). For layer parsers that find a bad combination of values. */
shoal_result sh_cfg_fail_at(const sh_cfg_section *s, const char *key, shoal_result rc,
                            const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Keys that fell back to defaults, for an info-level listing: calls fn for each. */
void sh_cfg_each_defaulted(const sh_cfg *cfg, void (*fn)(void *ctx, const char *section,
                                                           int line, const char *key), void *ctx);

/* Building a cfg in memory from another format (a Caffe .prototxt: caffe/caffe_net.c): an
 * empty cfg named path (messages say path:line), then sections and key=value pairs that carry
 * the lines of the source they came from. A duplicate key is SHOAL_ERR_INTERNAL. */
shoal_result sh_cfg_create(const char *path, sh_cfg **out);
shoal_result sh_cfg_add_section(sh_cfg *cfg, const char *name, int line, sh_cfg_section **out);
shoal_result sh_cfg_add_key(sh_cfg_section *s, const char *key, const char *value, int line);

#endif
