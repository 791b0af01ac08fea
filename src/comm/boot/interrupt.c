/* interrupt.c — the rendezvous's watch for SIGINT and SIGTERM: a handler that notes the
 * signal and hands it on to the process's own, installed only while a communicator is made.
 * Not here: the waits that look at it (sock.c, tcp.c).
 * Proved by tests/comm/test_rendezvous.c. */
#include "comm/boot/interrupt.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

enum { NSIGS = 2 };
static const int sigs[NSIGS] = {SIGINT, SIGTERM};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int watchers;              /* under mu */
static _Atomic int watching;      /* watchers > 0, for the handler and the waits */
static _Atomic int caught;        /* the signal seen while watching */
static struct sigaction saved[NSIGS];
static int installed[NSIGS];

static void on_signal(int sig, siginfo_t *si, void *uc)
{
    if (atomic_load(&watching)) atomic_store(&caught, sig);
    const struct sigaction *old = &saved[sig == SIGTERM];
    if (old->sa_flags & SA_SIGINFO) {
        if (old->sa_sigaction) old->sa_sigaction(sig, si, uc);
    } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        old->sa_handler(sig);
    }
}

void sh_interrupt_watch(int on)
{
    pthread_mutex_lock(&mu);
    if (on && watchers++ == 0) {
        atomic_store(&caught, 0);
        for (int i = 0; i < NSIGS; i++) {
            struct sigaction cur;
            installed[i] = 0;
            if (sigaction(sigs[i], NULL, &cur) != 0) continue;
            int is_fn = (cur.sa_flags & SA_SIGINFO) ? cur.sa_sigaction != NULL
                                                    : cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN;
            if (!is_fn) continue; /* the default ends the process at once; ignoring is the process's choice */
            saved[i] = cur;
            struct sigaction mine;
            memset(&mine, 0, sizeof mine);
            mine.sa_sigaction = on_signal;
            mine.sa_mask = cur.sa_mask;
            mine.sa_flags = SA_SIGINFO | (cur.sa_flags & SA_RESTART); /* polls see EINTR regardless */
            installed[i] = sigaction(sigs[i], &mine, NULL) == 0;
        }
        atomic_store(&watching, 1);
    } else if (!on && --watchers == 0) {
        atomic_store(&watching, 0);
        for (int i = 0; i < NSIGS; i++) {
            if (!installed[i]) continue;
            struct sigaction back = saved[i];
            /* A handler the kernel would have reset after one signal, as if it had. */
            if ((back.sa_flags & SA_RESETHAND) && atomic_load(&caught) == sigs[i]) {
                memset(&back, 0, sizeof back);
                back.sa_handler = SIG_DFL;
            }
            sigaction(sigs[i], &back, NULL);
            installed[i] = 0;
        }
    }
    pthread_mutex_unlock(&mu);
}

int sh_interrupted(void) { return atomic_load(&watching) ? atomic_load(&caught) : 0; }

const char *sh_interrupt_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }
