/* test_plan_cli.c — proves `shoal plan` (src/cli/cmd_plan.c, src/train/plan/) and `shoal train
 * --parallel auto` (plan/auto.c through job.c): the table names the cluster, lists every
 * runnable layout fastest first with its flags and ends with the choice; --json holds the
 * same; 256 hosts are planned without training; bad flags get one line and exit 2; a job
 * with --parallel auto prints the table, takes the layout it chose (its layout lines show)
 * and trains; shared memory made slow (SHOAL_PLAN_SHM_MBS) moves a net of huge [connected]
 * layers off the plain gradient exchange; --parallel auto beside a layout flag is refused;
 * alone it says there is nothing to divide. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lib/run.h"
#include "train/tiny_data.h"

static char dir[256], out[1 << 18];

static int plan(const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s plan %s 2>&1", sh_test_shoal_bin(), args);
    return sh_test_run(cmd, out, sizeof out);
}

static int train(const char *env, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd %s && %s %s train %s 2>&1", dir, env, sh_test_shoal_bin(), args);
    return sh_test_run(cmd, out, sizeof out);
}

static void the_table_lists_layouts_fastest_first(void)
{
    CHECK(plan("examples/lenet.cfg --hosts 2 --ranks-per-host 2 --link 1gbit --threads 1") == 0, "%s", out);
    CHECK(strstr(out, "plan for examples/lenet.cfg: 2 hosts x 2 ranks (4 ranks), batch 64 a replica") &&
          strstr(out, "links: across hosts 1gbit") && strstr(out, "measured here: forward"), "header: %s", out);
    const char *p = strstr(out, "layout (flags)\n");
    double last = 1e300;
    int rows = 0, sorted = 1;
    while (p && (p = strchr(p, '\n')) && p[1] == ' ') {
        double v = atof(p + 1);
        sorted &= v <= last && v > 0;
        last = v;
        rows++;
        p++;
    }
    CHECK(rows >= 10 && sorted, "%d rows, fastest first: %d\n%s", rows, sorted, out);
    CHECK(strstr(out, "data parallel") && strstr(out, "(--pipeline 2 --micro-batches 2)") &&
          strstr(out, "(--tensor-parallel 2)") && strstr(out, "(--hybrid broadcast)") &&
          strstr(out, "(--compress fp16)"), "the layouts weighed: %s", out);
    CHECK(strstr(out, "choice: ") && strstr(out, "shoal train examples/lenet.cfg -n 4"), "the choice: %s", out);
}

static void json_holds_the_same(void)
{
    CHECK(plan("examples/mlp.cfg --ranks-per-host 2 --threads 1 --json") == 0, "%s", out);
    CHECK(out[0] == '{' && strstr(out, "\"layouts\":[") && strstr(out, "\"choice\":{\"layout\":"), "%s", out);
    CHECK(sh_test_json_number(out, "ranks_per_host") == 2 && sh_test_json_number(out, "images_per_s") > 0 &&
          sh_test_json_number(out, "forward_ms") > 0, "%s", out);
    CHECK(strstr(out, "\"possible\":false,\"why\":\"no [connected] part"), "a layout that cannot run says why: %s",
          out);
}

static void any_size_is_planned(void)
{
    CHECK(plan("examples/lenet.cfg --hosts 256 --ranks-per-host 8 --link 10gbit --threads 1") == 0, "%s", out);
    CHECK(strstr(out, "256 hosts x 8 ranks (2048 ranks)") && strstr(out, "choice: "), "%s", out);
    CHECK(strstr(out, "-n 2048"), "the choice's command: %s", out);
}

static void bad_flags_get_one_line(void)
{
    const struct {
        const char *args, *want;
        int rc;
    } bad[] = {
        {"examples/lenet.cfg --link fast", "--link \"fast\"", 2},
        {"--hosts 2", "missing the model file CFG", 2},
        {"examples/lenet.cfg --hosts 0", "--hosts", 2},
        {"examples/lenet.cfg --ranks-per-host x", "--ranks-per-host", 2},
        {"no-such.cfg", "no-such.cfg", 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = plan(bad[i].args);
        CHECK(rc == bad[i].rc && strstr(out, bad[i].want) && strchr(out, '\n') == out + strlen(out) - 1,
              "%s: exit %d (want %d): %s", bad[i].args, rc, bad[i].rc, out);
    }
    CHECK(plan("--help") == 0 && strstr(out, "--ranks-per-host") && strstr(out, "--link"), "%s", out);
}

static void train_parallel_auto_chooses_and_trains(void)
{
    CHECK(train("", "mlp.cfg --data . -n 2 --threads 1 --parallel auto --max-steps 6") == 0, "%s", out);
    CHECK(strstr(out, "--parallel auto: every layout predicted") && strstr(out, "choice: ") &&
          strstr(out, "test accuracy"), "%s", out);
    /* shared memory at 1 MB/s: the 2 x 2048 x 2048 net cannot send its 34 MB of gradients a
     * step; the choice moves activities or factors, and the job runs it */
    CHECK(train("SHOAL_PLAN_SHM_MBS=1", "huge.cfg --data . -n 2 --threads 1 --parallel auto --max-steps 2 --profile")
          == 0, "%s", out);
    const char *choice = strstr(out, "choice: ");
    CHECK(choice && strncmp(choice, "choice: data parallel, ", 23) && strncmp(choice, "choice: data parallel,1", 23),
          "not the plain exchange: %s", out);
    if (choice && !strncmp(choice, "choice: tensor parallel", 23))
        CHECK(strstr(out, "tensor parallel: 2 ranks"), "the tensor layout runs: %s", out);
    if (choice && strstr(choice, "sufficient factors"))
        CHECK(strstr(out, "sufficient factors for some connected layers"), "--sfb runs: %s", out);
}

static void parallel_auto_is_refused_beside_a_layout_and_alone_says_so(void)
{
    CHECK(train("", "mlp.cfg --data . -n 2 --parallel auto --pipeline 2") == 2 && strstr(out, "leave out --pipeline"),
          "%s", out);
    CHECK(train("", "mlp.cfg --data . --parallel sometimes") == 2 && strstr(out, "--parallel \"sometimes\""), "%s",
          out);
    CHECK(train("", "mlp.cfg --data . --threads 1 --parallel auto --max-steps 2") == 0 &&
          strstr(out, "one process, nothing to divide"), "%s", out);
}

int main(void)
{
    check_begin("test_plan_cli", 240);
    if (tiny_make_dir(dir, sizeof dir) != 0 ||
        tiny_write_file(dir, "huge.cfg", "[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.01\n"
                                         "[connected]\noutput=2048\nactivation=relu\n[connected]\noutput=2048\n"
                                         "activation=relu\n[connected]\noutput=4\nactivation=linear\n[softmax]\n")) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(the_table_lists_layouts_fastest_first);
    RUN(json_holds_the_same);
    RUN(any_size_is_planned);
    RUN(bad_flags_get_one_line);
    RUN(train_parallel_auto_chooses_and_trains);
    RUN(parallel_auto_is_refused_beside_a_layout_and_alone_says_so);
    tiny_remove_dir(dir);
    return check_end();
}
