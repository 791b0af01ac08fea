"""shoal from Python: the communication library on numpy arrays and tensors, the network
engine, and the training job.

    import shoal
    comm = shoal.init()            # every rank of `shoal launch`, mpirun or srun; alone: 1 rank
    comm.allreduce(a)              # in place; op="avg", out=b, ...

Not here: the PyTorch plug-in (shoal.torch), to_torch (shoal.to_torch's module), the C side
(python/_shoal*.c). Proved by tests/python/.
"""
import atexit as _atexit
import os as _os

from . import _shoal
from ._shoal import (Error, PeerError, TimeoutError, MismatchError, BrokenError, InvalidError,
                     FormatError, Compressor, Handle, DTYPES, job_env)

__all__ = ["init", "Comm", "Error", "PeerError", "TimeoutError", "MismatchError", "BrokenError",
           "InvalidError", "FormatError", "Compressor", "Handle", "DTYPES", "job_env", "Net",
           "train", "to_torch", "finalize"]


class Comm(_shoal.Comm):
    """A communicator over the ranks of a job. Collectives take any C-contiguous buffer
    (numpy arrays, torch CPU tensors, bytearray, memoryview) and work in place on it; every
    rank must make the same calls in the same order with the same counts and dtypes."""

    def allgather(self, a, out=None, dtype=None):
        """allgather(a, out=None) -> out: every rank's a, rank r's at block r. Without out a
        new array of shape (size, *a.shape) (numpy and torch inputs) is returned."""
        if out is None:
            out = _new_blocks(a, self.size)
        return self._allgather(a, out, dtype)

    def reduce_scatter(self, a, out=None, op="sum", dtype=None):
        """reduce_scatter(a, out=None, op="sum") -> out: block `rank` of the reduction of a
        (a holds size equal blocks). Without out: a new array of the block's shape."""
        if out is None:
            out = _new_block(a, self.size)
        return self._reduce_scatter(a, out, op, dtype)

    def alltoall(self, a, out=None, dtype=None):
        """alltoall(a, out=None) -> out: block p of a goes to rank p; block p of out came
        from rank p. Without out: a new array shaped as a."""
        if out is None:
            out = _new_like(a)
        return self._alltoall(a, out, dtype)

    def __repr__(self):
        return "<shoal.Comm rank %d of %d>" % (self.rank, self.size)


_world = None


def init(timeout_ms=0, transport=None, algo=None):
    """init() -> the job's communicator: every rank `shoal launch -n N`, mpirun or srun
    started (the same environment variables and job-key rules as the C library). A process
    no launcher started gets a communicator of one rank. Idempotent: later calls return the
    same communicator (their options are ignored). timeout_ms: the deadline of every call
    (0: SHOAL_TIMEOUT); transport: "shm", "tcp" (None: automatic); algo: "ring", "rd", ..."""
    global _world
    if _world is None:
        _world = Comm._create(timeout_ms, transport, algo)
    return _world


def finalize():
    """Release the job's communicator (sockets, shared memory); at exit this runs by itself."""
    global _world
    if _world is not None:
        _world.close()
    _world = None


_atexit.register(finalize)
_os.register_at_fork(after_in_child=_shoal._forget_watcher)


# ---- results of the right type and shape ----

def _np():
    import numpy
    return numpy


def _torch_mod(a):
    t = type(a)
    return t.__module__.startswith("torch") and hasattr(a, "data_ptr")


def _new_like(a, shape=None):
    if _torch_mod(a):
        import torch
        return torch.empty(a.shape if shape is None else shape, dtype=a.dtype)
    if isinstance(a, bytearray):
        return bytearray(len(a) if shape is None else _prod(shape))
    np = _np()
    arr = np.asarray(a)
    return np.empty(arr.shape if shape is None else shape, dtype=arr.dtype)


def _prod(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _shape(a):
    if isinstance(a, (bytearray, bytes)):
        return (len(a),)
    if isinstance(a, memoryview):
        return tuple(a.shape)
    return tuple(a.shape)


def _new_blocks(a, n):
    return _new_like(a, (n,) + _shape(a))


def _new_block(a, n):
    shape = _shape(a)
    if len(shape) > 1 and shape[0] == n:
        return _new_like(a, shape[1:])
    total = _prod(shape)
    if total % n:
        raise ValueError("reduce_scatter: %d elements do not split into %d equal blocks" % (total, n))
    return _new_like(a, (total // n,))


# ---- torch tensors through the buffer protocol ----

def _adapt(obj, what):
    """A torch CPU tensor as a numpy view of its memory (zero copy): (view, dtype name)."""
    if not _torch_mod(obj):
        raise TypeError("%s: a %s has no buffer protocol; pass a numpy array, a torch CPU tensor, "
                        "a bytearray or a memoryview" % (what, type(obj).__name__))
    import torch
    if obj.device.type != "cpu":
        raise ValueError("%s: the tensor is on %s; shoal works on CPU memory (tensor.cpu())"
                         % (what, obj.device))
    if not obj.is_contiguous():
        raise ValueError("%s: the tensor is not contiguous (a slice or a transpose?); shoal works in "
                         "place on contiguous memory: pass tensor.contiguous()" % what)
    t = obj.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy(), "bfloat16"
    if t.dtype == torch.bool:
        raise ValueError("%s: bool tensors are not a type shoal reduces" % what)
    return t.numpy(), None


_shoal._set_adapter(_adapt)


def __getattr__(name):
    # The engine and torch parts load on first use: importing shoal for collectives stays cheap.
    if name in ("Net", "train"):
        from . import _engine
        return getattr(_engine, name)
    if name == "to_torch":
        from ._to_torch import to_torch
        return to_torch
    raise AttributeError("module 'shoal' has no attribute %r" % name)
