/* test_train_compress.c — proves `shoal train -n N --compress C` and `--sfb` end to end
 * (src/train/dp/compress.c through dp/allreduce.c, the checkpoint's per-rank
 * residuals in snapshot.c): a run that stops and resumes equals one that did not, bit for
 * bit, for every codec with error feedback; a resume on another rank count starts the
 * residuals from zero and says so; --compress none is today's run; every codec trains the
 * tiny model to an accuracy close to float32's; --json reports the bytes; bad flags get one
 * clear line. Over --ps the same: each worker's residuals sit beside the checkpoint and a
 * sync run resumes bit for bit; async and ssp restore them as saved. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lib/run.h"
#include "train/tiny_data.h"

static char dir[256], out[1 << 20];

static int run(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s train %s 2>&1", dir, sh_test_shoal_bin(), args);
    return sh_test_run(cmd, out, sizeof out);
}

static int same_files(const char *a, const char *b)
{
    char cmd[1024], o[256];
    snprintf(cmd, sizeof cmd, "cd %s && cmp -s %s %s && echo same", dir, a, b);
    return sh_test_run(cmd, o, sizeof o) == 0 && strstr(o, "same") != NULL;
}

static double json_num(const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(out, pat);
    return p ? atof(p + strlen(pat)) : -1;
}

static const char *const codecs[] = {"1bit", "topk:0.1", "lowrank:2", "fp16", "bf16"};

static void resume_continues_bit_for_bit(void)
{
    char a[256];
    for (int i = 0; i < 3; i++) { /* the codecs with residuals */
        snprintf(a, sizeof a, "mlp.cfg --data . -n 2 --threads 1 --quiet --compress %s --max-steps 30 --save whole.ckpt",
                 codecs[i]);
        CHECK(run(a) == 0, "%s uninterrupted: %s", codecs[i], out);
        snprintf(a, sizeof a, "mlp.cfg --data . -n 2 --threads 1 --quiet --compress %s --max-steps 13 --save half.ckpt",
                 codecs[i]);
        CHECK(run(a) == 0, "%s first half: %s", codecs[i], out);
        CHECK(!same_files("whole.ckpt", "half.ckpt"), "%s: 13 steps differ from 30", codecs[i]);
        snprintf(a, sizeof a, "mlp.cfg --data . -n 2 --threads 1 --quiet --compress %s --max-steps 30 "
                 "--resume half.ckpt --save half.ckpt", codecs[i]);
        CHECK(run(a) == 0, "%s resumed: %s", codecs[i], out);
        CHECK(!strstr(out, "start from zero"), "%s: the residuals were restored: %s", codecs[i], out);
        CHECK(same_files("whole.ckpt", "half.ckpt"), "%s: stopped and resumed equals uninterrupted", codecs[i]);
    }
}

static void resume_on_other_ranks_resets_with_one_line(void)
{
    CHECK(run("mlp.cfg --data . -n 2 --threads 1 --quiet --compress 1bit --scaling strong --batch 48 "
              "--max-steps 6 --save r.ckpt") == 0, "%s", out);
    CHECK(run("mlp.cfg --data . -n 3 --threads 1 --quiet --compress 1bit --scaling strong --batch 48 "
              "--max-steps 10 --resume r.ckpt") == 0, "%s", out);
    const char *line = strstr(out, "residuals are for 2 ranks, this run has 3");
    CHECK(line != NULL, "the reset is said: %s", out);
    CHECK(line && !strstr(line + 1, "residuals are for 2 ranks"), "once: %s", out);
    /* and a checkpoint without residuals, resumed with them */
    CHECK(run("mlp.cfg --data . -n 2 --threads 1 --quiet --max-steps 4 --save plain.ckpt") == 0, "%s", out);
    CHECK(run("mlp.cfg --data . -n 2 --threads 1 --quiet --compress topk:0.1 --max-steps 6 --resume plain.ckpt") == 0,
          "%s", out);
    CHECK(strstr(out, "holds no error-feedback residuals") != NULL, "%s", out);
}

