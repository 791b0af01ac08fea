/* test_train_json.c — proves src/train/train_json.c: shoal_train_report_json writes one JSON
 * object (read back with src/io/json.c) holding every field of the report that --json
 * prints, each section only when the report has it; the hybrid's bytes and the gradients'
 * keep apart; a buffer too small is refused naming the size the document needs, and the
 * documented size holds the largest report. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "io/json.h"
#include "shoal/train.h"

static char buf[SHOAL_TRAIN_REPORT_JSON_NBYTES];

/* A report with every section and distinct values. */
static void full_report(shoal_train_report *r, int nhistory, int nstages)
{
    memset(r, 0, sizeof *r);
    r->test_accuracy = 0.875;
    r->train_loss = 0.25;
    r->test_loss = 0.375;
    r->images_per_s = 1234.5;
    r->epochs = 2.5;
    r->steps = 40;
    r->seconds = 12.125;
    r->peak_rss_mb = 77.5;
    r->stopped = 1;
    r->threads = 3;
    r->text = 1;
    r->train_bpc = 1.5;
    r->test_bpc = 1.75;
    r->has_compression = 1;
    snprintf(r->compression.spec, sizeof r->compression.spec, "topk:0.01");
    r->compression.sfb = 1;
    r->compression.sfb_layers = 2;
    r->compression.bytes_sent_per_step = 1000;
    r->compression.dense_bytes_per_step = 8000;
    r->compression.ratio = 8;
    r->compression.residual_norm = 0.5;
    r->has_hybrid = 1;
    snprintf(r->hybrid.scheme, sizeof r->hybrid.scheme, "vertical");
    r->hybrid.bytes_sent_per_step = 5000;
    r->hybrid.activity_bytes_per_step = 3000;
    r->hybrid.comm_ms = 1.25;
    r->hybrid.fused_update_ms = 0.5;
    r->hybrid.rest_update_ms = 0.25;
    r->has_stages = 1;
    r->nstages = nstages;
    for (int k = 0; k < nstages; k++)
        r->stages[k] = (shoal_train_stage){2 * k, 2 * k + 1, 1.0 + k, 2.0 + k, 0.5, 0.25, 4.0 + k, 0.125};
    r->nhistory = nhistory;
    for (int i = 0; i < nhistory; i++)
        r->history[i] = (shoal_train_eval){10 * (i + 1), 0.5 * (i + 1), 3.0 * (i + 1), 1.0 / (i + 1), 0.5, 0.75};
}

static void every_field_reads_back(void)
{
    static shoal_train_report r;
    full_report(&r, 3, 2);
    CHECK_OK(shoal_train_report_json(&r, buf, sizeof buf));
    CHECK(buf[0] == '{' && !strchr(buf, '\n'), "one line, one object: %s", buf);
    char err[160] = "";
    sh_json *d = sh_json_parse(buf, err, sizeof err);
    CHECK(d != NULL, "not JSON (%s): %s", err, buf);
    if (!d) return;
    const struct {
        const char *key;
        double want;
    } nums[] = {{"accuracy", 0.875}, {"loss", 0.25}, {"test_loss", 0.375}, {"images_per_s", 1234.5},
                {"epochs", 2.5}, {"steps", 40}, {"seconds", 12.125}, {"peak_rss_mb", 77.5}, {"threads", 3},
                {"train_bpc", 1.5}, {"test_bpc", 1.75}, {"chars_per_s", 1234.5}, {"sfb_layers", 2},
                {"gradient_bytes_sent_per_step", 1000}, {"dense_bytes_per_step", 8000}, {"compression_ratio", 8},
                {"residual_norm", 0.5}, {"bytes_sent_per_step", 5000}, {"activity_bytes_per_step", 3000},
                {"comm_ms", 1.25}, {"fused_update_ms", 0.5}, {"rest_update_ms", 0.25}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        CHECK(sh_json_num(d, nums[i].key, NAN) == nums[i].want, "%s: %g, want %g", nums[i].key,
              sh_json_num(d, nums[i].key, NAN), nums[i].want);
    const char *compress = sh_json_str(d, "compress"), *hybrid = sh_json_str(d, "hybrid");
    CHECK(compress && !strcmp(compress, "topk:0.01"), "compress %s", compress ? compress : "(none)");
    CHECK(hybrid && !strcmp(hybrid, "vertical"), "hybrid %s", hybrid ? hybrid : "(none)");
    const sh_json *stopped = sh_json_get(d, "stopped"), *sfb = sh_json_get(d, "sfb");
    CHECK(stopped && stopped->kind == SH_JSON_BOOL && stopped->num == 1, "stopped");
    CHECK(sfb && sfb->kind == SH_JSON_BOOL && sfb->num == 1, "sfb");
    const sh_json *h = sh_json_get(d, "history"), *p = sh_json_get(d, "pipeline");
    CHECK(h && h->kind == SH_JSON_ARR && h->n == 3, "history of %zu", h ? h->n : 0);
    for (size_t i = 0; h && i < h->n; i++) {
        const sh_json *e = &h->items[i];
        CHECK(sh_json_num(e, "step", 0) == 10.0 * (double)(i + 1) && sh_json_num(e, "epoch", 0) == 0.5 * (double)(i + 1)
              && sh_json_num(e, "seconds", 0) == 3.0 * (double)(i + 1) && sh_json_num(e, "test_accuracy", 0) == 0.5
              && sh_json_num(e, "test_loss", 0) == 0.75 && fabs(sh_json_num(e, "train_loss", 0) - 1.0 / (double)(i + 1)) < 1e-6,
              "history[%zu]", i);
    }
    CHECK(p && p->kind == SH_JSON_ARR && p->n == 2, "pipeline of %zu", p ? p->n : 0);
    for (size_t k = 0; p && k < p->n; k++) {
        const sh_json *s = &p->items[k];
        CHECK(sh_json_num(s, "stage", -1) == (double)k && sh_json_num(s, "first_layer", -1) == 2.0 * (double)k
              && sh_json_num(s, "last_layer", -1) == 2.0 * (double)k + 1 && sh_json_num(s, "forward_ms", 0) == 1.0 + (double)k
              && sh_json_num(s, "backward_ms", 0) == 2.0 + (double)k && sh_json_num(s, "bubble_ms", 0) == 0.5
              && sh_json_num(s, "comm_ms", 0) == 0.25 && sh_json_num(s, "pass_ms", 0) == 4.0 + (double)k
              && sh_json_num(s, "bubble_share", 0) == 0.125, "stage %zu", k);
    }
    sh_json_free(d);
}

static void sections_appear_only_when_the_report_has_them(void)
{
    static shoal_train_report r;
    full_report(&r, 0, 0);
    r.text = r.has_compression = r.has_hybrid = r.has_stages = 0;
    r.stopped = 0;
    CHECK_OK(shoal_train_report_json(&r, buf, sizeof buf));
    const char *absent[] = {"train_bpc", "chars_per_s", "compress", "sfb", "hybrid", "pipeline",
                            "bytes_sent_per_step", "comm_ms"};
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, "\"%s\"", absent[i]);
        CHECK(!strstr(buf, key), "%s in a plain report: %s", key, buf);
    }
    CHECK(strstr(buf, "\"stopped\":false") && strstr(buf, "\"history\":[]}"), "%s", buf);
    r.has_compression = 1; /* without --hybrid, the gradients' bytes are the bytes sent */
    CHECK_OK(shoal_train_report_json(&r, buf, sizeof buf));
    CHECK(strstr(buf, "\"bytes_sent_per_step\":1000") && !strstr(buf, "gradient_"), "%s", buf);
}

