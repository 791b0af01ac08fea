/* env.c — the table of every environment variable shoal reads, and typed access to it.
 * Not here: what each subsystem does with the value.
 * Proved by tests/base/test_env.c. */
#include "base/env.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

typedef sh_env_var env_var;

#define NOT_INT 1, 0

/* One row per variable. Keep groups together: shoal's own, then the launchers'. */
static const env_var table[] = {
    /* ranks and rendezvous (set by `shoal launch`, as torchrun does) */
    {"SHOAL_RANK", NULL, 0, 1 << 20, "this process's rank in the job"},
    {"SHOAL_WORLD_SIZE", NULL, 1, 1 << 20, "number of ranks in the job"},
    {"SHOAL_LOCAL_RANK", NULL, 0, 1 << 20, "rank among the ranks on this host"},
    {"SHOAL_LOCAL_SIZE", NULL, 1, 1 << 20, "number of ranks on this host"},
    {"SHOAL_MASTER_ADDR", "127.0.0.1", NOT_INT, "address of rank 0's rendezvous store"},
    {"SHOAL_MASTER_PORT", "29500", 1, 65535, "TCP port of rank 0's rendezvous store"},
    {"SHOAL_JOB_KEY", NULL, NOT_INT,
     "secret every connection of the job proves it holds (set by shoal launch)"},
    {"SHOAL_LAUNCH_FD", NULL, 0, 1 << 20,
     "set by shoal launch: a pipe on which a rank tells the launcher that the job dropped a rank "
     "or is elastic"},
    {"SHOAL_HOST_ID", NULL, NOT_INT,
     "override this process's host identity (ranks with the same id share memory)"},
    /* communication */
    {"SHOAL_TRANSPORT", "auto", NOT_INT, "auto, shm, tcp or mpi: force one transport"},
    {"SHOAL_ALGO", "auto", NOT_INT,
     "auto, ring, rd (recursive doubling), rhd (halving-doubling), tree, hier or mpi"},
    {"SHOAL_TIMEOUT", "60000", 1, 86400000, "deadline of every blocking operation, in ms"},
    {"SHOAL_ELASTIC_SETTLE_MS", "1000", 0, 600000,
     "elastic jobs: how long the regroup waits for a rank that is neither back nor surely lost "
     "after the last one came, in ms"},
    {"SHOAL_SOCKET_IFNAME", NULL, NOT_INT,
     "network interface to bind and connect on (default: the route to the master)"},
    {"SHOAL_TCP_CONGESTION", NULL, NOT_INT,
     "TCP congestion control of shoal's connections: an algorithm the kernel allows (cubic, reno, "
     "...) or system (the default: the kernel's)"},
    {"SHOAL_SOCKET_SNDBUF_KB", "128", 0, 1 << 20,
     "send buffer of each TCP connection in KiB (the kernel doubles it; 0: the kernel's "
     "autotuning); raise it where rate x round trip passes it (100 Gbit/s x 20 us = 250 KiB)"},
    {"SHOAL_BIND_ALL", "0", 0, 1, "1: listen on every address instead of one interface"},
    {"SHOAL_SECURE", "0", 0, 1,
     "1: every TCP link between ranks is encrypted and authenticated (AES-256-GCM, keys per "
     "connection from the job key); every rank must have the same value"},
    {"SHOAL_PORT_RANGE", NULL, NOT_INT,
     "LO-HI: the TCP ports ranks listen on for each other, one each (default: any free port)"},
    {"SHOAL_CHUNK_BYTES", "0", 0, 1L << 30,
     "pipelining chunk of the collectives in bytes (0: chosen by size)"},
    {"SHOAL_COMM_RT", "1", 0, 1,
     "jobs across hosts: 1 runs the communicator's thread at the lowest real-time priority where "
     "allowed (root, CAP_SYS_NICE), so that messages do not wait behind compute threads"},
    {"SHOAL_SPIN_US", "50", 0, 10000000, "how long a waiting rank spins before it blocks, in us"},
    {"SHOAL_BIND", "core", NOT_INT,
     "shoal launch: core (pin each rank to its share of the cores, as mpirun does) or none"},
    /* training */
    {"SHOAL_DP_SHARD", "1", 0, 1,
     "data parallel: 1 lets each rank update only its block of a large bucket and send the "
     "weights (ZeRO stage 1, one host), 0 makes every rank update everything"},
    {"SHOAL_DP_WINDOW", "1", 0, 1,
     "data parallel with SHOAL_DP_SHARD=1 on one host: 1 keeps one copy of the weights (and "
     "every rank's gradients) in shared memory, 0 gives each rank its own copy"},
    {"SHOAL_DP_OVERLAP", "1", 0, 2,
     "data parallel with SHOAL_DP_SHARD=1 and a copy of the weights per rank: the next step's "
     "forward overlaps the tail of this step's gradient exchange; 1: across hosts, 2: also on one "
     "host, 0: never"},
    {"SHOAL_DP_CHUNK_KB", "256", 0, 1 << 20,
     "data parallel with SHOAL_DP_OVERLAP over 2 ranks: cut gradient buckets into chunks (at most 8 "
     "a bucket, of at least this many KiB) so that the first layers' go first (0: whole buckets)"},
    {"SHOAL_DP_AHEAD_KB", "1280", 0, 1 << 22,
     "data parallel with SHOAL_DP_OVERLAP: KiB of gradients (at least half of them) backward may "
     "start before its end; the rest goes then, the first layers' first"},
    {"SHOAL_DP_GRAD_ROWS", "32", 0, 1 << 24,
     "data parallel with SHOAL_DP_CHUNK_KB: backward offers a [connected] layer's weight gradient "
     "in blocks of this many rows as it computes them, so its chunks go before the layer's backward "
     "ends (the same bits; 0: whole layers)"},
    {"SHOAL_PIPE_DEFER", "1", 0, 1,
     "--pipeline: 1 leaves the weight gradients of [connected] layers for after the stage's last "
     "backward (filling its idle time), 0 computes them in each micro-batch's backward (the bubble "
     "is then the 1F1B schedule's (S-1)/(M+S-1))"},
    {"SHOAL_PIPE_PACK", "2", 0, 3,
     "--pipeline: 1 keeps a stage's [connected] weights packed for its micro-batches' products "
     "(its update packs them; W^T for forward, W for the input gradient), 3 W alone, 0 neither, "
     "2 by the machine: on Intel under 2 MiB of L2 a core neither at 24-48 rows (the few-row "
     "products as fast, the update a third of the cost), else both; from 2 MiB and on AMD's "
     "AVX-512 CPUs W alone from 16 rows, both below"},
    /* engine */
    {"SHOAL_THREADS", "0", 0, 1024, "kernel threads per rank (0: the CPUs the process may run on, shared by the ranks on its host)"},
    {"SHOAL_DATA_DIR", "/usr/share/datasets/fashion-mnist", NOT_INT,
     "default dataset directory for shoal train/test"},
    {"SHOAL_GEMM", "auto", NOT_INT, "auto, openblas or naive: the matrix-product kernels"},
    {"OPENBLAS_CORETYPE", NULL, NOT_INT,
     "OpenBLAS kernel family; shoal sets it from the CPU when unset"},
    /* diagnostics */
    {"SHOAL_LOG", "warn", NOT_INT,
     "log level (error, warn, info, debug) and optional subsystems: info,comm,train"},
    {"SHOAL_PS_LOG_MS", "5000", 0, 86400000,
     "shoal train --ps: each server logs every worker's clock this often, in ms (0: at the end only)"},
    {"SHOAL_PLAN_SHM_MBS", "0", 0, 1000000000,
     "shoal plan, --parallel auto: shared memory's allreduce bandwidth in MB/s (0: measured)"},
    {"SHOAL_PLAN_NET_MBS", "0", 0, 1000000000,
     "--parallel auto: a host's network link in MB/s (0: probed by allreduces at start-up)"},
    {"SHOAL_PLAN_CORES", "0", 0, 1 << 16,
     "shoal plan, --parallel auto: cores a host has (0: this machine's); an emulated cluster on one machine "
     "shares its cores among the hosts"},
    {"SHOAL_PLAN_MACHINE_HOSTS", "1", 1, 1 << 16,
     "shoal plan, --parallel auto: hosts that share one machine's cores (an emulated cluster: its hosts)"},
    {"SHOAL_PLAN_NET_US", "0", 0, 10000000,
     "shoal plan, --parallel auto: a network message's latency in us (0: probed, or 50 for shoal plan)"},
    /* launchers that start ranks for us */
    {"OMPI_COMM_WORLD_RANK", NULL, 0, 1 << 20, "Open MPI: rank"},
    {"OMPI_COMM_WORLD_SIZE", NULL, 1, 1 << 20, "Open MPI: world size"},
    {"OMPI_COMM_WORLD_LOCAL_RANK", NULL, 0, 1 << 20, "Open MPI: rank on this host"},
    {"OMPI_COMM_WORLD_LOCAL_SIZE", NULL, 1, 1 << 20, "Open MPI: ranks on this host"},
    {"PMIX_NAMESPACE", NULL, NOT_INT, "Open MPI (PMIx): job namespace (part of the default job key)"},
    {"OMPI_MCA_orte_hnp_uri", NULL, NOT_INT, "Open MPI: launcher address (part of the default job key)"},
    {"OMPI_MCA_orte_precondition_transports", NULL, NOT_INT,
     "Open MPI: random per-job value (part of the default job key)"},
    {"PMI_RANK", NULL, 0, 1 << 20, "MPICH/Hydra (PMI): rank"},
    {"PMI_FD", NULL, 0, 1 << 20,
     "MPICH/Hydra (PMI): this process's connection to mpiexec; without SHOAL_JOB_KEY a rank must hold it"},
    {"PMI_SIZE", NULL, 1, 1 << 20, "MPICH/Hydra (PMI): world size"},
    {"MPI_LOCALRANKID", NULL, 0, 1 << 20, "MPICH/Hydra: rank on this host"},
    {"MPI_LOCALNRANKS", NULL, 1, 1 << 20, "MPICH/Hydra: ranks on this host"},
    {"SLURM_PROCID", NULL, 0, 1 << 20, "Slurm: rank"},
    {"SLURM_NTASKS", NULL, 1, 1 << 20, "Slurm: world size"},
    {"SLURM_LOCALID", NULL, 0, 1 << 20, "Slurm: rank on this host"},
    {"SLURM_JOB_ID", NULL, 0, LONG_MAX, "Slurm: job id (part of the default job key)"},
    {"SLURM_STEP_ID", NULL, 0, LONG_MAX, "Slurm: step id"},
    {"SLURM_STEP_NODELIST", NULL, NOT_INT, "Slurm: the step's nodes (the first is the default master)"},
    {"SLURM_JOB_NODELIST", NULL, NOT_INT, "Slurm: the job's nodes (when the step's are not set)"},
    /* tests */
    {"SHOAL_TEST_SAN", "0", 0, 1, "tests: 1 when running under sanitizers (skip the slow parts)"},
    {"SHOAL_BIN", NULL, NOT_INT, "tests: path of the shoal binary under test"},
    {"SHOAL_TEST_SEAL_FLIP", NULL, NOT_INT,
     "tests: RANK:RECORD, the sealed links of that rank flip a byte of that record on the wire"},
    {"SHOAL_TEST_CMA_FAIL", NULL, NOT_INT,
     "tests: the rank it names fails to read its peers' memory, as a kernel that forbids it would"},
};