static void none_is_todays_run(void)
{
    CHECK(run("mlp.cfg --data . -n 2 --threads 1 --quiet --max-steps 12 --save a.ckpt") == 0, "%s", out);
    CHECK(run("mlp.cfg --data . -n 2 --threads 1 --quiet --max-steps 12 --compress none --save b.ckpt") == 0, "%s", out);
    CHECK(same_files("a.ckpt", "b.ckpt"), "--compress none changes nothing");
    CHECK(run("mlp.cfg --data . -n 2 --threads 1 --quiet --max-steps 12 --compress 1bit --save c.ckpt") == 0, "%s", out);
    CHECK(!same_files("a.ckpt", "c.ckpt"), "1bit does change the run");
}

static void every_codec_trains_and_reports_bytes(void)
{
    CHECK(run("mlp.cfg --data . -n 2 --threads 1 --max-steps 64 --json") == 0, "%s", out);
    double base = json_num("accuracy");
    CHECK(base >= 0.9, "float32 reaches %.3f", base);
    CHECK(json_num("bytes_sent_per_step") < 0, "no compression figures without --compress");
    char a[256];
    for (int i = 0; i < 5; i++) {
        snprintf(a, sizeof a, "mlp.cfg --data . -n 2 --threads 1 --max-steps 64 --json --compress %s", codecs[i]);
        CHECK(run(a) == 0, "%s: %s", codecs[i], out);
        double acc = json_num("accuracy"), ratio = json_num("compression_ratio");
        CHECK(acc >= base - 0.1, "%s: accuracy %.3f, float32 %.3f", codecs[i], acc, base);
        CHECK(json_num("bytes_sent_per_step") > 0 && json_num("dense_bytes_per_step") > json_num("bytes_sent_per_step"),
              "%s: bytes reported: %s", codecs[i], out);
        CHECK(i < 3 ? ratio > 2.5 : (ratio > 1.9 && ratio < 2.1), "%s: ratio %.2f", codecs[i], ratio);
        CHECK(i < 3 ? json_num("residual_norm") > 0 : json_num("residual_norm") == 0, "%s: residual %s", codecs[i], out);
    }
    CHECK(run("mlp.cfg --data . -n 2 --threads 1 --max-steps 64 --json --sfb") == 0, "%s", out);
    CHECK(json_num("accuracy") >= base - 0.1 && json_num("sfb_layers") == 1, "sfb: %s", out);
    CHECK(run("mlp.cfg --data . -n 2 --threads 1 --max-steps 8 --profile --compress 1bit --logdir tb") == 0, "%s", out);
    char cmd[512], o[64];
    snprintf(cmd, sizeof cmd, "cd %s && grep -r -q -a comm/compression_ratio tb && grep -r -q -a comm/residual_norm tb "
             "&& grep -r -q -a comm/bytes_sent_per_step tb && echo all", dir);
    CHECK(sh_test_run(cmd, o, sizeof o) == 0 && strstr(o, "all"), "TensorBoard has the three comm/ scalars: %s", o);
    CHECK(strstr(out, "compression: ") && strstr(out, "residual norm"), "--profile line: %s", out);
}

/* workers push compressed gradients, the servers decode them */
static void parameter_server_pushes_compressed(void)
{
    CHECK(run("mlp.cfg --data . -n 2 --ps --threads 1 --max-steps 64 --json") == 0, "%s", out);
    double base = json_num("accuracy");
    const char *ps_codecs[] = {"1bit", "topk:0.1", "fp16", "bf16"};
    char a[256];
    for (int i = 0; i < 4; i++) {
        snprintf(a, sizeof a, "mlp.cfg --data . -n 2 --ps --threads 1 --max-steps 64 --json --compress %s", ps_codecs[i]);
        CHECK(run(a) == 0, "%s: %s", ps_codecs[i], out);
        CHECK(json_num("accuracy") >= base - 0.1, "%s over --ps: %.3f vs %.3f", ps_codecs[i], json_num("accuracy"), base);
        CHECK(json_num("compression_ratio") > (i < 2 ? 2.5 : 1.9), "%s: ratio %.2f", ps_codecs[i],
              json_num("compression_ratio"));
    }
    /* --profile and TensorBoard report the pushes' bytes, ratio and residual too */
    CHECK(run("mlp.cfg --data . -n 2 --ps --threads 1 --max-steps 8 --profile --compress topk:0.1 --logdir pstb") == 0,
          "%s", out);
    char cmd[512], o[64];
    snprintf(cmd, sizeof cmd, "cd %s && grep -r -q -a comm/compression_ratio pstb && grep -r -q -a comm/residual_norm "
             "pstb && grep -r -q -a comm/bytes_sent_per_step pstb && echo all", dir);
    CHECK(sh_test_run(cmd, o, sizeof o) == 0 && strstr(o, "all"), "--ps: TensorBoard has the three comm/ scalars: %s", o);
    CHECK(strstr(out, "compression: ") && strstr(out, "residual norm"), "--ps: --profile line: %s", out);
}

