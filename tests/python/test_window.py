"""test_window.py — proves shoal._shoal.window (python/_shoal_window.c) on 2 and 3 ranks of one
host (ranks/window.py holds the checks): a zeroed writable buffer, allreduces in and into it
against numpy's sums, one clear error per bad argument, close() under a live buffer (calls
refuse, the memory stays), shoal.torch's gradient buckets inside one; one rank gets a buffer or
None, never a crash."""
import numpy as np

from conftest import launch, need_torch


def test_window_collectives_and_close_on_2_and_3_ranks():
    for n in (2, 3):
        rc, out = launch(n, "window.py", timeout=120)
        assert rc == 0, out
        assert out.count("window: ") == n and out.count(" 0 failed") == n, out


def test_torch_buckets_live_in_a_window():
    need_torch()
    rc, out = launch(2, "window.py", "torch", timeout=120)
    assert rc == 0, out
    assert out.count(" 0 failed") == 2, out


def test_window_alone():
    import shoal
    from shoal import _shoal
    comm = shoal.init()
    w = _shoal.window(comm, 4096)
    if w is not None:
        a = np.frombuffer(w, dtype=np.float32)
        a[:] = 3
        comm.allreduce(a)
        assert (a == 3).all()
