/* test_train_text.c — proves character-level training and sampling on the real binary
 * ($SHOAL_BIN): src/data/text.c and the loader's text streams, `shoal test` on text, the recurrent state in
 * checkpoints (src/train/snapshot.c: a resumed run ends bit for bit where the straight one
 * does, alone and on 2 ranks), 2 ranks of B streams agreeing with 1 rank of 2B, bits per
 * character in --json, src/cli/cmd_generate.c (repeatable samples, --prime (alias --seed) echoed, either
 * sampler; Darknet's own text: tests/nn/test_darknet_weights.c) and the
 * errors: an empty or too-short text (in characters and sequences), a held-out tail too short
 * for the batch, a non-character model, a character model without --data FILE.txt, bad flags; a seed of any bytes (not UTF-8) is fed as it is. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "lib/run.h"

static char dir[256];
static char bin[1024]; /* absolute: the commands run in dir */

/* One of each recurrent layer: the checkpoint carries all three kinds of state. */
static const char model_cfg[] =
    "[net]\ninputs=256\nbatch=4\ntime_steps=8\noptimizer=adam\nlearning_rate=0.01\n"
    "momentum=0.9\ndecay=0\n"
    "[lstm]\noutput=24\n[gru]\noutput=20\n[rnn]\nhidden=18\noutput=16\nactivation=tanh\n"
    "[connected]\noutput=256\nactivation=linear\n[softmax]\n";

static const char lstm_cfg[] = "[net]\ninputs=256\nbatch=4\ntime_steps=8\n[lstm]\noutput=16\n"
                               "[connected]\noutput=256\nactivation=linear\n[softmax]\n";

static int run_shoal(const char *args, char *out, size_t out_nbytes)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s %s 2>&1", dir, bin, args);
    return sh_test_run(cmd, out, out_nbytes);
}

static double json_num(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

static void write_file(const char *name, const char *text, size_t nbytes)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(text, 1, nbytes, f) == nbytes, "writing %s", path);
    if (f) fclose(f);
}

/* About 40 KB of sentences from a small vocabulary, the same every run. */
static void make_text(void)
{
    static const char *words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran",
                                  "to", "see", "it", "was", "very", "happy", "today"};
    size_t cap = 48000, len = 0;
    char *t = malloc(cap);
    uint32_t s = 12345;
    while (len + 64 < cap - 8000) {
        int n = 3 + (int)((s >> 16) % 6);
        for (int i = 0; i < n; i++) {
            s = s * 1103515245u + 12345u;
            len += (size_t)snprintf(t + len, cap - len, "%s%s", i ? " " : "", words[(s >> 16) % 16]);
        }
        len += (size_t)snprintf(t + len, cap - len, ".\n");
    }
    write_file("text.txt", t, len);
    free(t);
}

