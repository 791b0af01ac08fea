/* train_json.c — a training report as the one JSON object `shoal train --json` prints
 * (shoal_train_report_json): the result, text and compression figures, a hybrid's bytes, a
 * profiled pipeline's stages and the history of evaluations.
 * Not here: the report itself (train_api.c), reading JSON back (src/io/json.c).
 * Proved by tests/train/test_api.c (parsed back field by field) and tests/cli/test_train_*.c. */
#include "shoal/train.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "base/err.h"

/* The document so far: len counts every byte written or that would have been. */
typedef struct {
    char *buf;
    size_t cap, len;
} out_text;

static void put(out_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(out_text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = t->len < t->cap ? t->cap - t->len : 0;
    int n = vsnprintf(room ? t->buf + t->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) t->len += (size_t)n;
}

static void put_parts(out_text *t, const shoal_train_report *r)
{
    if (r->has_compression) /* --hybrid reports its bytes sent (activities too) below: here the gradients' */
        put(t, ",\"compress\":\"%s\",\"sfb\":%s,\"sfb_layers\":%d,\"%sbytes_sent_per_step\":%.0f,"
            "\"dense_bytes_per_step\":%.0f,\"compression_ratio\":%.3f,\"residual_norm\":%.6g",
            r->compression.spec, r->compression.sfb ? "true" : "false", r->compression.sfb_layers,
            r->has_hybrid ? "gradient_" : "", r->compression.bytes_sent_per_step,
            r->compression.dense_bytes_per_step, r->compression.ratio, r->compression.residual_norm);
    if (r->has_hybrid)
        put(t, ",\"hybrid\":\"%s\",\"bytes_sent_per_step\":%.0f,\"activity_bytes_per_step\":%.0f,"
            "\"comm_ms\":%.3f,\"fused_update_ms\":%.6g,\"rest_update_ms\":%.6g",
            r->hybrid.scheme, r->hybrid.bytes_sent_per_step, r->hybrid.activity_bytes_per_step, r->hybrid.comm_ms,
            r->hybrid.fused_update_ms, r->hybrid.rest_update_ms);
    if (r->has_hogwild)
        put(t, ",\"hogwild\":{\"updates\":%" PRId64 ",\"staleness_mean\":%.4f,\"staleness_max\":%" PRId64 "}",
            r->hogwild.updates, r->hogwild.staleness_mean, r->hogwild.staleness_max);
    if (r->has_quorum)
        put(t, ",\"quorum\":{\"fraction\":%.4f,\"ranks\":%d,\"updates\":%" PRId64 ",\"fresh\":%" PRId64
            ",\"late\":%" PRId64 "}", r->quorum.fraction, r->quorum.ranks, r->quorum.updates, r->quorum.fresh,
            r->quorum.late);
    if (r->has_stages) {
        put(t, ",\"pipeline\":[");
        for (int k = 0; k < r->nstages && k < SHOAL_TRAIN_STAGES_MAX; k++) {
            const shoal_train_stage *q = &r->stages[k];
            put(t, "%s{\"stage\":%d,\"first_layer\":%d,\"last_layer\":%d,\"forward_ms\":%.3f,"
                "\"backward_ms\":%.3f,\"bubble_ms\":%.3f,\"comm_ms\":%.3f,\"pass_ms\":%.3f,"
                "\"bubble_share\":%.4f}", k ? "," : "", k, q->first_layer, q->last_layer, q->forward_ms,
                q->backward_ms, q->bubble_ms, q->comm_ms, q->pass_ms, q->bubble_share);
        }
        put(t, "]");
    }
}

shoal_result shoal_train_report_json(const shoal_train_report *r, char *buf, size_t nbytes)
{
    if (!r || !buf) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_train_report_json: %s is NULL", r ? "buf" : "r");
    out_text t = {buf, nbytes, 0};
    put(&t, "{\"accuracy\":%.6f,\"loss\":%.6f,\"test_loss\":%.6f,\"images_per_s\":%.1f,"
        "\"epochs\":%.4f,\"steps\":%" PRId64 ",\"seconds\":%.3f,\"peak_rss_mb\":%.1f,"
        "\"stopped\":%s,\"threads\":%d",
        r->test_accuracy, r->train_loss, r->test_loss, r->images_per_s, r->epochs, r->steps, r->seconds,
        r->peak_rss_mb, r->stopped ? "true" : "false", r->threads);
    if (r->text) /* character-level text: an image is a character */
        put(&t, ",\"train_bpc\":%.6f,\"test_bpc\":%.6f,\"chars_per_s\":%.1f", r->train_bpc, r->test_bpc,
            r->images_per_s);
    if (r->streamed)
        put(&t, ",\"data_wait_s\":%.4f,\"data_wait_share\":%.5f,\"bad_files\":%" PRId64, r->data_wait_s,
            r->seconds > 0 ? r->data_wait_s / r->seconds : 0.0, r->bad_files);
    put_parts(&t, r);
    if (r->elastic) {
        put(&t, ",\"elastic\":{\"changes\":%d,\"ranks_left\":%d,\"ranks_joined\":%d,\"world\":%d,"
            "\"keep_ms\":%.4f,\"log\":[", r->nchanges, r->ranks_left, r->ranks_joined, r->world, r->keep_ms);
        for (int i = 0; i < r->nchanges && i < SHOAL_TRAIN_CHANGES_MAX; i++) {
            const shoal_train_change *c = &r->changes[i];
            put(&t, "%s{\"step\":%" PRId64 ",\"world\":%d,\"pause_s\":%.3f,\"steps_redone\":%d,\"left\":[",
                i ? "," : "", c->step, c->world, c->pause_s, c->steps_redone);
            for (int k = 0; k < c->nleft && k < SHOAL_TRAIN_CHANGE_RANKS; k++) put(&t, "%s%d", k ? "," : "", c->left[k]);
            put(&t, "],\"joined\":[");
            for (int k = 0; k < c->njoined && k < SHOAL_TRAIN_CHANGE_RANKS; k++)
                put(&t, "%s%d", k ? "," : "", c->joined[k]);
            put(&t, "]}");
        }
        put(&t, "]}");
    }
    put(&t, ",\"history\":[");
    for (int i = 0; i < r->nhistory && i < SHOAL_TRAIN_HISTORY_MAX; i++) {
        const shoal_train_eval *h = &r->history[i];
        put(&t, "%s{\"step\":%" PRId64 ",\"epoch\":%.4f,\"seconds\":%.3f,\"train_loss\":%.6f,"
            "\"test_accuracy\":%.6f,\"test_loss\":%.6f}", i ? "," : "", h->step, h->epoch, h->seconds,
            h->train_loss, h->test_accuracy, h->test_loss);
    }
    put(&t, "]}");
    if (t.len >= nbytes) {
        if (nbytes) buf[0] = 0;
        return SH_FAIL(SHOAL_ERR_INVALID, "shoal_train_report_json: the document needs %zu bytes, buf has %zu",
                       t.len + 1, nbytes);
    }
    return SHOAL_OK;
}
