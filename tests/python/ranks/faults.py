"""faults.py MODE — one rank of tests/python/test_errors.py, failing on purpose:
  mismatch    rank 0 reduces 10 floats, the others 20: every rank gets shoal.MismatchError
  killed      the last rank kills itself: the others get shoal.PeerError naming it
  ctrlc       rank 0 waits in a barrier the others reach 3 s late; the test sends it SIGINT
  ctrlc_wait  the same in Handle.wait() of a started allreduce
  timeout     rank 0 waits in a barrier rank 1 reaches after SHOAL_TIMEOUT
Each prints one line saying what it got."""
import os
import signal
import sys
import threading
import time

import numpy as np

import shoal

mode = sys.argv[1]
comm = shoal.init()
R, N = comm.rank, comm.size


def say(*a):
    print(*a, flush=True)


def got(e):
    say("GOT %s %s code=%s" % (type(e).__name__, e, getattr(e, "code", "")))


if mode == "mismatch":
    try:
        comm.allreduce(np.ones(10 if R == 0 else 20, dtype=np.float32))
        say("NO ERROR")
    except shoal.Error as e:
        got(e)
elif mode == "killed":
    comm.barrier()
    if R == N - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    a = np.ones(1 << 20, dtype=np.float32)
    try:
        for _ in range(100):
            comm.allreduce(a)
        say("NO ERROR")
    except shoal.Error as e:
        got(e)
elif mode in ("ctrlc", "ctrlc_wait"):
    comm.barrier()
    if R == 0:
        ticks = [0]
        stop = threading.Event()

        def count():
            while not stop.is_set():
                ticks[0] += 1
                time.sleep(0.001)

        th = threading.Thread(target=count)
        th.start()
        a = np.ones(1000, dtype=np.float32)
        say("waiting")
        t0 = time.monotonic()
        try:
            if mode == "ctrlc":
                comm.barrier()
            else:
                comm.allreduce_start(a).wait()
            say("NO INTERRUPT")
        except KeyboardInterrupt:
            # the other thread ran while the call waited: the GIL was released
            say("INTERRUPTED after %.3f s, thread ticks %d" % (time.monotonic() - t0, ticks[0]))
        stop.set()
        th.join()
        try:
            comm.allreduce(a)
            say("USABLE")
        except shoal.Error as e:
            got(e)
    else:
        time.sleep(3)
        try:
            for _ in range(3):  # what rank 0 called, then more
                if mode == "ctrlc":
                    comm.barrier()
                else:
                    comm.allreduce(np.ones(1000, dtype=np.float32))
            say("NO ERROR")
        except shoal.Error as e:
            got(e)
elif mode == "timeout":
    if R == 1:
        time.sleep(4)
        sys.exit(0)
    t0 = time.monotonic()
    try:
        comm.barrier()
        say("NO ERROR")
    except shoal.Error as e:
        say("after %.1f s" % (time.monotonic() - t0))
        got(e)
        say("builtin TimeoutError: %s" % isinstance(e, TimeoutError))
