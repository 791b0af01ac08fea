/* launch.h — start N local ranks of a command with the rendezvous variables set, relay
 * their output line by line with a "[rank k] " prefix (or into per-rank files; a rank that
 * notes its stdout is the job's result, sh_cli_stdout_is_result, has it passed as written), forward
 * SIGINT/SIGTERM/SIGHUP, and when one rank fails stop the others and report it; a rank the
 * job dropped (shoal_job_note_dropped) is killed once every other rank has ended.
 * Not here: flags (cmd_launch.c); the ranks' own rendezvous (src/comm/boot/).
 * Proved by tests/cli/test_launch.c. */
#ifndef SH_LAUNCH_H
#define SH_LAUNCH_H

typedef struct {
    int nranks;
    const char *output_dir; /* NULL: prefix lines; else DIR/rank-K.out and .err */
    int grace_ms;           /* after a failure: SIGTERM, then SIGKILL after this long */
    const char *tag;        /* "launch" or "train": names this tool in its messages */
    /* Several machines, as torchrun's --nnodes/--node-rank: this launcher starts ranks
     * node_rank*nranks ... +nranks-1 of nnodes*nranks; master_addr (else the environment's
     * SHOAL_MASTER_ADDR) is node 0's address, the port SHOAL_MASTER_PORT (default 29500),
     * and SHOAL_JOB_KEY must be set to the same key on every node. nnodes 0 or 1: one machine. */
    int nnodes, node_rank;
    const char *master_addr;
} sh_launch_opts;

/* Run argv[0] (searched in PATH) as nranks processes on this machine; returns the exit status to use:
 * 0 when all succeeded, else the first failing rank's code (128 + signal when killed). */
int sh_launch_run(const sh_launch_opts *o, char *const argv[]);

#endif
