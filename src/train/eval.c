/* eval.c — accuracy and mean loss over a dataset, batch by batch, in inference mode, through
 * the net or a strategy's pass.
 * Not here: the loader's order (src/data), training (step.c), summing over ranks (trainer.c).
 * Proved by tests/train/test_trainer.c; the pass by test_pipeline.c and test_hybrid.c. */
#include "train/eval.h"

#include "base/err.h"

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