/* The files of a parameter-server checkpoint: worker 0's, the server's shard, each worker's
 * residuals; 1 when every one of a's equals b's byte for byte. */
static int same_ps_checkpoints(const char *a, const char *b)
{
    static const char *const parts[] = {"", ".server0", ".worker0", ".worker1"};
    for (int i = 0; i < 4; i++) {
        char fa[128], fb[128];
        snprintf(fa, sizeof fa, "%s%s", a, parts[i]);
        snprintf(fb, sizeof fb, "%s%s", b, parts[i]);
        if (!same_files(fa, fb)) return 0;
    }
    return 1;
}

/* Sync mode with two workers is deterministic (the server's sum of two pushes does not
 * depend on their order): a run stopped and resumed from its checkpoint, the workers'
 * residuals included, ends exactly where one that did not stop ends. Without a worker's
 * residuals the run ends elsewhere, so the comparison can fail. */
static void ps_resume_continues_bit_for_bit(void)
{
    const char *ps_codecs[] = {"1bit", "topk:0.1"};
    char a[640];
    for (int i = 0; i < 2; i++) {
        const char *c = ps_codecs[i];
        snprintf(a, sizeof a, "mlp.cfg --data . -n 2 --ps --consistency sync --threads 1 --quiet --compress %s "
                 "--max-steps 30 --save pwhole.ckpt", c);
        CHECK(run(a) == 0, "%s uninterrupted: %s", c, out);
        snprintf(a, sizeof a, "mlp.cfg --data . -n 2 --ps --consistency sync --threads 1 --quiet --compress %s "
                 "--max-steps 13 --save phalf.ckpt", c);
        CHECK(run(a) == 0, "%s first half: %s", c, out);
        /* the same checkpoint less worker 1's residuals */
        snprintf(a, sizeof a, "cd %s && cp phalf.ckpt pcut.ckpt && cp phalf.ckpt.server0 pcut.ckpt.server0 && "
                 "cp phalf.ckpt.worker0 pcut.ckpt.worker0 && rm -f pcut.ckpt.worker1 && echo copied", dir);
        char o[64];
        CHECK(sh_test_run(a, o, sizeof o) == 0 && strstr(o, "copied"), "copy the checkpoint: %s", o);
        CHECK(!same_ps_checkpoints("pwhole.ckpt", "phalf.ckpt"), "%s: 13 steps differ from 30", c);
        snprintf(a, sizeof a, "mlp.cfg --data . -n 2 --ps --consistency sync --threads 1 --quiet --compress %s "
                 "--max-steps 30 --resume phalf.ckpt --save phalf.ckpt", c);
        CHECK(run(a) == 0, "%s resumed: %s", c, out);
        CHECK(!strstr(out, "start from zero"), "%s: the residuals were restored: %s", c, out);
        CHECK(same_ps_checkpoints("pwhole.ckpt", "phalf.ckpt"), "%s: stopped and resumed equals uninterrupted", c);
        /* worker 1's residuals lost: said by that worker, and the run ends elsewhere */
        snprintf(a, sizeof a, "mlp.cfg --data . -n 2 --ps --consistency sync --threads 1 --quiet --compress %s "
                 "--max-steps 30 --resume pcut.ckpt --save pcut.ckpt", c);
        CHECK(run(a) == 0, "%s resumed without worker 1's file: %s", c, out);
        CHECK(strstr(out, "worker 1: ") && strstr(out, "pcut.ckpt.worker1 is missing"), "%s: said: %s", c, out);
        CHECK(!same_files("pwhole.ckpt.server0", "pcut.ckpt.server0"), "%s: the residuals matter to the result", c);
    }
    /* a --save-every checkpoint taken mid-run (the server then dies) resumes the same way */
    CHECK(run("mlp.cfg --data . -n 2 --ps --consistency sync --threads 1 --quiet --compress 1bit --max-steps 30 "
              "--save pwhole.ckpt") == 0, "%s", out);
    CHECK(run("mlp.cfg --data . -n 2 --ps --consistency sync --threads 1 --quiet --compress 1bit --max-steps 30 "
              "--save pdied.ckpt --save-every 13 --debug-die-rank 0 --debug-die-step 15") != 0, "the server died: %s", out);
    CHECK(run("mlp.cfg --data . -n 2 --ps --consistency sync --threads 1 --quiet --compress 1bit --max-steps 30 "
              "--resume pdied.ckpt --save pdied.ckpt") == 0, "%s", out);
    CHECK(strstr(out, "start from zero") == NULL, "%s", out);
    CHECK(same_ps_checkpoints("pwhole.ckpt", "pdied.ckpt"), "resumed from step 13 equals uninterrupted");
}

