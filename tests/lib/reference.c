/* reference.c — one process trained the plain way, for the parallel-training tests (see
 * reference.h).
 * Not here: the parallel runs compared with it (tests/train/test_pipeline.c, test_tensor.c,
 * test_hybrid.c).
 * Proved through those tests: a wrong yardstick fails their comparisons. */
#include "reference.h"

#include <math.h>
#include <string.h>

#include "nn/net.h"
#include "train/snapshot.h"

shoal_result sh_test_train_one(const sh_train_opts *o, sh_trainer **out, sh_train_report *rep)
{
    *out = NULL;
    shoal_result rc = sh_trainer_create(o, out);
    return rc == SHOAL_OK ? sh_trainer_run(*out, rep) : rc;
}

shoal_result sh_test_write_one(const sh_train_opts *o)
{
    sh_trainer *t = NULL;
    shoal_result rc = sh_test_train_one(o, &t, NULL);
    sh_trainer_destroy(t);
    return rc;
}

double sh_test_rel_diff(const float *p, const float *q, size_t count)
{
    double diff = 0, norm = 0;
    for (size_t i = 0; i < count; i++) {
        diff += ((double)p[i] - q[i]) * ((double)p[i] - q[i]);
        norm += (double)q[i] * q[i];
    }
    return sqrt(diff / (norm > 0 ? norm : 1));
}

shoal_result sh_test_resume_one(const sh_train_opts *o, const char *ckpt, double *rel,
                                int64_t *steps_done)
{
    sh_train_opts ro = *o;
    sh_trainer *back = NULL, *whole = NULL;
    ro.resume_path = ckpt;
    shoal_result rc = sh_test_train_one(&ro, &back, NULL);
    if (rc == SHOAL_OK) rc = sh_test_train_one(o, &whole, NULL);
    if (rc == SHOAL_OK) {
        sh_net *a = sh_trainer_net(back), *b = sh_trainer_net(whole);
        *rel = sh_test_rel_diff(sh_net_params(a), sh_net_params(b), sh_net_nparams(b));
        *steps_done = sh_trainer_steps_done(back);
    }
    sh_trainer_destroy(whole);
    sh_trainer_destroy(back);
    return rc;
}

shoal_result sh_test_darknet_against(const char *cfg, const char *weights, const char *ckpt, const float *q,
                                     size_t count, int *same, double *rel)
{
    sh_net *dn = NULL, *ck = NULL;
    shoal_result rc = sh_net_load(cfg, 1, 1, &dn);
    if (rc == SHOAL_OK) rc = sh_net_load(cfg, 2, 2, &ck); /* another seed: nothing left by chance */
    if (rc == SHOAL_OK) rc = sh_snapshot_load_weights(dn, weights);
    if (rc == SHOAL_OK) rc = sh_snapshot_load_weights(ck, ckpt);
    if (rc == SHOAL_OK && sh_net_nparams(dn) != count) rc = SHOAL_ERR_INVALID;
    if (rc == SHOAL_OK) {
        size_t ns = 0;
        const float *sd = sh_net_stats(dn, &ns), *sc = sh_net_stats(ck, NULL);
        *same = memcmp(sh_net_params(dn), sh_net_params(ck), count * sizeof(float)) == 0 &&
                (!ns || memcmp(sd, sc, ns * sizeof(float)) == 0);
        *rel = sh_test_rel_diff(sh_net_params(dn), q, count);
    }
    sh_net_destroy(ck);
    sh_net_destroy(dn);
    return rc;
}
