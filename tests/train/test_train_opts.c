/* test_train_opts.c — proves src/train/train_opts.c and the option checks of train_api.c:
 * shoal_train_opts_set takes every option shoal train has by its flag name (a table here
 * names each, so a new option without a case fails), with a good value landing in its
 * field and a bad one refused in one line naming the option and the value, o unchanged;
 * unknown names get the nearest; strings are copies that fini frees; shoal_train_opts_check
 * refuses options that do not fit together, with shoal train's words; every option says
 * whether the ranks of a job must share it, in words the ranks compare. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "shoal/train.h"
#include "train/tiny_data.h"
#include "train/train_opts.h"

typedef enum { T_INT, T_I64, T_U64, T_DBL, T_STR, T_SWITCH, T_LAYOUT } field_type;

/* One option: a good value and what it sets, a bad value (NULL: none is bad but a missing
 * one, which every valued option refuses). */
typedef struct {
    const char *name, *good;
    field_type type;
    size_t offset;
    double want;              /* T_INT .. T_DBL, T_SWITCH, T_LAYOUT */
    const char *bad;
} opt_case;

#define AT(f) offsetof(shoal_train_opts, f)

static const opt_case cases[] = {
    {"data", "some/dir", T_STR, AT(data_dir), 0, NULL},
    {"test-data", "val", T_STR, AT(test_data), 0, NULL},
    {"strict-data", "1", T_SWITCH, AT(strict_data), 1, "2"},
    {"data-threads", "3", T_INT, AT(data_threads), 3, "0"},
    {"data-prefetch", "4", T_INT, AT(data_prefetch), 4, "0"},
    {"target", "input", T_STR, AT(target), 0, NULL},
    {"batch", "32", T_INT, AT(batch), 32, "0"},
    {"seed", "7", T_U64, AT(seed), 7, "-1"},
    {"threads", "2", T_INT, AT(threads), 2, "2000"},
    {"weights", "w.ckpt", T_STR, AT(weights_path), 0, NULL},
    {"epochs", "3", T_INT, AT(epochs), 3, "x3"},
    {"max-steps", "100", T_I64, AT(max_steps), 100, "0"},
    {"time-limit", "30", T_DBL, AT(time_limit_s), 30, "1.5"},
    {"save", "a.ckpt", T_STR, AT(save_path), 0, NULL},
    {"save-every", "10", T_I64, AT(save_every_steps), 10, "0"},
    {"resume", "r.ckpt", T_STR, AT(resume_path), 0, NULL},
    {"save-darknet", "d.weights", T_STR, AT(save_darknet_path), 0, NULL},
    {"solver", "solver.prototxt", T_STR, AT(solver_path), 0, NULL},
    {"history", "20", T_INT, AT(lbfgs_history), 20, "0"},
    {"save-caffe", "m.caffemodel", T_STR, AT(save_caffe_path), 0, NULL},
    {"quiet", "true", T_SWITCH, AT(quiet), 1, "maybe"},
    {"json", "1", T_SWITCH, AT(json), 1, "2"},
    {"profile", NULL, T_SWITCH, AT(profile), 1, "yes please"},
    {"logdir", "logs", T_STR, AT(logdir), 0, NULL},
    {"run-name", "first", T_STR, AT(run_name), 0, NULL},
    {"log-histograms", "5", T_I64, AT(histogram_every_steps), 5, "0"},
    {"timeline", "t.json", T_STR, AT(timeline_path), 0, NULL},
    {"timeline-steps", "2:5", T_STR, AT(timeline_steps), 0, "5:3"},
    {"scaling", "strong", T_INT, AT(strong_scaling), 1, "big"},
    {"lr-scaling", "linear", T_INT, AT(lr_linear), 1, "fast"},
    {"elastic", "2", T_INT, AT(elastic_min), 2, "3:2"},
    {"bucket-mb", "2.5", T_DBL, AT(bucket_mb), 2.5, "0"},
    {"parallel", "auto", T_INT, AT(parallel_auto), 1, "manual"},
    {"pipeline", "2", T_INT, AT(pipeline_stages), 2, "0"},
    {"micro-batches", "4", T_INT, AT(micro_batches), 4, "-4"},
    {"tensor-parallel", "2", T_INT, AT(tensor_ranks), 2, "two"},
    {"hybrid", "vertical", T_STR, AT(hybrid), 0, "diagonal"},
    {"compress", "topk:0.01", T_STR, AT(compress), 0, "gzip"},
    {"sfb", "on", T_SWITCH, AT(sfb), 1, "sometimes"},
    {"hogwild", "true", T_SWITCH, AT(hogwild), 1, "racy"},
    {"quorum", "0.75", T_DBL, AT(quorum), 0.75, "1.5"},
    {"ps", "true", T_LAYOUT, AT(layout), SHOAL_TRAIN_PARAM_SERVER, "perhaps"},
    {"servers", "2", T_INT, AT(nservers), 2, "0"},
    {"consistency", "ssp", T_STR, AT(consistency), 0, "eventual"},
    {"staleness", "5", T_INT, AT(staleness), 5, "-1"},
    {"push-every", "2", T_INT, AT(push_every), 2, "0"},
    {"pull-every", "3", T_INT, AT(pull_every), 3, "0"},
};
#define NCASES (sizeof cases / sizeof cases[0])