/* Async and ssp are not deterministic (pushes land in whatever order they arrive), so what
 * is proved is the restore itself: a resume that runs no step saves each worker's residuals
 * exactly as the checkpoint held them (zeros or anything else would differ). */
static void ps_async_residuals_restore_as_saved(void)
{
    const char *modes[] = {"async", "ssp"};
    char a[640];
    for (int m = 0; m < 2; m++) {
        snprintf(a, sizeof a, "mlp.cfg --data . -n 2 --ps --consistency %s --threads 1 --quiet --compress 1bit "
                 "--max-steps 12 --save pa.ckpt", modes[m]);
        CHECK(run(a) == 0, "%s: %s", modes[m], out);
        snprintf(a, sizeof a, "mlp.cfg --data . -n 2 --ps --consistency %s --threads 1 --quiet --compress 1bit "
                 "--max-steps 12 --resume pa.ckpt --save pb.ckpt", modes[m]);
        CHECK(run(a) == 0, "%s resumed: %s", modes[m], out);
        CHECK(!strstr(out, "start from zero"), "%s: %s", modes[m], out);
        CHECK(same_files("pa.ckpt.worker0", "pb.ckpt.worker0") && same_files("pa.ckpt.worker1", "pb.ckpt.worker1"),
              "%s: each worker's residuals restored as saved", modes[m]);
        snprintf(a, sizeof a, "mlp.cfg --data . -n 2 --ps --consistency %s --threads 1 --quiet --compress 1bit "
                 "--max-steps 20 --resume pa.ckpt --save pb.ckpt", modes[m]);
        CHECK(run(a) == 0 && !strstr(out, "start from zero"), "%s trains on: %s", modes[m], out);
    }
    /* a damaged residual file is refused, like a damaged checkpoint */
    char cmd[512], o[64];
    snprintf(cmd, sizeof cmd, "cd %s && printf 'XXXX' | dd of=pa.ckpt.worker1 bs=1 seek=200 conv=notrunc "
             "2>/dev/null && echo hit", dir);
    CHECK(sh_test_run(cmd, o, sizeof o) == 0 && strstr(o, "hit"), "damage the file: %s", o);
    CHECK(run("mlp.cfg --data . -n 2 --ps --threads 1 --quiet --compress 1bit --max-steps 20 --resume pa.ckpt") != 0,
          "a damaged residual file was taken: %s", out);
    CHECK(strstr(out, "pa.ckpt.worker1") && strstr(out, "damaged"), "%s", out);
}

