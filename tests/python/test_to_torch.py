"""test_to_torch.py — proves shoal.to_torch: the torch module's forward equals shoal's own
(shoal.Net in inference) within 1e-4 on LeNet, a residual net with Darknet's shortcut across
shapes, a net of every other layer it maps (tests/python/cfg/zoo.cfg: grouped convolution,
batch norm with non-trivial statistics, Darknet's max-pool paddings, route, dropout, average
pooling, each activation, a softmax temperature) and the char-level models ([lstm], [gru] in
both forms, [rnn]) over two batches (their state carried), with weights scaled up so the
outputs are far from uniform; weights given as a shoal checkpoint or a Darknet .weights file."""
import os

import numpy as np
import pytest

from conftest import ROOT, need_torch

need_torch()
import torch  # noqa: E402

import shoal  # noqa: E402

torch.set_num_threads(1)
CFG = os.path.join(ROOT, "tests", "python", "cfg")


def inputs(net, rng, onehot):
    if onehot:
        x = np.zeros((net.batch, net.input_shape[0]), np.float32)
        x[np.arange(net.batch), rng.integers(0, net.input_shape[0], net.batch)] = 1
        return x
    return rng.standard_normal((net.batch,) + net.input_shape).astype(np.float32)


def compare(net, model, x, passes=1):
    worst, spread = 0.0, 0.0
    for _ in range(passes):
        ys = net.forward(x)
        with torch.no_grad():
            yt = model(torch.from_numpy(x)).numpy()
        assert ys.shape == yt.shape
        worst = max(worst, float(np.abs(ys - yt).max()))
        spread = max(spread, float(ys.std()))
    return worst, spread


CASES = [("examples/lenet.cfg", 8, 1.0, False), ("examples/resnet-small.cfg", 4, 1.0, False),
         ("tests/python/cfg/zoo.cfg", 4, 1.0, False), ("examples/char-lstm.cfg", 2, 3.0, True),
         ("examples/char-gru.cfg", 2, 3.0, True), ("examples/char-rnn.cfg", 2, 1.5, True),
         ("tests/python/cfg/gru-darknet.cfg", 3, 2.0, False)]


@pytest.mark.parametrize("cfg,batch,scale,onehot", CASES, ids=[os.path.basename(c[0]) for c in CASES])
def test_forward_equals_shoals(cfg, batch, scale, onehot):
    cfg = os.path.join(ROOT, cfg)
    net = shoal.Net(cfg, batch=batch, seed=7, threads=1)
    rng = np.random.default_rng(11)
    for p in net.parameters().values():
        p *= scale
    for name, s in net.statistics().items():  # batch norm as after training
        s[:] = rng.uniform(0.5, 2.0, s.shape) if "variance" in name else rng.uniform(-0.3, 0.3, s.shape)
    model = shoal.to_torch(cfg, net, batch=batch)
    x = inputs(net, rng, onehot)
    worst, spread = compare(net, model, x, passes=2 if net.state().size else 1)
    assert worst < 1e-4, "%s: forward differs from shoal's by %g" % (cfg, worst)
    assert spread > 1e-3, "%s: outputs barely vary (std %g): the comparison would prove nothing" % (cfg, spread)


@pytest.mark.parametrize("suffix", [".ckpt", ".weights"])
def test_weights_from_a_file(tmp_path, suffix):
    cfg = os.path.join(ROOT, "examples", "lenet.cfg")
    net = shoal.Net(cfg, batch=4, seed=3, threads=1)
    path = str(tmp_path / ("lenet" + suffix))
    net.save(path)
    model = shoal.to_torch(cfg, path)
    other = shoal.to_torch(cfg)  # the cfg's own start (seed 1): not the same weights
    x = np.random.default_rng(2).standard_normal((4, 1, 28, 28)).astype(np.float32)
    worst, _ = compare(net, model, x)
    assert worst < 1e-4
    with torch.no_grad():
        assert float((other(torch.from_numpy(x)) - model(torch.from_numpy(x))).abs().max()) > 1e-3


def test_a_layer_pytorch_lacks_is_named(tmp_path):
    cfg = tmp_path / "reorg.cfg"
    cfg.write_text("[net]\nbatch=1\nwidth=4\nheight=4\nchannels=4\n[reorg]\nstride=2\n[connected]\noutput=3\n[softmax]\n")
    with pytest.raises(NotImplementedError, match=r"layer 0 \(\[reorg\]"):
        shoal.to_torch(str(cfg))