static char dir[256];

static double field_value(const shoal_train_opts *o, const opt_case *c)
{
    const char *at = (const char *)o + c->offset;
    switch (c->type) {
    case T_INT:
    case T_SWITCH: return *(const int *)at;
    case T_I64: return (double)*(const int64_t *)at;
    case T_U64: return (double)*(const uint64_t *)at;
    case T_DBL: return *(const double *)at;
    case T_LAYOUT: return *(const shoal_train_layout *)at;
    case T_STR: break;
    }
    return 0;
}

static void every_option_has_a_case_here(void)
{
    size_t n = 0;
    for (const shoal_train_option *op; (op = shoal_train_option_at(n)); n++) {
        int found = 0;
        for (size_t k = 0; k < NCASES; k++) found += !strcmp(cases[k].name, op->name);
        CHECK(found == 1, "option \"%s\" has %d cases in this test; add one", op->name, found);
        CHECK(op->group && op->help && strlen(op->help) > 10, "option %s lacks its heading or help", op->name);
        int is_switch = 0;
        for (size_t k = 0; k < NCASES; k++)
            if (!strcmp(cases[k].name, op->name)) is_switch = cases[k].type == T_SWITCH || cases[k].type == T_LAYOUT;
        CHECK((op->arg == NULL) == is_switch, "%s: arg %s for a %s", op->name, op->arg ? op->arg : "NULL",
              is_switch ? "switch" : "valued option");
    }
    CHECK(n == NCASES, "%zu options, %zu cases", n, NCASES);
    CHECK(shoal_train_option_at(n) == NULL && shoal_train_option_at(n + 100) == NULL, "past the end");
}

static void good_values_land_in_their_fields(void)
{
    for (size_t k = 0; k < NCASES; k++) {
        const opt_case *c = &cases[k];
        shoal_train_opts o;
        shoal_train_opts_default(&o);
        CHECK_OK(shoal_train_opts_set(&o, c->name, c->good));
        if (c->type == T_STR) {
            const char *got = *(const char *const *)((const char *)&o + c->offset);
            CHECK(got && !strcmp(got, c->good) && got != c->good, "%s: field \"%s\", want a copy of \"%s\"", c->name,
                  got ? got : "(null)", c->good);
        } else {
            CHECK(field_value(&o, c) == c->want, "%s %s: field %g, want %g", c->name, c->good ? c->good : "(NULL)",
                  field_value(&o, c), c->want);
        }
        shoal_train_opts_fini(&o);
    }
}

static void bad_and_missing_values_are_refused_naming_the_option(void)
{
    for (size_t k = 0; k < NCASES; k++) {
        const opt_case *c = &cases[k];
        shoal_train_opts o, before;
        shoal_train_opts_default(&o);
        char flag[64];
        snprintf(flag, sizeof flag, "--%s", c->name);
        if (c->bad) {
            before = o;
            CHECK_RC(shoal_train_opts_set(&o, c->name, c->bad), SHOAL_ERR_INVALID);
            const char *m = shoal_last_error_message();
            CHECK(strstr(m, flag) && strstr(m, c->bad), "%s %s: message \"%s\"", c->name, c->bad, m);
            CHECK(memcmp(&o, &before, sizeof o) == 0, "%s %s: the options changed", c->name, c->bad);
        }
        if (c->type != T_SWITCH && c->type != T_LAYOUT) {
            CHECK_RC(shoal_train_opts_set(&o, c->name, NULL), SHOAL_ERR_INVALID);
            const char *m = shoal_last_error_message();
            CHECK(strstr(m, flag) && strstr(m, "needs a value"), "%s without a value: \"%s\"", c->name, m);
        }
        shoal_train_opts_fini(&o);
    }
}

