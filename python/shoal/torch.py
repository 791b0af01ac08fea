"""shoal.torch — shoal's collectives under Horovod's names for PyTorch scripts:

    import shoal.torch as st
    st.init()
    st.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = st.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                  compression=st.Compression.none)   # or fp16, bf16, onebit, topk(0.01)
    st.broadcast_optimizer_state(opt, root_rank=0)

The optimizer averages gradients in buckets started from gradient hooks while backward still
runs (as DistributedDataParallel does); compressed gradients go through shoal's codecs with
error feedback, their residuals saved in the optimizer's state_dict. ddp_hook is a
DistributedDataParallel communication hook doing the same for users who keep DDP.
Not here: the collectives themselves (shoal.Comm, python/_shoal_comm.c), the codecs
(src/comm/compress/). Proved by tests/python/test_torch.py (against DDP over gloo)."""
import pickle
import threading
from contextlib import contextmanager

import numpy as np
import torch

import shoal

Average, Sum, Min, Max, Product = "avg", "sum", "min", "max", "prod"
Adasum = "adasum"  # Horovod's; shoal has no such reduction: naming it fails clearly

_comm = None


def init(comm=None):
    """Join the job (shoal.init(): shoal launch, mpirun, srun; alone, one rank). Idempotent."""
    global _comm
    if _comm is None:
        _comm = comm if comm is not None else shoal.init()
    return _comm


def _c():
    if _comm is None:
        raise ValueError("shoal.torch: call st.init() first")
    return _comm


def rank():
    return _c().rank


def size():
    return _c().size


def local_rank():
    return _c().local_rank


def local_size():
    return _c().local_size


def is_initialized():
    return _comm is not None


def _op(op, average):
    if op is None:
        op = Average if average is None or average else Sum
    if op not in (Average, Sum, Min, Max, Product):
        raise ValueError("shoal.torch: op %r: use st.Average, st.Sum, st.Min, st.Max or st.Product (no Adasum)"
                         % (op,))
    return op


def _np(t):
    """A numpy view of a contiguous CPU tensor's memory, and shoal's dtype name for it."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy(), "bfloat16"
    return t.numpy(), None


# ---- collectives on tensors ----

class _Handle:
    def __init__(self, h, out, copy_back=None):
        self.h, self.out, self.copy_back = h, out, copy_back

    def done(self):
        return self.h is None or self.h.test()

    def wait(self):
        if self.h is not None:
            self.h.wait()
            self.h = None
            if self.copy_back is not None:
                self.copy_back.copy_(self.out)
        return self.out


def allreduce_async_(tensor, average=None, name=None, op=None):
    """Start averaging (or summing, ...) tensor over the ranks in place; synchronize(handle)."""
    op = _op(op, average)
    work = tensor if tensor.is_contiguous() else tensor.contiguous()
    if op == Average and not (work.is_floating_point()):
        raise ValueError("shoal.torch: op Average takes floating-point tensors; use st.Sum")
    a, dt = _np(work)
    h = _c().allreduce_start(a, op=op, dtype=dt)
    return _Handle(h, work, tensor if work is not tensor else None)


def allreduce_async(tensor, average=None, name=None, op=None):
    """Start an allreduce into a new tensor (tensor itself untouched)."""
    return allreduce_async_(tensor.detach().clone(memory_format=torch.contiguous_format), average, name, op)


def allreduce_(tensor, average=None, name=None, op=None):
    return synchronize(allreduce_async_(tensor, average, name, op))


def allreduce(tensor, average=None, name=None, compression=None, op=None):
    """A new tensor: tensor averaged over the ranks (op=st.Sum, st.Min, ... otherwise). With
    compression (Compression.fp16, ...; float32 tensors, Average or Sum) it travels encoded,
    without error feedback (one call keeps no residual)."""
    if compression is None or compression.spec is None:
        return synchronize(allreduce_async(tensor, average, name, op))
    op = _op(op, average)
    if tensor.dtype != torch.float32 or op not in (Average, Sum):
        raise ValueError("shoal.torch: compressed allreduce takes float32 tensors and st.Average or st.Sum")
    out = tensor.detach().clone(memory_format=torch.contiguous_format)
    z = shoal.Compressor(compression.spec, max(out.numel(), 1), cols=_cols(out) if out.dim() else 0,
                         error_feedback=False)
    if out.numel():
        z.allreduce(_c(), out.view(-1).numpy(), op)
    return out


def synchronize(handle):
    """Wait for a started operation; returns its output tensor."""
    return handle.wait()


def poll(handle):
    return handle.done()


def broadcast_(tensor, root_rank, name=None):
    work = tensor if tensor.is_contiguous() else tensor.contiguous()
    a, dt = _np(work)
    _c().broadcast(a, root_rank, dtype=dt)
    if work is not tensor:
        tensor.copy_(work)
    return tensor


def broadcast(tensor, root_rank, name=None):
    return broadcast_(tensor.detach().clone(memory_format=torch.contiguous_format), root_rank, name)


def allgather(tensor, name=None):
    """A new tensor: every rank's tensor concatenated along the first dimension."""
    work = tensor.detach().contiguous()
    out = torch.empty((size() * work.shape[0],) + tuple(work.shape[1:]), dtype=work.dtype) if work.dim() else \
        torch.empty(size(), dtype=work.dtype)
    a, dt = _np(work)
    o, _ = _np(out)
    _c()._allgather(a, o, dt)
    return out