static const env_var *lookup(const char *name)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].name, name) == 0) return &table[i];
    return NULL;
}

const char *sh_env_str(const char *name)
{
    const env_var *v = lookup(name);
    SH_ASSERT(v != NULL && "every variable shoal reads is a row in env.c");
    const char *s = getenv(name);
    if (s && *s) return s;
    return v->def;
}

int sh_env_is_set(const char *name)
{
    SH_ASSERT(lookup(name) != NULL);
    const char *s = getenv(name);
    return s && *s;
}

shoal_result sh_env_long(const char *name, long *out)
{
    const env_var *v = lookup(name);
    SH_ASSERT(v != NULL && v->min <= v->max);
    const char *s = sh_env_str(name);
    if (!s) return SH_FAIL(SHOAL_ERR_INVALID, "%s is not set; %s", name, v->help);
    char *end = NULL;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s=\"%s\" is not an integer; expected %ld..%ld (%s)",
                       name, s, v->min, v->max, v->help);
    if (x < v->min || x > v->max)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s=%ld is out of range; expected %ld..%ld (%s)", name,
                       x, v->min, v->max, v->help);
    *out = x;
    return SHOAL_OK;
}

const sh_env_var *sh_env_var_at(size_t i)
{
    return i < sizeof table / sizeof table[0] ? &table[i] : NULL;
}

void sh_env_print(FILE *f)
{
    fprintf(f, "%-28s %-12s %-14s %s\n", "variable", "default", "value", "meaning");
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const char *cur = getenv(table[i].name);
        fprintf(f, "%-28s %-12s %-14s %s\n", table[i].name, table[i].def ? table[i].def : "-",
                cur && *cur ? cur : "-", table[i].help);
    }
}