static void switches_turn_on_and_off(void)
{
    shoal_train_opts o;
    shoal_train_opts_default(&o);
    const char *on[] = {NULL, "1", "true", "yes", "on"}, *off[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 5; i++) {
        o.quiet = 0;
        CHECK_OK(shoal_train_opts_set(&o, "quiet", on[i]));
        CHECK(o.quiet == 1, "quiet %s", on[i] ? on[i] : "NULL");
    }
    for (size_t i = 0; i < 4; i++) {
        CHECK_OK(shoal_train_opts_set(&o, "quiet", off[i]));
        CHECK(o.quiet == 0, "quiet %s", off[i]);
    }
    CHECK_OK(shoal_train_opts_set(&o, "ps", "true"));
    CHECK_OK(shoal_train_opts_set(&o, "ps", "false"));
    CHECK(o.layout == SHOAL_TRAIN_DATA_PARALLEL, "ps off: layout %d", (int)o.layout);
    shoal_train_opts_fini(&o);
}

static void names_take_dashes_or_underscores_and_unknown_ones_get_the_nearest(void)
{
    shoal_train_opts o;
    shoal_train_opts_default(&o);
    CHECK_OK(shoal_train_opts_set(&o, "micro_batches", "4"));
    CHECK_OK(shoal_train_opts_set(&o, "--max-steps", "9"));
    CHECK(o.micro_batches == 4 && o.max_steps == 9, "micro %d steps %lld", o.micro_batches, (long long)o.max_steps);
    const struct {
        const char *typo, *nearest;
    } typos[] = {{"epoch", "epochs"}, {"micro-bacthes", "micro-batches"}, {"lr_scale", "lr-scaling"},
                 {"tensor", "tensor-parallel"}, {"pipelines", "pipeline"}, {"zzz", NULL}};
    for (size_t i = 0; i < sizeof typos / sizeof typos[0]; i++) {
        CHECK_RC(shoal_train_opts_set(&o, typos[i].typo, "1"), SHOAL_ERR_INVALID);
        const char *m = shoal_last_error_message();
        char want[96];
        snprintf(want, sizeof want, "did you mean \"%s\"", typos[i].nearest ? typos[i].nearest : "");
        CHECK(strstr(m, "unknown option") && strstr(m, typos[i].typo) && (!typos[i].nearest || strstr(m, want)),
              "%s: \"%s\"", typos[i].typo, m);
    }
    CHECK_RC(shoal_train_opts_set(&o, "", "1"), SHOAL_ERR_INVALID);
    CHECK_RC(shoal_train_opts_set(&o, "--", "1"), SHOAL_ERR_INVALID);
    CHECK_RC(shoal_train_opts_set(&o, NULL, "1"), SHOAL_ERR_INVALID);
    CHECK_RC(shoal_train_opts_set(NULL, "epochs", "1"), SHOAL_ERR_INVALID);
    shoal_train_opts_fini(&o);
}

static void strings_are_copies_until_fini(void)
{
    shoal_train_opts o, fresh;
    shoal_train_opts_default(&o);
    shoal_train_opts_default(&fresh);
    char buf[32];
    snprintf(buf, sizeof buf, "first.ckpt");
    CHECK_OK(shoal_train_opts_set(&o, "save", buf));
    snprintf(buf, sizeof buf, "changed");
    CHECK(o.save_path && !strcmp(o.save_path, "first.ckpt"), "save_path follows the caller's buffer: %s", o.save_path);
    CHECK_OK(shoal_train_opts_set(&o, "save", "second.ckpt")); /* the first copy is freed (ASan sees a leak else) */
    CHECK(!strcmp(o.save_path, "second.ckpt"), "%s", o.save_path);
    CHECK_OK(shoal_train_opts_set(&o, "consistency", "async"));
    CHECK_OK(shoal_train_opts_set(&o, "hybrid", "broadcast"));
    CHECK(o.copies != NULL, "no copies kept");
    shoal_train_opts_fini(&o);
    CHECK(memcmp(&o, &fresh, sizeof o) == 0, "fini does not leave the defaults");
    shoal_train_opts_fini(NULL);
}