static void a_small_buffer_is_refused_with_the_size_needed(void)
{
    static shoal_train_report r;
    full_report(&r, 5, 3);
    CHECK_OK(shoal_train_report_json(&r, buf, sizeof buf));
    size_t need = strlen(buf) + 1;
    static char small[SHOAL_TRAIN_REPORT_JSON_NBYTES];
    CHECK_RC(shoal_train_report_json(&r, small, need - 1), SHOAL_ERR_INVALID);
    char want[64];
    snprintf(want, sizeof want, "needs %zu bytes", need);
    CHECK(strstr(shoal_last_error_message(), want), "\"%s\", want \"%s\"", shoal_last_error_message(), want);
    CHECK(small[0] == 0, "a refused document is left half written: %.40s", small);
    CHECK_OK(shoal_train_report_json(&r, small, need));
    CHECK(!strcmp(small, buf), "the exact size gives another document");
    CHECK_RC(shoal_train_report_json(NULL, buf, sizeof buf), SHOAL_ERR_INVALID);
    CHECK_RC(shoal_train_report_json(&r, NULL, 10), SHOAL_ERR_INVALID);
}

static void the_documented_size_holds_the_largest_report(void)
{
    static shoal_train_report r;
    full_report(&r, SHOAL_TRAIN_HISTORY_MAX, SHOAL_TRAIN_STAGES_MAX);
    /* the widest numbers below 1e9 each field can print */
    r.images_per_s = r.test_loss = r.train_loss = r.seconds = 999999999.123;
    r.steps = INT64_MAX;
    for (int i = 0; i < SHOAL_TRAIN_HISTORY_MAX; i++)
        r.history[i] = (shoal_train_eval){INT64_MAX, -999999999.5, 999999999.5, -999999999.5, -999999999.5, -999999999.5};
    for (int k = 0; k < SHOAL_TRAIN_STAGES_MAX; k++)
        r.stages[k] = (shoal_train_stage){INT32_MAX, INT32_MIN, -999999999.5, -999999999.5, -999999999.5, -999999999.5,
                                          -999999999.5, -999999999.5};
    CHECK_OK(shoal_train_report_json(&r, buf, sizeof buf));
    char err[160] = "";
    sh_json *d = sh_json_parse(buf, err, sizeof err);
    CHECK(d && sh_json_get(d, "history")->n == SHOAL_TRAIN_HISTORY_MAX, "%s", err);
    sh_json_free(d);
}

int main(void)
{
    check_begin("test_train_json", 30);
    RUN(every_field_reads_back);
    RUN(sections_appear_only_when_the_report_has_them);
    RUN(a_small_buffer_is_refused_with_the_size_needed);
    RUN(the_documented_size_holds_the_largest_report);
    return check_end();
}