def barrier():
    _c().barrier()


def broadcast_object(obj, root_rank=0, name=None):
    """obj from root_rank on every rank (pickled)."""
    c = _c()
    data = pickle.dumps(obj) if c.rank == root_rank else b""
    n = np.array([len(data)], dtype=np.int64)
    c.broadcast(n, root_rank)
    buf = bytearray(data) if c.rank == root_rank else bytearray(int(n[0]))
    c.broadcast(buf, root_rank)
    return obj if c.rank == root_rank else pickle.loads(bytes(buf))


def broadcast_parameters(params, root_rank=0):
    """root_rank's values into every rank's tensors, in place: a state_dict, or
    named_parameters() / (name, tensor) pairs / tensors."""
    if isinstance(params, dict):
        items = sorted(params.items(), key=lambda kv: kv[0])
    else:
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    for _, t in items:
        if torch.is_tensor(t) and t.numel():
            with torch.no_grad():
                broadcast_(t.data if isinstance(t, torch.nn.Parameter) else t, root_rank)


def broadcast_optimizer_state(optimizer, root_rank=0):
    """root_rank's optimizer state (moments, step counts, hyperparameters) on every rank."""
    state = broadcast_object(optimizer.state_dict(), root_rank)
    if rank() != root_rank:
        optimizer.load_state_dict(state)


# ---- compression ----

class Compressor:
    """What a gradient becomes on the wire: shoal's codec spec ("fp16", "1bit", "topk:0.01")
    or None (float32 allreduce)."""

    def __init__(self, spec, error_feedback):
        self.spec, self.error_feedback = spec, error_feedback

    def __repr__(self):
        return "Compression.%s" % (self.spec or "none")


class Compression:
    none = Compressor(None, False)
    fp16 = Compressor("fp16", False)
    bf16 = Compressor("bf16", False)
    onebit = Compressor("1bit", True)

    @staticmethod
    def topk(fraction):
        """The ceil(fraction x n) largest entries of each gradient, the rest kept for later."""
        return Compressor("topk:%g" % fraction, True)


