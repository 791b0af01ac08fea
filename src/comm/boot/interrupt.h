/* interrupt.h — SIGINT and SIGTERM while a communicator is being made: a process that
 * catches them (shoal train stops on them) would otherwise wait at the rendezvous until the
 * deadline. While the watch is on, shoal's own handler notes the signal and calls the
 * process's handler as before; every wait of the rendezvous looks at least every 250 ms
 * and gives up with SHOAL_ERR_INTERRUPTED. Signals the process leaves at their default
 * (which ends it) or ignores are not touched.
 * Not here: the waits themselves (sock.c, tcp.c), what the caller does next.
 * Proved by tests/comm/test_rendezvous.c. */
#ifndef SH_COMM_INTERRUPT_H
#define SH_COMM_INTERRUPT_H

/* Begin (on = 1) or end (on = 0) watching; nested calls count, the last end restores the
 * process's handlers. Thread-safe. */
void sh_interrupt_watch(int on);
/* The signal caught while watching (SIGINT, SIGTERM), or 0. Async-signal-safe. */
int sh_interrupted(void);
/* "SIGINT", "SIGTERM": its name for messages. */
const char *sh_interrupt_name(int sig);

#endif