/* Another worker count, or a checkpoint without residuals: they start from zero, one line. */
static void ps_resume_on_other_workers_resets_with_one_line(void)
{
    /* the same global batch of 48 (each worker takes --batch images) */
    CHECK(run("mlp.cfg --data . -n 2 --ps --batch 24 --threads 1 --quiet --compress 1bit --max-steps 6 "
              "--save pr.ckpt") == 0, "%s", out);
    CHECK(run("mlp.cfg --data . -n 3 --ps --batch 16 --threads 1 --quiet --compress 1bit --max-steps 10 "
              "--resume pr.ckpt") == 0, "%s", out);
    const char *line = strstr(out, "residuals are for 2 workers, this run has 3");
    CHECK(line != NULL, "the reset is said: %s", out);
    CHECK(line && !strstr(line + 1, "residuals are for 2 workers"), "once: %s", out);
    CHECK(!strstr(out, "is missing"), "no worker looks for a file of another run: %s", out);
    CHECK(run("mlp.cfg --data . -n 2 --ps --threads 1 --quiet --max-steps 4 --save pplain.ckpt") == 0, "%s", out);
    CHECK(run("mlp.cfg --data . -n 2 --ps --threads 1 --quiet --compress topk:0.1 --max-steps 6 --resume pplain.ckpt")
          == 0, "%s", out);
    line = strstr(out, "holds no error-feedback residuals of the workers");
    CHECK(line != NULL, "%s", out);
    CHECK(line && !strstr(line + 1, "holds no error-feedback residuals"), "once: %s", out);
}

