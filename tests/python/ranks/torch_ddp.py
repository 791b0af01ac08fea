"""torch_ddp.py GLOO_PORT — one rank of tests/python/test_torch.py: the same model trained 20
steps three ways from the same start on the same per-rank data, DistributedDataParallel over
gloo (the reference), st.DistributedOptimizer, and DDP with st.ddp_hook; their weights must
agree within 1e-5 relative. Then: accumulation over two passes, every compression (loss falls,
ranks stay identical, residuals in the state_dict and back), Horovod's other calls, torch
tensors in shoal.Comm. Prints "rank R: N checks, 0 failed"; exits 1 on any failure."""
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import shoal
import shoal.torch as st

torch.set_num_threads(1)
st.init()
R, N = st.rank(), st.size()
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % sys.argv[1], rank=R, world_size=N)
checks, fails = 0, []


def check(cond, msg):
    global checks
    checks += 1
    if not cond:
        fails.append(msg)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 32), nn.Tanh(), nn.Linear(32, 10))


def cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 8, 3),
                         nn.ReLU(), nn.Flatten(), nn.Linear(8 * 2 * 2, 10))


def data(step, rank=R):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (16,), generator=g)
    return x, y


def train(model, opt, steps=20, ddp=False, passes=1):
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    for s in range(steps):
        opt.zero_grad()
        for k in range(passes):
            x, y = data(s * passes + k)
            if ddp and k < passes - 1:
                with model.no_sync():
                    loss = loss_fn(model(x), y) / passes
                    loss.backward()
            else:
                loss = loss_fn(model(x), y) / passes
                loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def weights(model):
    m = model.module if isinstance(model, DDP) else model
    return [p.detach().clone() for p in m.parameters()]


def rel(a, b):
    return max(float((x - y).norm() / y.norm()) for x, y in zip(a, b))


def same_on_all_ranks(ws):
    flat = torch.cat([w.reshape(-1) for w in ws])
    lo, hi = flat.clone(), flat.clone()
    st.allreduce_(lo, op=st.Min)
    st.allreduce_(hi, op=st.Max)
    return bool(torch.equal(lo, hi))


for build in (mlp, cnn):
    ref = DDP(build())
    train(ref, torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9), ddp=True)
    want = weights(ref)

    m = build()
    st.broadcast_parameters(m.state_dict(), root_rank=0)
    opt = st.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9),
                                  named_parameters=m.named_parameters())
    train(m, opt)
    got = weights(m)
    check(rel(got, want) < 1e-5, "%s: DistributedOptimizer vs DDP: %g relative" % (build.__name__, rel(got, want)))
    check(same_on_all_ranks(got), "%s: ranks differ after DistributedOptimizer" % build.__name__)
    check(rel(got, weights(build())) > 1e-2, "%s: the weights did not move" % build.__name__)

    hooked = DDP(build())
    hooked.register_comm_hook(None, st.ddp_hook)
    train(hooked, torch.optim.SGD(hooked.parameters(), lr=0.05, momentum=0.9), ddp=True)
    got = weights(hooked)
    check(rel(got, want) < 1e-5, "%s: DDP with st.ddp_hook vs DDP: %g relative" % (build.__name__, rel(got, want)))

# two local passes a step, against DDP's no_sync accumulation
ref = DDP(mlp())
train(ref, torch.optim.SGD(ref.parameters(), lr=0.05), steps=6, ddp=True, passes=2)
m = mlp()
opt = st.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.05), named_parameters=m.named_parameters(),
                              backward_passes_per_step=2)
train(m, opt, steps=6, passes=2)
check(rel(weights(m), weights(ref)) < 1e-5, "backward_passes_per_step=2 vs DDP no_sync: %g" % rel(weights(m), weights(ref)))

