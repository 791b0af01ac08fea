/* test_mpi_transport.c — proves src/comm/transport/mpi.c: shoal built with MPI=1 against
 * Open MPI and against MPICH (the Makefile's mpi-bins) runs every collective, checked, over
 * MPI point-to-point links (SHOAL_TRANSPORT=mpi) and through the MPI library's own
 * collectives (SHOAL_ALGO=mpi), under mpirun and mpiexec; a mismatch reaches every rank
 * through the links' abort messages; and a shoal built without MPI says how to get it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "lib/run.h"

static char out[1 << 20];

static int run(const char *cmd)
{
    char full[8192];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    return sh_test_run(full, out, sizeof out);
}

/* The shoal built against MPI flavour `name` (the Makefile's mpi-bins) into bin; 0 (and a
 * skip line naming `what`) when it was not built. */
static int mpi_bin(const char *name, const char *what, char *bin, size_t cap)
{
    const char *dir = getenv("SHOAL_MPI_BIN_DIR");
    snprintf(bin, cap, "%s/mpi-%s/shoal", dir ? dir : "build", name);
    if (access(bin, X_OK) == 0) return 1;
    printf("test_mpi_transport: skipped %s %s: %s not built (needs mpicc.%s)\n", name, what, bin, name);
    return 0;
}

static void flavour(const char *name, const char *launch_fmt)
{
    char bin[1024];
    if (!mpi_bin(name, "collectives", bin, sizeof bin)) return;
    const char *colls[] = {"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall", "sendrecv"};
    const char *modes[] = {"SHOAL_TRANSPORT mpi", "SHOAL_ALGO mpi"};
    int port = sh_test_free_ports(14);
    for (int m = 0; m < 2; m++)
        for (int k = 0; k < 7; k++) {
            if (m == 1 && k == 6) continue; /* sendrecv is point-to-point: no MPI collective */
            char cmd[4096], var[64], val[64];
            sscanf(modes[m], "%63s %63s", var, val);
            snprintf(cmd, sizeof cmd, launch_fmt, port++, var, val, bin, colls[k]);
            int rc = run(cmd);
            CHECK(rc == 0, "%s %s=%s %s: exit %d: %s", name, var, val, colls[k], rc, out);
            CHECK(strstr(out, "Out of bounds values : 0 OK") != NULL, "%s %s=%s %s: %s", name, var, val, colls[k], out);
            CHECK(strstr(out, ": 3 ranks") != NULL, "%s: %s", name, out);
        }
}

static void t_openmpi(void)
{
    flavour("openmpi", "mpirun.openmpi --allow-run-as-root --oversubscribe -np 3 -x SHOAL_MASTER_ADDR=127.0.0.1 "
                       "-x SHOAL_MASTER_PORT=%d -x %s=%s %s bench %s -b 8 -e 1M -f 32 --iters 2 -w 1 -c 1");
}

static void t_mpich(void)
{
    flavour("mpich", "mpiexec.mpich -n 3 -genv SHOAL_MASTER_ADDR 127.0.0.1 -genv SHOAL_MASTER_PORT %d "
                     "-genv %s %s %s bench %s -b 8 -e 1M -f 32 --iters 2 -w 1 -c 1");
}

/* A mismatch some ranks see reaches the others at once over MPI links: on 4 ranks rank 0
 * allreduces 16 bytes where the others allreduce 8. Rank 2 compares its call with ranks 1
 * and 3 only, which agree with it; it learns of the mismatch from their abort messages.
 * Every rank must stop with the mismatch named, well inside SHOAL_TIMEOUT (30 s). */
static void mismatch(const char *name, const char *launch_fmt)
{
    char bin[1024], cmd[4096];
    if (!mpi_bin(name, "mismatch", bin, sizeof bin)) return;
    int port = sh_test_free_ports(1);
    snprintf(cmd, sizeof cmd, launch_fmt, port, bin, port, bin);
    uint64_t t0 = sh_now_ns();
    int rc = run(cmd);
    double s = (double)(sh_now_ns() - t0) * 1e-9;
    (void)rc; /* Open MPI's mpirun exits 0 when told not to abort on a failed rank */
    CHECK(s < 15, "%s: the ranks took %.1f s to stop (SHOAL_TIMEOUT is 30 s): %s", name, s, out);
    for (int r = 0; r < 4; r++) {
        char who[32];
        snprintf(who, sizeof who, "rank %d: ", r);
        const char *line = strstr(out, who);
        CHECK(line && strstr(line, "mismatch") && (size_t)(strstr(line, "mismatch") - line) < 400,
              "%s: rank %d does not name the mismatch: %s", name, r, out);
    }
    CHECK(strstr(out, "gave up") != NULL, "%s: no rank learned it from a peer's abort: %s", name, out);
}

static void t_mismatch_openmpi(void)
{
    /* -x is per application context */
    mismatch("openmpi", "mpirun.openmpi --allow-run-as-root --oversubscribe --mca orte_abort_on_non_zero_status 0 "
                        "-np 1 -x SHOAL_MASTER_ADDR=127.0.0.1 -x SHOAL_MASTER_PORT=%d -x SHOAL_TRANSPORT=mpi "
                        "-x SHOAL_TIMEOUT=30000 %s bench allreduce -b 16 -e 16 --iters 2 -w 1 -c 1 : "
                        "-np 3 -x SHOAL_MASTER_ADDR=127.0.0.1 -x SHOAL_MASTER_PORT=%d -x SHOAL_TRANSPORT=mpi "
                        "-x SHOAL_TIMEOUT=30000 %s bench allreduce -b 8 -e 8 --iters 2 -w 1 -c 1");
}

static void t_mismatch_mpich(void)
{
    mismatch("mpich", "mpiexec.mpich -genv SHOAL_MASTER_ADDR 127.0.0.1 -genv SHOAL_MASTER_PORT %d "
                      "-genv SHOAL_TRANSPORT mpi -genv SHOAL_TIMEOUT 30000 -n 1 %s bench allreduce -b 16 -e 16 --iters 2 "
                      "-w 1 -c 1 : -n 3 -env SHOAL_MASTER_PORT %d %s bench allreduce -b 8 -e 8 --iters 2 -w 1 -c 1");
}

static void t_without_mpi(void)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "SHOAL_TRANSPORT=mpi %s launch -n 2 %s bench allreduce -b 8 -e 8", sh_test_shoal_bin(),
             sh_test_shoal_bin());
    int rc = run(cmd);
    CHECK(rc != 0 && strstr(out, "make MPI=1"), "exit %d: %s", rc, out);
}

int main(void)
{
    check_begin("test_mpi_transport", 300);
    RUN(t_without_mpi);
    RUN(t_openmpi);
    RUN(t_mpich);
    RUN(t_mismatch_openmpi);
    RUN(t_mismatch_mpich);
    return check_end();
}
