"""test_errors.py — proves that bad buffers are clear ValueErrors, that failures between
ranks are shoal's exceptions carrying its message (mismatched calls, a killed rank named, a
deadline), and that Ctrl-C in a blocking call or a wait raises KeyboardInterrupt within a
second with the GIL released meanwhile, leaving the communicator refused, not hung."""
import os
import signal
import time

import numpy as np
import pytest

import shoal
from conftest import Ranks


@pytest.fixture(scope="module")
def comm():
    return shoal.init()


def test_non_contiguous_buffer_is_a_value_error(comm):
    a = np.zeros((4, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="not C-contiguous"):
        comm.allreduce(a[:, 1])
    with pytest.raises(ValueError, match="not C-contiguous"):
        comm.allreduce(a.T)
    with pytest.raises(ValueError, match="allreduce: out"):
        comm.allreduce(np.zeros(4, dtype=np.float32), out=a[:, 0])


def test_read_only_buffer_is_a_value_error(comm):
    a = np.zeros(4, dtype=np.float32)
    a.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        comm.allreduce(a)
    with pytest.raises(ValueError, match="read-only"):
        comm.broadcast(bytes(4))
    out = np.zeros(4, dtype=np.float32)
    comm.allreduce(a, out=out)  # read-only input, written output: fine


def test_types_and_sizes_shoal_lacks_are_value_errors(comm):
    with pytest.raises(ValueError, match="not a type shoal reduces"):
        comm.allreduce(np.zeros(4, dtype=np.int16))
    with pytest.raises(ValueError, match="not a type shoal reduces"):
        comm.allreduce(np.zeros(4, dtype=np.complex64))
    with pytest.raises(ValueError, match="out holds 3 elements, it must hold 4"):
        comm.allreduce(np.zeros(4, dtype=np.float32), out=np.zeros(3, dtype=np.float32))
    with pytest.raises(ValueError, match="out holds float64"):
        comm.allreduce(np.zeros(4, dtype=np.float32), out=np.zeros(4, dtype=np.float64))
    with pytest.raises(ValueError, match="op 'mean-ish'"):
        comm.allreduce(np.zeros(4, dtype=np.float32), op="mean-ish")
    with pytest.raises(TypeError, match="no buffer protocol"):
        comm.allreduce([1.0, 2.0])
    with pytest.raises(shoal.InvalidError, match="root 3 is not a rank"):
        comm.broadcast(np.zeros(4, dtype=np.float32), root=3)


def test_a_closed_communicator_refuses_calls():
    c = shoal.init().split(0)
    c.close()
    with pytest.raises(shoal.BrokenError, match="closed"):
        c.barrier()


def test_mismatched_calls_raise_mismatch_error_on_every_rank():
    res = Ranks(2, "faults.py", "mismatch").wait()
    for r, (rc, out) in enumerate(res):
        assert "GOT MismatchError" in out and "code=SHOAL_ERR_MISMATCH" in out, "rank %d: %s" % (r, out)
        assert "10" in out and "20" in out, "rank %d: the message names neither count: %s" % (r, out)


def test_a_killed_rank_is_named():
    res = Ranks(3, "faults.py", "killed", SHOAL_TIMEOUT=3000).wait()
    assert res[2][0] == -signal.SIGKILL
    for r in (0, 1):
        rc, out = res[r]
        assert "GOT PeerError" in out or "GOT TimeoutError" in out, "rank %d: %s" % (r, out)
        assert "rank 2" in out, "rank %d: the error does not name rank 2: %s" % (r, out)


def test_a_deadline_is_shoal_timeout_error():
    res = Ranks(2, "faults.py", "timeout", SHOAL_TIMEOUT=1500).wait()
    out = res[0][1]
    assert "GOT TimeoutError" in out and "builtin TimeoutError: True" in out, out
    assert "rank 1" in out, out


@pytest.mark.parametrize("mode", ["ctrlc", "ctrlc_wait"])
def test_ctrl_c_in_a_blocking_call_raises_keyboard_interrupt_within_a_second(mode):
    ranks = Ranks(2, "faults.py", mode, SHOAL_TIMEOUT=30000)
    p0 = ranks.procs[0]
    line = p0.stdout.readline()
    assert line.strip() == "waiting", line
    time.sleep(0.3)  # well inside the call
    t0 = time.monotonic()
    p0.send_signal(signal.SIGINT)
    line = p0.stdout.readline()
    took = time.monotonic() - t0
    assert line.startswith("INTERRUPTED"), line
    assert took < 1.0, "KeyboardInterrupt came %.2f s after SIGINT" % took
    ticks = int(line.split()[-1])
    assert ticks > 50, "another Python thread barely ran while the call waited: %s" % line
    # The rest of rank 0's lines through the same reader: communicate() would miss what
    # readline() already buffered.
    p0.wait(timeout=60)
    out0 = p0.stdout.read()
    out1 = ranks.wait()[1][1]
    assert p0.returncode == 0 and "GOT BrokenError" in out0 and "interrupted" in out0, (p0.returncode, out0)
    assert "GOT PeerError" in out1 and "rank 0" in out1, out1