# every compression: a learnable task (labels from a fixed linear map) whose loss falls at least
# half as far as without compression, the ranks identical, residuals in the state_dict
W = torch.randn(10, 64, generator=torch.Generator().manual_seed(5))
drop = None
for comp in (st.Compression.none, st.Compression.fp16, st.Compression.bf16, st.Compression.onebit,
             st.Compression.topk(0.05)):
    m = mlp()
    opt = st.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                  named_parameters=m.named_parameters(), compression=comp)
    losses = []
    for s in range(60):
        g = torch.Generator().manual_seed(77 * s + R)
        x = torch.randn(32, 1, 8, 8, generator=g)
        y = (x.reshape(32, -1) @ W.T).argmax(1)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    first, last = np.mean(losses[:5]), np.mean(losses[-5:])
    if drop is None:
        drop = first - last
        check(drop > 0.5, "uncompressed: loss %.3f -> %.3f: the task teaches nothing" % (first, last))
    check(first - last > 0.5 * drop, "%r: loss %.3f -> %.3f, uncompressed fell %.3f" % (comp, first, last, drop))
    check(same_on_all_ranks(weights(m)), "%r: ranks differ" % comp)
    sd = opt.state_dict()
    if comp.error_feedback:
        res = sd.get("shoal_residuals", {})
        check(len(res) == len(list(m.parameters())) and sum(float(t.abs().sum()) for t in res.values()) > 0,
              "%r: no residuals in the state_dict" % comp)
        m2 = mlp()
        opt2 = st.DistributedOptimizer(torch.optim.SGD(m2.parameters(), lr=0.05, momentum=0.9),
                                       named_parameters=m2.named_parameters(), compression=comp)
        opt2.load_state_dict(sd)
        res2 = opt2.state_dict()["shoal_residuals"]
        check(all(torch.equal(res[k], res2[k]) for k in res), "%r: residuals not restored" % comp)
        check(torch.equal(sd["state"][0]["momentum_buffer"], opt2.state_dict()["state"][0]["momentum_buffer"]),
              "%r: momentum not restored" % comp)

# Horovod's other calls
t = torch.full((3,), float(R + 1))
check(torch.allclose(st.allreduce(t), torch.full((3,), (N + 1) / 2)), "allreduce average")
check(torch.allclose(st.allreduce(t, op=st.Sum), torch.full((3,), N * (N + 1) / 2)), "allreduce sum")
check(torch.equal(t, torch.full((3,), float(R + 1))), "allreduce changed its input")
c16 = st.allreduce(torch.full((5, 3), float(R) + 0.5), compression=st.Compression.fp16)
check(torch.allclose(c16, torch.full((5, 3), (N - 1) / 2 + 0.5)), "allreduce with fp16 compression: %s" % c16)
h = st.allreduce_async(t, op=st.Max)
check(torch.equal(st.synchronize(h), torch.full((3,), float(N))), "allreduce_async max")
g = st.allgather(torch.tensor([[R, R]]))
check(g.tolist() == [[r, r] for r in range(N)], "allgather %s" % g.tolist())
check(st.broadcast_object({"r": R}, root_rank=N - 1) == {"r": N - 1}, "broadcast_object")
m = mlp()
o = torch.optim.Adam(m.parameters(), lr=0.01 * (R + 1))
if R == 0:
    m(torch.randn(2, 1, 8, 8)).sum().backward()
    o.step()
st.broadcast_optimizer_state(o, root_rank=0)
check(o.param_groups[0]["lr"] == 0.01 and len(o.state) == len(list(m.parameters())), "broadcast_optimizer_state")

# torch tensors straight into shoal.Comm: in place, bfloat16, non-contiguous refused
comm = shoal.init()
t = torch.full((4,), float(R), dtype=torch.bfloat16)
comm.allreduce(t)
check(torch.equal(t, torch.full((4,), float(N * (N - 1) // 2), dtype=torch.bfloat16)), "bfloat16 tensor %s" % t)
try:
    comm.allreduce(torch.zeros(4, 4)[:, 1])
    check(False, "a non-contiguous tensor was accepted")
except ValueError as e:
    check("not contiguous" in str(e), str(e))

dist.barrier()
dist.destroy_process_group()
st.barrier()  # rank 0 holds gloo's store: it leaves last
for f in fails[:20]:
    print("FAIL rank %d: %s" % (R, f))
print("rank %d: %d checks, %d failed" % (R, checks, len(fails)), flush=True)
sys.exit(1 if fails else 0)
