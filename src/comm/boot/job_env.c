/* job_env.c — where this process stands in a launched job, read from the launcher's
 * variables without joining it (training decides its roles and threads from it before it
 * builds anything), and what a rank tells `shoal launch`: a rank the job dropped, an
 * elastic job (whose lost ranks do not stop the others).
 * Not here: the launcher table itself (sh_boot_read_env in boot.c), the rendezvous.
 * Proved by tests/cli/test_train_dp.c and tests/cli/test_train_ps.c (jobs under shoal
 * launch; the dropped-worker drill) and tests/train/test_api.c (alone). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"
#include "base/err.h"
#include "comm/boot/boot.h"
#include "shoal/comm.h"

/* The ranks on this host, by the launcher that gave the rank (the communicator learns it
 * from the hosts once it exists; this is the guess before). */
static int local_world_of(const char *source)
{
    static const struct {
        const char *source, *var;
    } locals[] = {
        {"shoal", "SHOAL_LOCAL_SIZE"},
        {"openmpi", "OMPI_COMM_WORLD_LOCAL_SIZE"},
        {"mpich", "MPI_LOCALNRANKS"},
    };
    for (size_t i = 0; i < sizeof locals / sizeof locals[0]; i++) {
        long n = 0;
        if (strcmp(source, locals[i].source) != 0 || !sh_env_is_set(locals[i].var)) continue;
        if (sh_env_long(locals[i].var, &n) == SHOAL_OK && n > 0) return (int)n;
    }
    return 0;
}

shoal_result shoal_job_env_read(shoal_job_env *out)
{
    if (!out) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_job_env_read: out is NULL");
    memset(out, 0, sizeof *out);
    out->world = 1;
    out->local_world = 1;
    sh_boot_env e;
    if (sh_boot_read_env(NULL, &e) != SHOAL_OK) return SHOAL_OK; /* no launcher: alone */
    if (e.world <= 1) return SHOAL_OK;
    out->rank = e.rank;
    out->world = e.world;
    out->launcher = e.source;
    out->local_world = local_world_of(e.source);
    return SHOAL_OK;
}

/* One line to the launcher on the pipe it passed (shorter than PIPE_BUF: written whole). */
static void note(const char *line)
{
    long fd = -1;
    if (!sh_env_is_set("SHOAL_LAUNCH_FD") || sh_env_long("SHOAL_LAUNCH_FD", &fd) != SHOAL_OK) return;
    if (write((int)fd, line, strlen(line)) < 0) { /* the launcher is gone: nothing to tell */
    }
}

void shoal_job_note_dropped(int rank)
{
    char line[32];
    snprintf(line, sizeof line, "dropped %d\n", rank);
    note(line);
}

void sh_job_note_elastic(void) { note("elastic\n"); }