def _cols(p):
    """Row length of a gradient seen as a matrix (output rows): 1-bit's groups."""
    return int(p.numel() // p.shape[0]) if p.dim() > 1 else int(p.numel())


# ---- the optimizer ----

class _Bucket:
    def __init__(self, params, offsets, flat):
        self.params, self.offsets, self.flat = params, offsets, flat
        self.np = flat.numpy()
        self.ready = set()
        self.started = False
        self.handles = []


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op, bucket_mb,
                 first_bucket_mb):
        super(self.__class__, self).__init__(params)
        self._shoal_setup(named_parameters, compression, backward_passes_per_step, op, bucket_mb, first_bucket_mb)

    def _shoal_setup(self, named_parameters, compression, passes, op, bucket_mb, first_bucket_mb):
        self._comm = _c()
        self._op = _op(op, None)
        self._compression = compression or Compression.none
        self._passes = passes
        self._counts = {}
        all_params = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        names = {}
        if named_parameters is not None:
            named = list(named_parameters)
            names = {id(p): n for n, p in named}
            missing = [p for p in all_params if id(p) not in names]
            if missing:
                raise ValueError("shoal.torch: %d parameters of the optimizer are not in named_parameters"
                                 % len(missing))
        self._names = [names.get(id(p), "param.%d" % i) for i, p in enumerate(all_params)]
        for p in all_params:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise ValueError("shoal.torch: parameters must be float32 CPU tensors (%s on %s)"
                                 % (p.dtype, p.device))
        # Buckets in reverse registration order (roughly backward's): the first small, so
        # communication starts early; the order is fixed, the same on every rank.
        self._buckets, self._where = [], {}
        groups, cap, cur, size_b = [], first_bucket_mb * 2 ** 20, [], 0
        for p in reversed(all_params):
            cur.append(p)
            size_b += p.numel() * 4
            if size_b >= cap:
                groups.append(cur)
                cur, size_b, cap = [], 0, bucket_mb * 2 ** 20
        if cur:
            groups.append(cur)
        flats = self._bucket_memory([sum(p.numel() for p in g) for g in groups])
        for g, flat in zip(groups, flats):
            self._add_bucket(g, flat)
        self._next = 0
        self._compressors = {}
        if self._compression.spec:
            for i, p in enumerate(all_params):
                self._compressors[id(p)] = shoal.Compressor(self._compression.spec, p.numel(), cols=_cols(p),
                                                            error_feedback=self._compression.error_feedback)
            self._param_index = {id(p): i for i, p in enumerate(all_params)}
        self._hooks = []
        self._grad_accs = []
        for p in all_params:
            tmp = p.expand_as(p)
            acc = tmp.grad_fn.next_functions[0][0]
            self._hooks.append(acc.register_hook(self._make_hook(p)))
            self._grad_accs.append(acc)

    def _bucket_memory(self, counts):
        """Zeroed float32 tensors of these counts: in one shared window when the ranks share a
        host (allreduces then copy to and from the peers' buckets in user space, not through
        the kernel; the window stays until the communicator closes), else private."""
        align = 16  # elements: each bucket starts on a cache line
        starts, total = [], 0
        for n in counts:
            starts.append(total)
            total += (n + align - 1) // align * align
        buf = shoal._shoal.window(self._comm, total * 4) if self._comm.size > 1 and total else None
        if buf is None:
            return [torch.zeros(n, dtype=torch.float32) for n in counts]
        self._window = buf
        whole = torch.from_numpy(np.frombuffer(buf, dtype=np.float32))
        return [whole[o:o + n] for o, n in zip(starts, counts)]

    def _add_bucket(self, params, flat):
        offsets, off = [], 0
        for p in params:
            offsets.append(off)
            off += p.numel()
        b = _Bucket(params, offsets, flat)
        for k, p in enumerate(params):
            self._where[id(p)] = (len(self._buckets), k)
        self._buckets.append(b)

    def _slot(self, b, k):
        p = b.params[k]
        return b.flat[b.offsets[k]:b.offsets[k] + p.numel()].view_as(p)

    def _make_hook(self, p):
        def hook(*unused):
            c = self._counts.get(id(p), 0) + 1
            self._counts[id(p)] = c
            if c < self._passes:
                return
            bi, k = self._where[id(p)]
            b = self._buckets[bi]
            slot = self._slot(b, k)
            g = p.grad
            if g is not None and g.data_ptr() != slot.data_ptr():
                # the gradient lives in the bucket from now on: backward adds into it in place
                slot.copy_(g)
                p.grad = slot
            b.ready.add(k)
            if len(b.ready) == len(b.params):
                self._start_ready()
        return hook

    def _start_ready(self):
        """Start the ready buckets in bucket order, so every rank starts the same sequence."""
        while self._next < len(self._buckets) and len(self._buckets[self._next].ready) == \
                len(self._buckets[self._next].params):
            self._start(self._buckets[self._next])
            self._next += 1

    def _start(self, b):
        b.started = True
        if not self._compressors:
            b.handles.append(self._comm.allreduce_start(b.np, op=self._op))
            return
        for k, p in enumerate(b.params):
            z = self._compressors[id(p)]
            view = b.np[b.offsets[k]:b.offsets[k] + p.numel()]
            b.handles.append(z.allreduce_start(self._comm, view, "avg" if self._op == Average else "sum"))

    def synchronize(self):
        """Wait for every bucket's exchange (starting those whose gradients never came: an
        unused parameter counts as zero); the gradients are then averaged in place."""
        for bi, b in enumerate(self._buckets):
            if not b.started and bi >= self._next:
                for k, p in enumerate(b.params):
                    if k not in b.ready:
                        slot = self._slot(b, k)
                        if p.grad is not None and p.grad.data_ptr() != slot.data_ptr():
                            slot.copy_(p.grad)
                        elif p.grad is None:
                            slot.zero_()
                        p.grad = slot
                        b.ready.add(k)
        self._start_ready()
        for b in self._buckets:
            for h in b.handles:
                h.wait()
            b.handles = []
            b.ready = set()
            b.started = False
        self._next = 0
        self._counts = {}

    @contextmanager
    def skip_synchronize(self):
        """step() inside this block does not synchronize (call synchronize() yourself first)."""
        self._skip_sync = True
        try:
            yield
        finally:
            self._skip_sync = False

    def step(self, closure=None):
        if not getattr(self, "_skip_sync", False):
            self.synchronize()
        return super(self.__class__, self).step(closure)

    def zero_grad(self, set_to_none=False):
        # in place by default: the gradients stay views of the buckets
        return super(self.__class__, self).zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        sd = super(self.__class__, self).state_dict()
        if self._compressors:
            res = {}
            for pid, z in self._compressors.items():
                res[self._param_index[pid]] = torch.from_numpy(np.asarray(z.state()).copy())
            sd["shoal_residuals"] = res
        return sd

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        res = state_dict.pop("shoal_residuals", None)
        super(self.__class__, self).load_state_dict(state_dict)
        if res is not None and self._compressors:
            for pid, z in self._compressors.items():
                t = res.get(self._param_index[pid])
                if t is not None:
                    np.asarray(z.state())[:] = t.numpy()


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, bucket_mb=4.0, first_bucket_mb=1.0):
    """Wrap a torch optimizer: gradients are averaged over the ranks as backward makes them
    (bucket by bucket, overlapping the rest of backward); step() waits for them, then steps.
    compression: Compression.none, fp16, bf16, onebit or topk(fraction) (shoal's codecs; onebit
    and topk with error feedback, whose residuals state_dict() holds). backward_passes_per_step:
    local passes accumulated before the exchange."""
    if op not in (Average, Sum):
        raise ValueError("shoal.torch: DistributedOptimizer takes op=st.Average or st.Sum, not %r" % (op,))
    init()
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op, bucket_mb,
               first_bucket_mb)


