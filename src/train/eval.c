/* eval.c — accuracy and mean loss over a dataset, batch by batch, in inference mode, through
 * the net or a strategy's pass.
 * Not here: the loader's order (src/data), training (step.c), summing over ranks (trainer.c).
 * Proved by tests/train/test_trainer.c; the pass by test_pipeline.c and test_hybrid.c. */
#include "train/eval.h"

#include <stdio.h>
#include <string.h>

#include "base/err.h"

/* The file the labels came from: IDX keeps them beside the images (train-labels-idx1-ubyte
 * for train-images-idx3-ubyte); other formats keep them in the images' own file. */
static void labels_file(const sh_dataset *d, char *out, size_t cap)
{
    const char *at = strstr(d->name, "images-idx3");
    if (!at) {
        snprintf(out, cap, "%s", d->name);
        return;
    }
    snprintf(out, cap, "%.*slabels-idx1%s", (int)(at - d->name), d->name, at + strlen("images-idx3"));
}

/* A character-level model: bytes in (256 one-hot inputs) and out, or a recurrent one. */
static int reads_text(const sh_net *net)
{
    return (sh_net_input_count(net) == 256 && sh_net_nclasses(net) == 256) || sh_net_time_steps(net) > 1;
}

shoal_result sh_eval_check_data(const sh_dataset *d, const sh_net *net, const char *cfg, int labelled)
{
    const sh_net_config *nc = sh_net_get_config(net);
    int count = d->c * d->h * d->w;
    if (!d->text && reads_text(net) && count != sh_net_input_count(net))
        return SH_FAIL(SHOAL_ERR_INVALID, "%s is a character-level model (%d inputs, a byte one-hot) but the data is "
                       "%s's %dx%dx%d images; give --data FILE.txt, a text file to learn from", cfg,
                       sh_net_input_count(net), d->name, d->c, d->h, d->w);
    if (!d->text && nc->width > 0 && nc->height > 0 &&
        (d->h != nc->height || d->w != nc->width || (nc->channels > 0 && d->c != nc->channels)))
        return SH_FAIL(SHOAL_ERR_INVALID, "dataset %s holds %dx%d images (height x width, %d channel%s) but %s "
                       "expects %dx%d (%d channel%s); use the dataset the model is for, or set width, height and "
                       "channels in its [net] section to the dataset's", d->name, d->h, d->w, d->c,
                       d->c == 1 ? "" : "s", cfg, nc->height, nc->width, nc->channels, nc->channels == 1 ? "" : "s");
    if (count != sh_net_input_count(net))
        return SH_FAIL(SHOAL_ERR_INVALID,
                       "dataset %s has %dx%dx%d images (%d values) but %s expects %d values "
                       "per image; set width, height and channels in its [net] section to "
                       "the dataset's",
                       d->name, d->c, d->h, d->w, count, cfg, sh_net_input_count(net));
    int k = sh_net_nclasses(net);
    if (!labelled || d->nclasses <= k) return SHOAL_OK;
    if (!d->labels)
        return SH_FAIL(SHOAL_ERR_INVALID, "dataset %s has %d classes but %s outputs %d; make the last layer's output "
                       "%d", d->name, d->nclasses, cfg, k, d->nclasses);
    int i = 0;
    while (i < d->count - 1 && (d->labels[i] >= 0 && d->labels[i] < k)) i++;
    char file[300];
    labels_file(d, file, sizeof file);
    return SH_FAIL(SHOAL_ERR_INVALID, "labels file %s holds label %d (image %d) but %s outputs %d classes "
                   "(0..%d); fix the labels, or make the last layer's output %d", file, (int)d->labels[i], i, cfg,
                   k, k - 1, d->nclasses);
}

shoal_result sh_eval_sums(sh_net *net, sh_loader *loader, float *x, int32_t *y, int64_t *nimages,
                          int64_t *ncorrect, double *loss_sum)
{
    SH_TRY(sh_loader_seek(loader, 0, 0));
    int64_t nsteps = sh_loader_steps_per_epoch(loader);
    *nimages = *ncorrect = 0;
    *loss_sum = 0; /* per-image losses summed in double: 10^4 images lose no digits */
    for (int64_t k = 0; k < nsteps; k++) {
        int n = 0;
        SH_TRY(sh_loader_next(loader, x, y, &n));
        if (n <= 0) continue;
        SH_TRY(sh_net_forward(net, x, n, 0));
        *loss_sum += (double)sh_net_loss(net, y) * n;
        *ncorrect += sh_net_correct(net, y);
        *nimages += n;
    }
    return SHOAL_OK;
}

shoal_result sh_eval_sums_pass(sh_strategy *s, sh_loader *loader, float *x, int32_t *y, int64_t *nimages,
                               int64_t *ncorrect, double *loss_sum)
{
    SH_TRY(sh_loader_seek(loader, 0, 0));
    int64_t nsteps = sh_loader_steps_per_epoch(loader);
    *nimages = *ncorrect = 0;
    *loss_sum = 0;
    for (int64_t k = 0; k < nsteps; k++) {
        int n = 0, hits = 0;
        float loss = 0;
        SH_TRY(sh_loader_next(loader, x, y, &n));
        SH_TRY(s->ops->pass(s, x, y, n, 0, &loss, &hits));
        *loss_sum += (double)loss * n;
        *ncorrect += hits;
        *nimages += n;
    }
    return SHOAL_OK;
}

shoal_result sh_eval_run(sh_net *net, sh_loader *loader, float *x, int32_t *y,
                         double *accuracy, double *loss)
{
    int64_t nimages = 0, ncorrect = 0;
    double loss_sum = 0;
    SH_TRY(sh_eval_sums(net, loader, x, y, &nimages, &ncorrect, &loss_sum));
    if (nimages == 0) return SH_FAIL(SHOAL_ERR_INVALID, "evaluation: the dataset has no images");
    *accuracy = (double)ncorrect / (double)nimages;
    *loss = loss_sum / (double)nimages;
    return SHOAL_OK;
}
