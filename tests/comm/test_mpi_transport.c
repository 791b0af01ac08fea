/* test_mpi_transport.c — proves src/comm/transport_mpi.c: shoal built with MPI=1 against
 * Open MPI and against MPICH (the Makefile's mpi-bins) runs every collective, checked, over
 * MPI point-to-point links (SHOAL_TRANSPORT=mpi) and through the MPI library's own
 * collectives (SHOAL_ALGO=mpi), under mpirun and mpiexec; and a shoal built without MPI
 * says how to get it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static char out[1 << 20];

static int run(const char *cmd)
{
    char full[8192];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void flavour(const char *name, const char *launch_fmt)
{
    const char *dir = getenv("SHOAL_MPI_BIN_DIR");
    char bin[1024];
    snprintf(bin, sizeof bin, "%s/mpi-%s/shoal", dir ? dir : "build", name);
    if (access(bin, X_OK) != 0) {
        printf("test_mpi_transport: skipped %s: %s not built (needs mpicc.%s)\n", name, bin, name);
        return;
    }
    const char *colls[] = {"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall", "sendrecv"};
    const char *modes[] = {"SHOAL_TRANSPORT mpi", "SHOAL_ALGO mpi"};
    int port = 31000 + (int)(getpid() % 1000) * 2;
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
                       "-x SHOAL_MASTER_PORT=%d -x %s=%s %s bench %s -b 8 -e 1M -f 32 -n 2 -w 1 -c 1");
}

static void t_mpich(void)
{
    flavour("mpich", "mpiexec.mpich -n 3 -genv SHOAL_MASTER_ADDR 127.0.0.1 -genv SHOAL_MASTER_PORT %d "
                     "-genv %s %s %s bench %s -b 8 -e 1M -f 32 -n 2 -w 1 -c 1");
}

static void t_without_mpi(void)
{
    const char *bin = getenv("SHOAL_BIN");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "SHOAL_TRANSPORT=mpi %s launch -n 2 %s bench allreduce -b 8 -e 8", bin ? bin : "build/shoal",
             bin ? bin : "build/shoal");
    int rc = run(cmd);
    CHECK(rc != 0 && strstr(out, "make MPI=1"), "exit %d: %s", rc, out);
}

int main(void)
{
    check_begin("test_mpi_transport", 300);
    RUN(t_without_mpi);
    RUN(t_openmpi);
    RUN(t_mpich);
    return check_end();
}
