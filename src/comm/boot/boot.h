/* boot.h — who this process is in the job (options, shoal launch's variables, Open MPI,
 * MPICH/Hydra, Slurm), the job key, and the rendezvous through rank 0's store that tells
 * every rank every other rank's host.
 * Not here: links between ranks (transport/), the public API (comm.c).
 * Proved by tests/comm/test_boot.c and tests/comm/test_comm.c. */
#ifndef SH_BOOT_H
#define SH_BOOT_H

#include "comm/comm_internal.h"

typedef struct {
    int rank, world;
    char master_addr[256];
    int master_port;
    char job_key[640];
    const char *source; /* "options", "shoal", "openmpi", "mpich", "slurm" */
    int key_is_derived; /* 1: no SHOAL_JOB_KEY; derived from the launcher's job id */
} sh_boot_env;

/* Read rank, world, master and key from o (fields set) then the environment. Errors:
 * SHOAL_ERR_INVALID naming the variable and what to do. */
shoal_result sh_boot_read_env(const shoal_comm_opts *o, sh_boot_env *out);

/* The first host of a Slurm node list ("node[01-04,07],gpu5" -> "node01"): where srun
 * puts task 0, so the master when SHOAL_MASTER_ADDR is unset under Slurm. */
void sh_boot_first_node(const char *nodelist, char *out, size_t cap);

/* Tell `shoal launch` (SHOAL_LAUNCH_FD) that this job is elastic: a rank that ends does not
 * stop the others (job_env.c). Nothing under other launchers. */
void sh_job_note_elastic(void);

/* This host's identity: SHOAL_HOST_ID, else hostname + boot id + network namespace. */
void sh_boot_host_id(char *out, size_t cap);

/* The rendezvous: rank 0 serves the store, every rank connects and publishes its host;
 * returns a communicator with ranks, hosts, store and options filled and no links. */
shoal_result sh_boot_world(const shoal_comm_opts *o, shoal_comm **out);
/* The same; with o->elastic_min > 0 and a job that already runs there, *joining = 1 and
 * *out holds only the store and the options (boot/elastic.c takes it in). */
shoal_result sh_boot_world_or_join(const shoal_comm_opts *o, shoal_comm **out, int *joining);

#endif