# ---- DistributedDataParallel's communication hook ----

class HookState:
    """State for ddp_hook: compression (Compression.*), one compressor per DDP bucket."""

    def __init__(self, compression=None, comm=None):
        self.compression = compression or Compression.none
        self.comm = comm
        self.compressors = {}


_waiters = []
_waiter_lock = threading.Lock()


def _complete_later(handle, fut, value):
    """Complete fut with value once handle is done, from a thread that waits on it (the GIL
    released in the wait), so backward goes on meanwhile."""
    def run():
        try:
            handle.wait()
            fut.set_result(value)
        except BaseException as e:  # noqa: B902 - the future carries it to DDP
            fut.set_exception(e)
    th = threading.Thread(target=run, daemon=True)
    th.start()
    with _waiter_lock:
        _waiters[:] = [t for t in _waiters if t.is_alive()] + [th]


def ddp_hook(state, bucket):
    """DistributedDataParallel communication hook: model.register_comm_hook(state, st.ddp_hook)
    with state None (float32 average) or HookState(compression=...). The bucket's gradients
    are averaged through shoal instead of the process group."""
    comm = (state.comm if isinstance(state, HookState) and state.comm is not None else None) or init()
    buf = bucket.buffer()
    fut = torch.futures.Future()
    a, _ = _np(buf)
    comp = state.compression if isinstance(state, HookState) else Compression.none
    if comp.spec and buf.dtype == torch.float32:
        z = state.compressors.get(bucket.index())
        if z is None or z.count != buf.numel():
            z = shoal.Compressor(comp.spec, buf.numel(), error_feedback=comp.error_feedback)
            state.compressors[bucket.index()] = z
        h = z.allreduce_start(comm, a, "avg")
    else:
        h = comm.allreduce_start(a, op="avg")
    _complete_later(h, fut, buf)
    return fut
