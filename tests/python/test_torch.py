"""test_torch.py — proves shoal.torch on 2 ranks under `shoal launch` against PyTorch's own
DistributedDataParallel over gloo (ranks/torch_ddp.py holds the checks): the weights after 20
steps of st.DistributedOptimizer and of DDP with st.ddp_hook equal DDP's within 1e-5 relative
(an MLP and a CNN), accumulation over passes, each compression training with its residuals in
the state_dict, Horovod's other calls, torch tensors in shoal.Comm."""
from conftest import free_port, launch, need_torch


def test_distributed_optimizer_and_ddp_hook_match_ddp_over_gloo():
    need_torch()
    rc, out = launch(2, "torch_ddp.py", str(free_port()), timeout=240)
    assert rc == 0, out
    assert out.count(" 0 failed") == 2, out
