"""ddp_hook.py — keep DistributedDataParallel, let shoal carry its gradients: one line,
model.register_comm_hook(state, st.ddp_hook).

    shoal launch -n 2 python3 examples/python/ddp_hook.py
"""
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import shoal.torch as st

st.init()
torch.set_num_threads(1)
# DDP still wants a process group (it broadcasts the first weights through it): gloo beside
# shoal's port. shoal launch sets SHOAL_MASTER_PORT; under other launchers set MASTER_PORT.
port = int(os.environ.get("MASTER_PORT", int(os.environ.get("SHOAL_MASTER_PORT", "29500")) + 1))
dist.init_process_group("gloo", init_method="tcp://%s:%d" % (os.environ.get("SHOAL_MASTER_ADDR", "127.0.0.1"), port),
                        rank=st.rank(), world_size=st.size())
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
model.register_comm_hook(st.HookState(compression=st.Compression.none), st.ddp_hook)
opt = torch.optim.SGD(model.parameters(), lr=0.3)

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
w = torch.randn(4, 32, generator=torch.Generator().manual_seed(9))
for step in range(steps):
    g = torch.Generator().manual_seed(step * 100 + st.rank())
    x = torch.randn(32, 32, generator=g)
    y = (x @ w.T).argmax(1)
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()                     # the hook averages each bucket through shoal
    opt.step()
    if step == 0:
        first = loss.item()
print("rank %d: loss %.4f -> %.4f after %d steps" % (st.rank(), first, loss.item(), steps))
dist.barrier()
dist.destroy_process_group()
st.barrier()  # rank 0 holds gloo's store: it leaves last
