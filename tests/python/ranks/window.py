"""window.py — one rank of tests/python/test_window.py: shared buffers (shoal._shoal.window)
under collectives, the communicator closed under a live buffer, shoal.torch's buckets in one.
Prints "window: N passed, N failed"."""
import sys

import numpy as np

import shoal
from shoal import _shoal

comm = shoal.init()
passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("rank %d FAILED: %s" % (comm.rank, what), flush=True)


# a zeroed, writable block of a shared window
n = (3 << 20) // 4 + 5  # past the one-host allreduce's threshold, not a round size
w = _shoal.window(comm, n * 4)
check(w is not None, "window on ranks of one host gives a buffer")
a = np.frombuffer(w, dtype=np.float32)
check(a.flags.writeable and a.size == n, "the buffer is writable and holds nbytes")
check(not a.any(), "the buffer starts zeroed")
# sums and averages in place, blocking and started, equal numpy's
parts = [np.random.default_rng(r).standard_normal(n).astype(np.float32) for r in range(comm.size)]
want = parts[0].copy()
for p in parts[1:]:
    want += p
a[:] = parts[comm.rank]
comm.allreduce(a, op="sum")
check(np.allclose(a, want, rtol=1e-6, atol=1e-6), "allreduce sum in place in a window")
a[:] = parts[comm.rank]
comm.allreduce_start(a, op="avg").wait()
check(np.allclose(a, want / comm.size, rtol=1e-6, atol=1e-6), "allreduce_start avg in place in a window")
# out of place from private memory into a second window
w2 = _shoal.window(comm, n * 4)
b = np.frombuffer(w2, dtype=np.float32)
comm.allreduce(parts[comm.rank], op="sum", out=b)
check(np.allclose(b, want, rtol=1e-6, atol=1e-6), "allreduce from private memory into a window")
# bad arguments: one clear error each
for args, exc in (((comm, 0), ValueError), ((comm, -4), ValueError), ((object(), 16), TypeError)):
    try:
        _shoal.window(*args)
        check(False, "window%r raises %s" % (args[1:], exc.__name__))
    except exc:
        check(True, "")

# shoal.torch's buckets lie in a window: the gradients are views of it
if len(sys.argv) > 1 and sys.argv[1] == "torch":
    import torch
    import shoal.torch as st
    st.init(comm)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 300), torch.nn.ReLU(), torch.nn.Linear(300, 10))
    opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters(), first_bucket_mb=0.01)
    win = getattr(opt, "_window", None)
    check(win is not None, "the optimizer's buckets got a window")
    base = np.frombuffer(win, dtype=np.uint8).ctypes.data if win is not None else 0
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(comm.rank))
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.synchronize()
    inside = [base <= p.grad.data_ptr() < base + len(memoryview(win)) for p in model.parameters()] if win else []
    check(len(inside) == 4 and all(inside), "every gradient is a view of the window")
    g = model[0].weight.grad.clone()
    every = np.zeros((comm.size,) + tuple(g.shape), dtype=np.float32)
    comm._allgather(g.numpy().copy(), every, None)
    check(all(np.array_equal(every[0], every[r]) for r in range(comm.size)), "the averaged gradients agree")
    opt.step()

# closing under a live buffer: calls refuse, the memory stays until the buffer goes
comm.close()
try:
    comm.allreduce(a)
    check(False, "a call on a closed communicator raises")
except shoal.BrokenError:
    check(True, "")
a[:] = 7
b[:] = 7
check(float(a.sum() + b.sum()) == 14.0 * n, "the buffers stay mapped after close()")
del a, b, w, w2
print("window: %d passed, %d failed" % (passed, failed), flush=True)
