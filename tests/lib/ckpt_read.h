/* ckpt_read.h — a section of a checkpoint that `shoal train --save` wrote, read back for a
 * test to compare runs (bit for bit, or within a tolerance).
 * Not here: running shoal (run.h), the comparison (each test).
 * Used by tests/cli/test_train_ps_layouts.c and test_train_stragglers.c. */
#ifndef SH_TEST_CKPT_READ_H
#define SH_TEST_CKPT_READ_H

#include <stddef.h>

/* Section name of checkpoint dir/file, which holds dir/cfg's model: one float a parameter
 * (params; SGD's momentum in optim). malloc'd, *count its floats; NULL when the cfg or the
 * section cannot be read. */
float *sh_test_ckpt_section(const char *dir, const char *cfg, const char *file, const char *name, size_t *count);

#endif