static int files_equal(const char *a, const char *b)
{
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/%s", dir, a);
    snprintf(pb, sizeof pb, "%s/%s", dir, b);
    FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static void trains_on_text_and_reports_bits_per_char(void)
{
    char out[16384];
    int rc = run_shoal("train model.cfg --data text.txt --epochs 1 --threads 1 --json --save ep.ckpt",
                       out, sizeof out);
    CHECK(rc == 0, "exit %d: %s", rc, out);
    double bpc = json_num(out, "test_bpc"), loss = json_num(out, "test_loss");
    CHECK(bpc > 0 && bpc < 3.5, "test %g bits/char after an epoch (8 = knowing nothing): %s", bpc, out);
    CHECK(fabs(bpc - loss / log(2)) < 1e-4, "bits/char %g is not the loss %g / ln 2", bpc, loss);
    CHECK(json_num(out, "chars_per_s") > 0, "no chars_per_s: %s", out);
    CHECK(strstr(out, "bits/char") != NULL, "the progress lines do not say bits/char: %s", out);
    CHECK(strstr(out, "held-out characters") != NULL, "no data line: %s", out);
    /* shoal test reads the same held-out tail from a zero state: the same figure */
    char t[4096];
    rc = run_shoal("test model.cfg --weights ep.ckpt --data text.txt --json", t, sizeof t);
    CHECK(rc == 0 && fabs(json_num(t, "bpc") - bpc) < 1e-5, "shoal test: %s (train said %g)", t, bpc);
}

static void resume_continues_bit_for_bit(void)
{
    static const char *ranks[] = {"", "-n 2 --batch 2"};
    for (int r = 0; r < 2; r++) {
        char out[16384], args[512];
        snprintf(args, sizeof args, "train model.cfg --data text.txt %s --threads 1 --max-steps 14 "
                 "--save straight.ckpt --quiet", ranks[r]);
        CHECK(run_shoal(args, out, sizeof out) == 0, "%s: %s", args, out);
        snprintf(args, sizeof args, "train model.cfg --data text.txt %s --threads 1 --max-steps 9 "
                 "--save half.ckpt --quiet", ranks[r]);
        CHECK(run_shoal(args, out, sizeof out) == 0, "%s: %s", args, out);
        snprintf(args, sizeof args, "train model.cfg --data text.txt %s --threads 1 --max-steps 14 "
                 "--resume half.ckpt --save resumed.ckpt --quiet", ranks[r]);
        CHECK(run_shoal(args, out, sizeof out) == 0, "%s: %s", args, out);
        CHECK(files_equal("straight.ckpt", "resumed.ckpt"),
              "%s: the resumed run's checkpoint differs from the straight run's", ranks[r]);
        CHECK(!files_equal("straight.ckpt", "half.ckpt"), "the runs did nothing");
    }
    /* another rank count cannot take the state over */
    char out[4096];
    int rc = run_shoal("train model.cfg --data text.txt --threads 1 --max-steps 16 --resume half.ckpt",
                       out, sizeof out);
    CHECK(rc == 1 && strstr(out, "recurrent state") && strstr(out, "same -n"),
          "resuming 2 ranks' checkpoint on 1: exit %d: %s", rc, out);
}

static void two_ranks_match_one_rank_with_both_streams(void)
{
    char one[16384], two[16384];
    CHECK(run_shoal("train model.cfg --data text.txt --threads 1 --max-steps 10 --batch 4 --json",
                    one, sizeof one) == 0, "1 rank: %s", one);
    CHECK(run_shoal("train model.cfg --data text.txt --threads 1 --max-steps 10 -n 2 --batch 2 "
                    "--json", two, sizeof two) == 0, "2 ranks: %s", two);
    double a = json_num(one, "test_bpc"), b = json_num(two, "test_bpc");
    CHECK(fabs(a - b) < 1e-3, "test bits/char %g on 1 rank, %g on 2", a, b);
}

static void generate_samples_repeatably(void)
{
    char a[8192], b[8192], c[8192];
    CHECK(run_shoal("train model.cfg --data text.txt --threads 1 --max-steps 40 --save gen.ckpt "
                    "--quiet", a, sizeof a) == 0, "train: %s", a);
    int rc = run_shoal("generate model.cfg --weights gen.ckpt --prime 'the cat' --length 120", a, sizeof a);
    CHECK(rc == 0, "generate: exit %d: %s", rc, a);
    CHECK(strncmp(a, "the cat", 7) == 0, "the seed is not echoed first: %s", a);
    CHECK(strlen(a) == 7 + 120 + 1, "%zu bytes, want seed + 120 + newline: %s", strlen(a), a);
    CHECK(run_shoal("generate model.cfg --weights gen.ckpt --seed 'the cat' --length 120", b,
                    sizeof b) == 0 && strcmp(a, b) == 0, "--seed (Darknet's word for --prime) differs:\n%s\n%s", a, b);
    CHECK(run_shoal("generate model.cfg --weights gen.ckpt --seed 'the cat' --length 120 "
                    "--sample-seed 9 --temperature 0.5", c, sizeof c) == 0 && strcmp(a, c) != 0,
          "another sample seed gave the same text");
    /* a temperature near 0 picks the likeliest byte, never a NUL from weights that underflowed */
    rc = run_shoal("generate model.cfg --weights gen.ckpt --seed 'the cat' --length 50 --temperature 1e-3", c,
                   sizeof c);
    CHECK(rc == 0 && strlen(c) == 7 + 50 + 1, "--temperature 1e-3: exit %d, %zu bytes before a NUL", rc, strlen(c));
    /* Darknet's sampler: its default seed (two newlines) echoed, repeatable; a net Darknet
     * would build otherwise (a [gru]) is refused in one line */
    write_file("lstm.cfg", lstm_cfg, strlen(lstm_cfg));
    CHECK(run_shoal("train lstm.cfg --data text.txt --threads 1 --max-steps 5 --save lstm.ckpt "
                    "--quiet", a, sizeof a) == 0, "train: %s", a);
    CHECK(run_shoal("generate lstm.cfg --weights lstm.ckpt --sampler darknet --length 120", b,
                    sizeof b) == 0 && strncmp(b, "\n\n", 2) == 0 && strlen(b) == 2 + 120 + 1,
          "--sampler darknet: %s", b);
    CHECK(run_shoal("generate lstm.cfg --weights lstm.ckpt --sampler darknet --length 120", c,
                    sizeof c) == 0 && strcmp(b, c) == 0, "--sampler darknet: two runs differ");
    /* the seed is bytes, not UTF-8: fed and echoed as they are */
    rc = run_shoal("generate model.cfg --weights gen.ckpt --seed \"$(printf '\\377\\376\\200ab')\" "
                   "--length 4", c, sizeof c);
    CHECK(rc == 0 && memcmp(c, "\377\376\200ab", 5) == 0 && strlen(c) == 5 + 4 + 1,
          "non-UTF-8 seed: exit %d, %zu bytes", rc, strlen(c));
    int rc2 = run_shoal("generate model.cfg --weights gen.ckpt --sampler darknet", c, sizeof c);
    CHECK(rc2 == 1 && strstr(c, "--sampler darknet") && strchr(c, '\n') == c + strlen(c) - 1,
          "--sampler darknet with a [gru]: exit %d, want 1 and one line: %s", rc2, c);
}

static void errors_are_clear(void)
{
    char out[4096];
    write_file("short.txt", "abc", 3);
    int rc = run_shoal("train model.cfg --data short.txt --max-steps 1", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "short.txt") && strstr(out, "too few"), "short text: %d %s", rc, out);
    write_file("empty.txt", "", 0);
    rc = run_shoal("train model.cfg --data empty.txt --max-steps 1", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "empty.txt holds 0 bytes") && strchr(out, '\n') == out + strlen(out) - 1,
          "empty text: %d %s", rc, out);
    /* 270 bytes to train on are enough for 4 streams of 8 steps, the 30 held out are not:
     * refused before training, naming the tail */
    char text300[300];
    for (int i = 0; i < 300; i++) text300[i] = (char)('a' + i % 26);
    write_file("tail.txt", text300, sizeof text300);
    rc = run_shoal("train model.cfg --data tail.txt --max-steps 1", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "tail.txt (held-out tail): 30 characters are too few for 4 sequences") &&
              strchr(out, '\n') == out + strlen(out) - 1, "short tail: %d %s", rc, out);
    /* a training text shorter than one step's sequences speaks of characters, not images */
    write_file("step.txt", text300, 200);
    rc = run_shoal("train model.cfg --data step.txt --max-steps 1 --batch 32", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "characters are too few for 32 sequences") && !strstr(out, "images"),
          "text shorter than a step: %d %s", rc, out);
    /* a character model without --data is told to give a text */
    rc = run_shoal("train model.cfg --max-steps 1", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "character-level model") && strstr(out, "--data FILE.txt"), "no --data: %d %s", rc,
          out);
    write_file("image.cfg", "[net]\nwidth=4\nheight=4\nchannels=1\n[connected]\noutput=3\n[softmax]\n", 64);
    rc = run_shoal("train image.cfg --data text.txt --max-steps 1", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "256"), "image model on text: %d %s", rc, out);
    rc = run_shoal("generate model.cfg", out, sizeof out);
    CHECK(rc == 2 && strstr(out, "--weights"), "no weights: %d %s", rc, out);
    rc = run_shoal("generate model.cfg --weights gen.ckpt --temperature 0", out, sizeof out);
    CHECK(rc == 2 && strstr(out, "--temperature"), "temperature 0: %d %s", rc, out);
    rc = run_shoal("generate model.cfg --weights gen.ckpt --temperature 1e9", out, sizeof out);
    CHECK(rc == 2 && strstr(out, "at most 1e6"), "temperature 1e9 names the limit: %d %s", rc, out);
    rc = run_shoal("generate image.cfg --weights gen.ckpt", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "256"), "image model: %d %s", rc, out);
    rc = run_shoal("generate model.cfg --weights gen.ckpt --sampler torch", out, sizeof out);
    CHECK(rc == 2 && strstr(out, "--sampler"), "--sampler torch: %d %s", rc, out);
    rc = run_shoal("generate --help", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "--temperature"), "help: %d %s", rc, out);
}

int main(void)
{
    check_begin("test_train_text", 240);
    snprintf(dir, sizeof dir, "/tmp/shoal_text_XXXXXX");
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return check_end();
    }
    char resolved[4096];
    snprintf(bin, sizeof bin, "%.1000s",
             realpath(sh_test_shoal_bin(), resolved) ? resolved : sh_test_shoal_bin());
    make_text();
    write_file("model.cfg", model_cfg, sizeof model_cfg - 1);
    RUN(trains_on_text_and_reports_bits_per_char);
    RUN(resume_continues_bit_for_bit);
    RUN(two_ranks_match_one_rank_with_both_streams);
    RUN(generate_samples_repeatably);
    RUN(errors_are_clear);
    char cmd[600], out[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    sh_test_run(cmd, out, sizeof out);
    return check_end();
}