/* --solver: "lbfgs" exactly chooses L-BFGS; any other value stays a Caffe solver file. */
static void solver_lbfgs_chooses_lbfgs_and_other_values_name_a_caffe_solver(void)
{
    shoal_train_opts o;
    shoal_train_opts_default(&o);
    CHECK_OK(shoal_train_opts_set(&o, "solver", "lbfgs"));
    CHECK(o.lbfgs == 1 && o.solver_path == NULL, "lbfgs: lbfgs %d solver_path %s", o.lbfgs,
          o.solver_path ? o.solver_path : "NULL");
    shoal_train_opts_fini(&o);
    const char *files[] = {"./lbfgs", "lbfgs.prototxt", "LBFGS"};
    for (size_t i = 0; i < 3; i++) {
        shoal_train_opts_default(&o);
        CHECK_OK(shoal_train_opts_set(&o, "solver", files[i]));
        CHECK(o.lbfgs == 0 && o.solver_path && !strcmp(o.solver_path, files[i]), "%s: lbfgs %d solver_path %s",
              files[i], o.lbfgs, o.solver_path ? o.solver_path : "NULL");
        shoal_train_opts_fini(&o);
    }
}

/* opts_check on o (cfg_path set to the tiny mlp) refuses with a message holding want. */
static void refused(shoal_train_opts *o, const char *what, const char *want)
{
    shoal_result rc = shoal_train_opts_check(o);
    CHECK(rc == SHOAL_ERR_INVALID && strstr(shoal_last_error_message(), want), "%s: rc %d \"%s\", want \"%s\"", what,
          (int)rc, rc ? shoal_last_error_message() : "", want);
}

/* name=value pairs on fresh options over the tiny mlp, then refused with want. */
static void refuse_set(const char *const *kv, const char *want)
{
    char mlp[600];
    snprintf(mlp, sizeof mlp, "%s/mlp.cfg", dir);
    shoal_train_opts o;
    shoal_train_opts_default(&o);
    o.cfg_path = mlp;
    for (size_t i = 0; kv[i]; i += 2) CHECK_OK(shoal_train_opts_set(&o, kv[i], kv[i + 1]));
    refused(&o, kv[0], want);
    shoal_train_opts_fini(&o);
}

/* MIN, or MIN:MAX with MIN <= MAX; anything else names the option and the text. */
static void elastic_takes_min_and_max(void)
{
    static const struct {
        const char *text;
        int min, max; /* -1: refused */
    } v[] = {{"2", 2, 0}, {"2:4", 2, 4}, {"3:3", 3, 3}, {"1", 1, 0}, {"0", -1, -1}, {"2:", -1, -1}, {":3", -1, -1},
             {"4:2", -1, -1}, {"2:4x", -1, -1}, {"5000", -1, -1}, {"-1", -1, -1}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        shoal_train_opts o;
        shoal_train_opts_default(&o);
        shoal_result rc = shoal_train_opts_set(&o, "elastic", v[i].text);
        if (v[i].min < 0) {
            CHECK(rc == SHOAL_ERR_INVALID && strstr(shoal_last_error_message(), "--elastic") &&
                  o.elastic_min == 0 && o.elastic_max == 0, "--elastic %s was taken", v[i].text);
        } else {
            CHECK(rc == SHOAL_OK && o.elastic_min == v[i].min && o.elastic_max == v[i].max,
                  "--elastic %s: %d:%d (%s)", v[i].text, o.elastic_min, o.elastic_max, shoal_last_error_message());
        }
        shoal_train_opts_fini(&o);
    }
}

