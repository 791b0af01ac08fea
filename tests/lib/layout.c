/* layout.c — the options and files the parallel-layout tests share (see layout.h).
 * Not here: the rank jobs and what they check (each test), the yardstick (reference.c).
 * Proved through tests/train/test_pipeline.c, test_tensor.c and test_hybrid.c: a wrong
 * option or path fails their comparisons with one process. */
#include "layout.h"

#include <stdio.h>
#include <string.h>

void sh_test_train_opts(sh_train_opts *o, const char *cfg, const char *data_dir, int batch, int64_t steps,
                        uint64_t seed)
{
    sh_train_opts_default(o);
    o->cfg_path = cfg;
    o->data_dir = data_dir;
    o->threads = 1;
    o->quiet = 1;
    o->seed = seed;
    o->batch = batch;
    o->max_steps = steps;
    o->eval_each_epoch = 1;
}

void sh_test_layout_files_apply(sh_train_opts *o, const sh_test_layout_files *f, char *ckpt,
                                size_t ckpt_nbytes)
{
    o->resume_path = f->resume;
    o->save_path = f->save;
    o->weights_path = f->weights;
    if (f->dn) {
        snprintf(ckpt, ckpt_nbytes, "%s.ckpt", f->dn);
        o->save_darknet_path = f->dn;
        o->save_path = ckpt;
    }
}

void sh_test_describe(void (*describe)(const sh_strategy *s, FILE *f), const sh_strategy *s, char *text,
                      size_t text_nbytes)
{
    memset(text, 0, text_nbytes);
    FILE *f = fmemopen(text, text_nbytes - 1, "w");
    if (!f) return;
    describe(s, f);
    fclose(f);
}

int sh_test_files_write(const char *dir, const sh_test_file *files, int count)
{
    for (int i = 0; i < count; i++) {
        const sh_test_file *f = &files[i];
        if ((size_t)snprintf(f->path, f->path_nbytes, "%s/%s", dir, f->name) >= f->path_nbytes) {
            fprintf(stderr, "%s/%s: the path does not fit in %zu bytes\n", dir, f->name, f->path_nbytes);
            return -1;
        }
        if (!f->text) continue;
        FILE *out = fopen(f->path, "w");
        int bad = !out || fputs(f->text, out) < 0;
        if (out && fclose(out) != 0) bad = 1;
        if (bad) {
            fprintf(stderr, "%s: cannot write it; check the directory\n", f->path);
            return -1;
        }
    }
    return 0;
}