static void bad_flags_get_one_clear_line(void)
{
    static const char noconn[] = "[net]\nbatch=8\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.01\n"
                                 "\n[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=relu\n"
                                 "\n[avgpool]\n\n[softmax]\n\n[cost]\n";
    CHECK(tiny_write_file(dir, "noconn.cfg", noconn) == 0, "write noconn.cfg");
    struct {
        const char *args, *want;
    } cases[] = {
        {"mlp.cfg --data . -n 2 --compress topk:0", "(0, 1]"},
        {"mlp.cfg --data . -n 2 --compress lowrank:0", "whole number from 1"},
        {"mlp.cfg --data . -n 2 --compress gzip", "unknown compression \"gzip\""},
        {"mlp.cfg --data . -n 2 --compress", "--compress needs a value"},
        {"noconn.cfg --data . -n 2 --sfb", "noconn.cfg has no [connected] layer"},
        {"mlp.cfg --data . -n 2 --ps --compress lowrank:2", "lowrank needs data parallelism"},
        {"mlp.cfg --data . -n 2 --ps --sfb --consistency async", "use --consistency sync"},
        {"mlp.cfg --data . -n 4 --pipeline 2 --sfb", "--sfb needs plain data parallelism (--pipeline"},
        {"mlp.cfg --data . -n 4 --tensor-parallel 2 --compress 1bit --sfb", "--sfb needs plain data parallelism"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run(cases[i].args);
        CHECK(rc == 2, "%s: exit %d", cases[i].args, rc);
        CHECK(strstr(out, cases[i].want) != NULL, "%s: %s", cases[i].args, out);
        int lines = 0;
        for (const char *p = out; *p; p++) lines += *p == '\n';
        CHECK(lines <= 2, "%s: one line (and the usage hint): %s", cases[i].args, out);
    }
}

/* The model-parallel layouts' replicas (a hybrid: its convolutional part) exchange their
 * gradients compressed: a run stopped and resumed equals one that did not, bit for bit
 * (each rank's residuals in its own file); without those files the resumed run says so and
 * differs; accuracy stays close to float32's; the bytes are reported. mlp.cfg has dropout:
 * the pipeline's checkpoint must hold the stream of the stage that draws from it. */
static void layouts_compress_and_resume(void)
{
    static const struct {
        const char *args, *name;
    } lay[] = {
        {"mlp.cfg --data . -n 4 --pipeline 2", "pipeline"},
        {"other.cfg --data . -n 4 --tensor-parallel 2", "tensor"},
        {"conv.cfg --data . -n 2 --hybrid broadcast", "hybrid"},
    };
    static const char *const cs[] = {"1bit", "topk:0.1"};
    char a[512];
    /* uncompressed first: the pipeline with dropout resumes bit for bit */
    CHECK(run("mlp.cfg --data . -n 2 --pipeline 2 --threads 1 --quiet --max-steps 20 --save pw.ckpt") == 0, "%s", out);
    CHECK(run("mlp.cfg --data . -n 2 --pipeline 2 --threads 1 --quiet --max-steps 9 --save ph.ckpt") == 0, "%s", out);
    CHECK(run("mlp.cfg --data . -n 2 --pipeline 2 --threads 1 --quiet --max-steps 20 --resume ph.ckpt --save pr.ckpt")
          == 0, "%s", out);
    CHECK(same_files("pw.ckpt", "pr.ckpt"), "pipeline with dropout: stopped and resumed equals uninterrupted");
    for (int l = 0; l < 3; l++) {
        snprintf(a, sizeof a, "%s --threads 1 --max-steps 64 --json", lay[l].args);
        CHECK(run(a) == 0, "%s float32: %s", lay[l].name, out);
        double base = json_num("accuracy");
        for (int k = 0; k < 2; k++) {
            const char *L = lay[l].args, *C = cs[k], *N = lay[l].name;
            snprintf(a, sizeof a, "%s --threads 1 --max-steps 64 --json --compress %s", L, C);
            CHECK(run(a) == 0, "%s %s: %s", N, C, out);
            CHECK(json_num("accuracy") >= base - 0.1, "%s %s: accuracy %.3f, float32 %.3f", N, C,
                  json_num("accuracy"), base);
            CHECK(json_num("compression_ratio") > 2.5 && json_num("residual_norm") > 0, "%s %s: figures: %s", N, C,
                  out);
            snprintf(a, sizeof a, "%s --threads 1 --quiet --compress %s --max-steps 20 --save lw.ckpt", L, C);
            CHECK(run(a) == 0, "%s %s uninterrupted: %s", N, C, out);
            snprintf(a, sizeof a, "%s --threads 1 --quiet --compress %s --max-steps 9 --save lh.ckpt", L, C);
            CHECK(run(a) == 0, "%s %s first part: %s", N, C, out);
            snprintf(a, sizeof a, "%s --threads 1 --quiet --compress %s --max-steps 20 --resume lh.ckpt --save lr.ckpt",
                     L, C);
            CHECK(run(a) == 0, "%s %s resumed: %s", N, C, out);
            CHECK(!strstr(out, "start from zero"), "%s %s: every rank's residuals restored: %s", N, C, out);
            CHECK(same_files("lw.ckpt", "lr.ckpt"), "%s %s: stopped and resumed equals uninterrupted", N, C);
            CHECK(same_files("lw.ckpt.worker1", "lr.ckpt.worker1"), "%s %s: and so do rank 1's residuals", N, C);
            char cmd[512], o[64];
            snprintf(cmd, sizeof cmd, "cd %s && rm lh.ckpt.worker* && echo gone", dir);
            CHECK(sh_test_run(cmd, o, sizeof o) == 0 && strstr(o, "gone"), "rm: %s", o);
            CHECK(run(a) == 0, "%s %s resumed without residuals: %s", N, C, out);
            CHECK(strstr(out, "lh.ckpt.worker1 is missing") != NULL, "%s %s: said: %s", N, C, out);
            CHECK(!same_files("lw.ckpt", "lr.ckpt"), "%s %s: the residuals matter", N, C);
        }
    }
}

int main(void)
{
    check_begin("test_train_compress", 240);
    if (tiny_make_dir(dir, sizeof dir) != 0) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(resume_continues_bit_for_bit);
    RUN(resume_on_other_ranks_resets_with_one_line);
    RUN(none_is_todays_run);
    RUN(every_codec_trains_and_reports_bytes);
    RUN(parameter_server_pushes_compressed);
    RUN(ps_resume_continues_bit_for_bit);
    RUN(ps_async_residuals_restore_as_saved);
    RUN(ps_resume_on_other_workers_resets_with_one_line);
    RUN(bad_flags_get_one_clear_line);
    RUN(layouts_compress_and_resume);
    tiny_remove_dir(dir);
    return check_end();
}
