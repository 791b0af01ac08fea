/* test_mpi_launchers.c — proves that shoal's ranks bootstrap under the launchers clusters
 * already have: Open MPI's mpirun (OMPI_COMM_WORLD_*), MPICH's mpiexec (PMI_*) and Slurm's
 * srun (SLURM_*, on a one-node cluster the test starts), running
 * a checked `shoal bench` and a data-parallel `shoal train`. A launcher that is not
 * installed is reported and skipped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "train/tiny_data.h"
#include "lib/run.h"

static char out[1 << 20], dir[256];

static int run(const char *cmd)
{
    char full[4096];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    return sh_test_run(full, out, sizeof out);
}

typedef struct {
    const char *name, *probe, *fmt; /* fmt: %d port, %s binary, %s args */
} launcher;

static const launcher launchers[] = {
    {"Open MPI", "mpirun.openmpi --version",
     "mpirun.openmpi --allow-run-as-root --oversubscribe -np 3 -x SHOAL_MASTER_ADDR=127.0.0.1 "
     "-x SHOAL_MASTER_PORT=%d -x SHOAL_TIMEOUT=30000 %s %s"},
    {"MPICH", "mpiexec.mpich --version",
     "mpiexec.mpich -n 3 -genv SHOAL_MASTER_ADDR 127.0.0.1 -genv SHOAL_MASTER_PORT %d "
     "-genv SHOAL_TIMEOUT 30000 %s %s"},
};

static void bench_and_train_under(const launcher *l)
{
    if (run(l->probe) != 0) {
        printf("test_mpi_launchers: skipped %s: %s not found\n", l->name, l->probe);
        return;
    }
    char cmd[4096], args[1024];
    snprintf(args, sizeof args, "bench allreduce -b 8 -e 256K -f 16 --iters 2 -w 1 -c 1");
    snprintf(cmd, sizeof cmd, l->fmt, sh_test_free_ports(1), sh_test_shoal_bin(), args);
    char nokey[4200];
    snprintf(nokey, sizeof nokey, "env -u SHOAL_JOB_KEY %s", cmd);
    int rc = run(nokey);
    CHECK(rc == 0, "%s: exit %d: %s", l->name, rc, out);
    CHECK(strstr(out, "shoal bench allreduce: 3 ranks") != NULL, "%s: not one job of 3 ranks: %s", l->name, out);
    /* No SHOAL_JOB_KEY: the derived key is not secret, and the user hears it once (rank 0),
     * at the default log level, with what to do. */
    int warned = 0;
    for (const char *p = out; (p = strstr(p, "no SHOAL_JOB_KEY: ")); p++) warned++;
    CHECK(warned == 1, "%s: %d warnings about the derived job key, want 1: %s", l->name, warned, out);
    CHECK(strstr(out, "not secret") && strstr(out, "SHOAL_JOB_KEY=$(openssl rand -hex 32)"), "%s: %s", l->name, out);
    CHECK(strstr(out, "Out of bounds values : 0 OK") != NULL, "%s: %s", l->name, out);
    snprintf(args, sizeof args, "train %s/other.cfg --data %s --max-steps 12 --threads 1 --scaling strong --batch 48",
             dir, dir);
    snprintf(cmd, sizeof cmd, l->fmt, sh_test_free_ports(1), sh_test_shoal_bin(), args);
    rc = run(cmd);
    CHECK(rc == 0, "%s: train exit %d: %s", l->name, rc, out);
    CHECK(strstr(out, "test accuracy") != NULL, "%s: no result line: %s", l->name, out);
    int lines = 0;
    for (const char *p = out; (p = strstr(p, "after 12 steps")); p++) lines++;
    CHECK(lines == 1, "%s: %d ranks printed results, want only rank 0: %s", l->name, lines, out);
}

static void t_openmpi(void) { bench_and_train_under(&launchers[0]); }
static void t_mpich(void) { bench_and_train_under(&launchers[1]); }

/* Slurm: a one-node cluster of our own (scripts/slurm-local.sh), and srun with nothing of
 * shoal's set: rank, size, the master (the step's first node) and its port (from the job
 * and step ids) all come from Slurm's variables. */
static void t_slurm(void)
{
    if (run("command -v srun && { command -v slurmd || test -x /usr/sbin/slurmd; }") != 0) {
        printf("test_mpi_launchers: skipped Slurm: srun or slurmd not found\n");
        return;
    }
    char sdir[256], cmd[4096];
    snprintf(sdir, sizeof sdir, "/tmp/shoal-slurm-%d", (int)getpid());
    snprintf(cmd, sizeof cmd, "scripts/slurm-local.sh start %s", sdir);
    if (run(cmd) != 0) {
        printf("test_mpi_launchers: skipped Slurm: no local cluster: %s\n", out);
        snprintf(cmd, sizeof cmd, "scripts/slurm-local.sh stop %s", sdir);
        run(cmd);
        return;
    }
    const char *argv[2] = {"bench allreduce -b 8 -e 256K -f 16 --iters 2 -w 1 -c 1", NULL};
    char train[1024];
    snprintf(train, sizeof train, "train %s/other.cfg --data %s --max-steps 12 --threads 1 --scaling strong --batch 48",
             dir, dir);
    argv[1] = train;
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd,
                 "env -u SHOAL_MASTER_ADDR -u SHOAL_MASTER_PORT -u SHOAL_RANK -u SHOAL_WORLD_SIZE "
                 "SLURM_CONF=%s/slurm.conf SHOAL_TIMEOUT=30000 timeout 120 srun -n 3 --overcommit -t 2 %s %s",
                 sdir, sh_test_shoal_bin(), argv[i]);
        int rc = run(cmd);
        CHECK(rc == 0, "srun %s: exit %d: %s", argv[i], rc, out);
        if (i == 0) {
            CHECK(strstr(out, "shoal bench allreduce: 3 ranks") != NULL, "srun: not one job of 3 ranks: %s", out);
            CHECK(strstr(out, "Out of bounds values : 0 OK") != NULL, "srun: %s", out);
        } else {
            CHECK(strstr(out, "test accuracy") != NULL, "srun: no result line: %s", out);
            int lines = 0;
            for (const char *p = out; (p = strstr(p, "after 12 steps")); p++) lines++;
            CHECK(lines == 1, "srun: %d ranks printed results, want only rank 0: %s", lines, out);
        }
    }
    snprintf(cmd, sizeof cmd, "scripts/slurm-local.sh stop %s", sdir);
    CHECK(run(cmd) == 0, "stopping the local Slurm: %s", out);
}

int main(void)
{
    check_begin("test_mpi_launchers", 240);
    if (tiny_make_dir(dir, sizeof dir) != 0) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(t_openmpi);
    RUN(t_mpich);
    RUN(t_slurm);
    tiny_remove_dir(dir);
    return check_end();
}