static void check_refuses_options_that_do_not_fit(void)
{
    shoal_train_opts o;
    shoal_train_opts_default(&o);
    refused(&o, "no cfg", "cfg_path");
    CHECK_RC(shoal_train_opts_check(NULL), SHOAL_ERR_INVALID);
    refuse_set((const char *const[]){"hybrid", "broadcast", "ps", NULL, NULL}, "--hybrid is its own layout");
    refuse_set((const char *const[]){"hybrid", "vertical", "pipeline", "2", NULL}, "leave out --pipeline");
    refuse_set((const char *const[]){"tensor-parallel", "1", "ps", NULL, NULL}, "--ps --tensor-parallel 1 splits nothing");
    refuse_set((const char *const[]){"hogwild", NULL, "ps", NULL, NULL}, "--hogwild shares one copy");
    refuse_set((const char *const[]){"hogwild", NULL, "pipeline", "2", NULL}, "--hogwild needs whole-model replicas");
    refuse_set((const char *const[]){"hogwild", NULL, "compress", "fp16", NULL}, "--hogwild sends no gradients");
    refuse_set((const char *const[]){"hogwild", NULL, "quorum", "0.5", NULL}, "there is no quorum");
    refuse_set((const char *const[]){"quorum", "0.5", "ps", NULL, "consistency", "async", NULL},
               "--quorum is for synchronous training");
    refuse_set((const char *const[]){"quorum", "0.5", "tensor-parallel", "2", NULL}, "--quorum goes with data parallelism");
    refuse_set((const char *const[]){"quorum", "0.5", "compress", "1bit", NULL}, "--quorum adds float32 gradients");
    refuse_set((const char *const[]){"ps", NULL, "pipeline", "2", "compress", "fp16", NULL}, "pushes float32 shards");
    refuse_set((const char *const[]){"ps", NULL, "tensor-parallel", "2", "push-every", "2", NULL},
               "pushes and pulls every step");
    refuse_set((const char *const[]){"ps", NULL, "sfb", NULL, "consistency", "ssp", NULL}, "use --consistency sync");
    refuse_set((const char *const[]){"ps", NULL, "pipeline", "2", "sfb", NULL, NULL}, "leave out --compress/--sfb");
    refuse_set((const char *const[]){"micro-batches", "2", NULL}, "--micro-batches goes with --pipeline");
    refuse_set((const char *const[]){"save-every", "2", NULL}, "--save-every needs --save");
    refuse_set((const char *const[]){"timeline-steps", "1:3", NULL}, "--timeline-steps needs --timeline");
    refuse_set((const char *const[]){"log-histograms", "3", NULL}, "--log-histograms needs --logdir");
    refuse_set((const char *const[]){"run-name", "a", NULL}, "--run-name names a run's folder under --logdir");
    refuse_set((const char *const[]){"scaling", "strong", "lr-scaling", "linear", NULL}, "is for weak scaling");
    refuse_set((const char *const[]){"pipeline", "2", "sfb", NULL, NULL}, "--sfb needs plain data parallelism");
    refuse_set((const char *const[]){"ps", NULL, "compress", "lowrank:2", NULL}, "lowrank needs data parallelism");
    refuse_set((const char *const[]){"parallel", "auto", "pipeline", "2", NULL}, "leave out --pipeline");
    refuse_set((const char *const[]){"parallel", "auto", "ps", NULL, NULL}, "--parallel auto chooses the layout");
    refuse_set((const char *const[]){"parallel", "auto", "compress", "fp16", NULL}, "leave out --compress");
    refuse_set((const char *const[]){"parallel", "auto", "sfb", NULL, NULL}, "leave out --sfb");
    refuse_set((const char *const[]){"parallel", "auto", "hybrid", "vertical", NULL}, "leave out --hybrid");
    refuse_set((const char *const[]){"parallel", "auto", "solver", "lbfgs", NULL}, "leave out --solver lbfgs");
    refuse_set((const char *const[]){"history", "5", NULL}, "--history goes with --solver lbfgs");
    refuse_set((const char *const[]){"solver", "lbfgs", "ps", NULL, NULL}, "--solver lbfgs with --ps");
    refuse_set((const char *const[]){"solver", "lbfgs", "ps", NULL, "consistency", "async", NULL},
               "asynchronous servers apply stale pushes");
    refuse_set((const char *const[]){"solver", "lbfgs", "pipeline", "2", NULL}, "leave out --pipeline");
    refuse_set((const char *const[]){"solver", "lbfgs", "tensor-parallel", "2", NULL}, "leave out --tensor-parallel");
    refuse_set((const char *const[]){"solver", "lbfgs", "hybrid", "broadcast", NULL}, "leave out --hybrid");
    refuse_set((const char *const[]){"solver", "lbfgs", "compress", "fp16", NULL}, "--solver lbfgs with --compress");
    refuse_set((const char *const[]){"solver", "lbfgs", "sfb", NULL, NULL}, "--solver lbfgs with --sfb");
    refuse_set((const char *const[]){"solver", "lbfgs", "scaling", "strong", NULL}, "--scaling strong does not apply");
    refuse_set((const char *const[]){"solver", "lbfgs", "lr-scaling", "linear", NULL},
               "--lr-scaling linear does not apply");
    refuse_set((const char *const[]){"elastic", "2", "ps", NULL, NULL}, "--elastic is for data parallelism");
    refuse_set((const char *const[]){"elastic", "2", "pipeline", "2", NULL}, "--elastic is for data parallelism");
    refuse_set((const char *const[]){"elastic", "2", "timeline", "t.json", NULL}, "--timeline does not go with --elastic");
    char noconn[600];
    snprintf(noconn, sizeof noconn, "%s/noconn.cfg", dir);
    o.cfg_path = noconn;
    o.sfb = 1;
    refused(&o, "sfb without [connected]", "has no [connected] layer");
    char mlp[600];
    snprintf(mlp, sizeof mlp, "%s/mlp.cfg", dir);
    shoal_train_opts_default(&o);
    o.cfg_path = mlp;
    o.layout = SHOAL_TRAIN_PIPELINE;
    refused(&o, "explicit pipeline", "SHOAL_TRAIN_PIPELINE needs pipeline_stages");
    o.pipeline_stages = 2;
    CHECK_OK(shoal_train_opts_check(&o));
    o.layout = SHOAL_TRAIN_TENSOR;
    o.tensor_ranks = 2;
    refused(&o, "tensor with stages", "SHOAL_TRAIN_TENSOR needs");
    o.pipeline_stages = 0;
    CHECK_OK(shoal_train_opts_check(&o));
    o.layout = SHOAL_TRAIN_HYBRID;
    refused(&o, "hybrid without a scheme", "SHOAL_TRAIN_HYBRID needs hybrid");
    shoal_train_opts_default(&o);
    o.cfg_path = mlp;
    o.epochs = -1;
    refused(&o, "negative epochs", "--epochs -1");
    o.epochs = 0;
    o.consistency = "eventual";
    refused(&o, "consistency set directly", "eventual");
    o.consistency = "sync";
    o.compress = "zip";
    refused(&o, "compress set directly", "--compress: ");
    o.compress = NULL;
    o.layout = (shoal_train_layout)42;
    refused(&o, "no such layout", "unknown layout 42");
    shoal_train_opts_default(&o);
    o.cfg_path = mlp;
    CHECK_OK(shoal_train_opts_set(&o, "pipeline", "2"));
    CHECK_OK(shoal_train_opts_set(&o, "micro-batches", "4"));
    CHECK_OK(shoal_train_opts_set(&o, "tensor-parallel", "2"));
    CHECK_OK(shoal_train_opts_check(&o));
    CHECK_OK(shoal_train_opts_set(&o, "ps", NULL)); /* servers over pipeline x tensor replicas */
    CHECK_OK(shoal_train_opts_check(&o));
    shoal_train_opts_fini(&o);
    shoal_train_opts_default(&o);
    o.cfg_path = mlp;
    const char *const fine[][6] = {{"ps", NULL, "sfb", NULL, NULL, NULL},
                                   {"ps", NULL, "quorum", "0.5", NULL, NULL},
                                   {"ps", NULL, "tensor-parallel", "2", "consistency", "async"},
                                   {"quorum", "1", NULL, NULL, NULL, NULL},
                                   {"hogwild", NULL, NULL, NULL, NULL, NULL}};
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        for (int k = 0; k < 6 && fine[i][k]; k += 2) CHECK_OK(shoal_train_opts_set(&o, fine[i][k], fine[i][k + 1]));
        CHECK(shoal_train_opts_check(&o) == SHOAL_OK, "%s %s: %s", fine[i][0], fine[i][2] ? fine[i][2] : "",
              shoal_last_error_message());
        shoal_train_opts_fini(&o);
        o.cfg_path = mlp;
    }
    shoal_train_opts_fini(&o);
}

/* Every row says whether the ranks of a job must share it (a new option cannot be
 * forgotten), and the text the ranks compare is the same for the same effective values: a
 * default given or not, "none" or no --compress, a codec spelled two ways. */
static void every_option_says_whether_ranks_must_share_it(void)
{
    size_t n = 0;
    for (; shoal_train_option_at(n); n++)
        CHECK(sh_train_opts_agree_kind(n) >= 1 && sh_train_opts_agree_kind(n) <= 3,
              "option \"%s\" does not say whether the ranks must share it (train_opts.c: A_SAME, A_GIVEN or A_OWN)",
              shoal_train_option_at(n)->name);
    CHECK(sh_train_opts_agree_kind(n) == -1, "past the last row: %d", sh_train_opts_agree_kind(n));
    shoal_train_opts a, b;
    shoal_train_opts_default(&a);
    shoal_train_opts_default(&b);
    char ta[SH_TRAIN_AGREED_NBYTES], tb[SH_TRAIN_AGREED_NBYTES];
    CHECK(shoal_train_opts_set(&b, "consistency", "sync") == SHOAL_OK && shoal_train_opts_set(&b, "compress", "none") ==
              SHOAL_OK && shoal_train_opts_set(&b, "threads", "3") == SHOAL_OK && shoal_train_opts_set(&b, "data", "x") ==
              SHOAL_OK && shoal_train_opts_set(&b, "seed", "1") == SHOAL_OK,
          "%s", shoal_last_error_message());
    CHECK(sh_train_opts_agreed(&a, ta, sizeof ta) == SHOAL_OK && sh_train_opts_agreed(&b, tb, sizeof tb) == SHOAL_OK,
          "%s", shoal_last_error_message());
    CHECK(!strcmp(ta, tb), "the same effective options read differently:\n%s---\n%s", ta, tb);
    CHECK(strstr(ta, "--consistency sync (the default)\n") && strstr(ta, "no --pipeline\n") &&
              strstr(ta, "--compress none (the default)\n") && !strstr(ta, "--threads") && !strstr(ta, "--data"),
          "%s", ta);
    const char *const differ[][2] = {{"compress", "1bit"}, {"sfb", NULL},         {"lr-scaling", "linear"},
                                     {"consistency", "ssp"}, {"staleness", "2"},  {"push-every", "2"},
                                     {"bucket-mb", "4"},     {"seed", "9"},       {"micro-batches", "4"},
                                     {"hybrid", "vertical"}, {"save", "x.ckpt"}, {"scaling", "strong"}};
    for (size_t i = 0; i < sizeof differ / sizeof differ[0]; i++) {
        shoal_train_opts c;
        shoal_train_opts_default(&c);
        CHECK(shoal_train_opts_set(&c, differ[i][0], differ[i][1]) == SHOAL_OK, "%s", shoal_last_error_message());
        char tc[SH_TRAIN_AGREED_NBYTES], want[64];
        CHECK(sh_train_opts_agreed(&c, tc, sizeof tc) == SHOAL_OK && strcmp(tc, ta), "--%s changes nothing the ranks "
              "compare", differ[i][0]);
        snprintf(want, sizeof want, "--%s", differ[i][0]);
        CHECK(strstr(tc, want) != NULL, "%s", tc);
        shoal_train_opts_fini(&c);
    }
    shoal_train_opts c;
    shoal_train_opts_default(&c);
    shoal_train_opts_set(&c, "compress", "topk:0.01");
    shoal_train_opts_set(&b, "compress", "topk:.010");
    CHECK(sh_train_opts_agreed(&c, ta, sizeof ta) == SHOAL_OK && sh_train_opts_agreed(&b, tb, sizeof tb) == SHOAL_OK &&
              strstr(ta, "--compress topk:0.01\n") && strstr(tb, "--compress topk:0.01\n"),
          "%s---\n%s", ta, tb);
    CHECK(sh_train_opts_agreed(&c, ta, 16) == SHOAL_ERR_INTERNAL, "a short buffer was not refused");
    shoal_train_opts_fini(&a);
    shoal_train_opts_fini(&b);
    shoal_train_opts_fini(&c);
}

int main(void)
{
    check_begin("test_train_opts", 60);
    if (tiny_make_dir(dir, sizeof dir) != 0 ||
        tiny_write_file(dir, "noconn.cfg", "[net]\nbatch=4\nwidth=8\nheight=8\nchannels=1\n"
                                           "[convolutional]\nfilters=4\nsize=3\nactivation=relu\n[softmax]\n")) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(every_option_has_a_case_here);
    RUN(good_values_land_in_their_fields);
    RUN(bad_and_missing_values_are_refused_naming_the_option);
    RUN(switches_turn_on_and_off);
    RUN(names_take_dashes_or_underscores_and_unknown_ones_get_the_nearest);
    RUN(strings_are_copies_until_fini);
    RUN(solver_lbfgs_chooses_lbfgs_and_other_values_name_a_caffe_solver);
    RUN(elastic_takes_min_and_max);
    RUN(check_refuses_options_that_do_not_fit);
    RUN(every_option_says_whether_ranks_must_share_it);
    tiny_remove_dir(dir);
    return check_end();
}
