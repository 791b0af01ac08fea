"""test_net.py — proves shoal.Net: forward and backward on numpy arrays, parameters and
gradients as named views of shoal's own blocks (writing one changes the net; backward
refreshes the views in place), the gradient against a central difference, a few steps of SGD
through the views lowering the loss, weights saved and loaded as shoal checkpoints and Darknet
.weights (and a file of another model refused), and errors named."""
import os

import numpy as np
import pytest

import shoal
from conftest import ROOT

LENET = os.path.join(ROOT, "examples", "lenet.cfg")
MLP = """[net]
batch=4
width=3
height=2
channels=1
[connected]
output=5
activation=tanh
[connected]
output=3
activation=linear
[softmax]
"""


def batch(n=16, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, n)


def test_parameters_are_views_of_shoals_blocks():
    net = shoal.Net(LENET, batch=16, threads=1)
    params, grads = net.parameters(), net.gradients()
    assert list(params) == ["conv0.weights", "conv0.biases", "conv2.weights", "conv2.biases",
                            "connected4.weights", "connected4.biases", "connected5.weights", "connected5.biases"]
    assert params["conv0.weights"].shape == (20, 1, 5, 5) and params["connected4.weights"].shape == (500, 800)
    block = net.params_block()
    for name, p in params.items():
        assert np.shares_memory(p, block), name
        assert np.shares_memory(grads[name], net.grads_block()), name
    x, y = batch()
    before = net.forward(x)
    params["connected5.biases"][3] += 5.0  # in place: the net sees it
    after = net.forward(x)
    assert (after[:, 3] > before[:, 3]).all()
    g = grads["conv0.weights"]
    net.forward(x, training=True)
    net.backward(y)
    first = g.copy()
    assert np.abs(first).max() > 0
    net.forward(x[::-1].copy(), training=True)
    net.backward(y[::-1].copy())
    assert not np.array_equal(first, g), "the gradient view did not follow the second backward"


def test_gradient_matches_a_central_difference(tmp_path):
    cfg = tmp_path / "mlp.cfg"
    cfg.write_text(MLP)
    net = shoal.Net(str(cfg), threads=1)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 1, 2, 3)).astype(np.float32)
    y = np.array([0, 2, 1, 2])
    net.forward(x, training=True)
    net.backward(y)
    g = net.gradients()["connected0.weights"].copy()
    w = net.parameters()["connected0.weights"]
    eps = 1e-2
    for (k, i) in [(0, 0), (2, 3), (4, 5)]:
        w[k, i] += eps
        net.forward(x, training=True)
        up = net.backward(y)
        w[k, i] -= 2 * eps
        net.forward(x, training=True)
        down = net.backward(y)
        w[k, i] += eps
        assert abs((up - down) / (2 * eps) - g[k, i]) < 2e-3, (k, i, (up - down) / (2 * eps), g[k, i])


def test_sgd_through_the_views_lowers_the_loss():
    net = shoal.Net(LENET, batch=16, threads=1)
    x, y = batch()
    params, grads = net.parameters(), net.gradients()
    losses = []
    for _ in range(8):
        net.forward(x, training=True)
        losses.append(net.backward(y))
        for name, p in params.items():
            p -= 0.02 * grads[name]
    assert losses[-1] < 0.5 * losses[0], losses


def test_backward_reads_the_input_of_a_forward_that_copied_it():
    net = shoal.Net(LENET, batch=16, threads=1)
    x, y = batch()
    net.forward(x, training=True)
    net.backward(y)
    want = net.gradients()["conv0.weights"].copy()
    net.forward(np.asfortranarray(x), training=True)  # not C-contiguous: forward reads a copy
    junk = [np.full(x.shape, 1e30, np.float32) for _ in range(8)]  # where a freed copy would be
    net.backward(y)
    assert np.allclose(net.gradients()["conv0.weights"], want), "backward read a freed input"
    del junk


@pytest.mark.parametrize("suffix", [".ckpt", ".weights"])
def test_weights_round_trip(tmp_path, suffix):
    a = shoal.Net(LENET, batch=4, seed=1, threads=1)
    b = shoal.Net(LENET, batch=4, seed=2, threads=1)
    assert not np.array_equal(a.params_block(), b.params_block())
    path = str(tmp_path / ("w" + suffix))
    a.save(path)
    b.load(path)
    assert np.array_equal(a.params_block(), b.params_block())
    x, _ = batch(4)
    assert np.array_equal(a.forward(x), b.forward(x))


def test_a_file_of_another_model_is_refused(tmp_path):
    path = str(tmp_path / "lenet.ckpt")
    shoal.Net(LENET, batch=4).save(path)
    other = shoal.Net(os.path.join(ROOT, "examples", "mlp.cfg"), batch=4)
    with pytest.raises(shoal.FormatError, match="another model"):
        other.load(path)
    with pytest.raises(shoal.Error, match="nothere"):
        other.load(str(tmp_path / "nothere.ckpt"))


def test_errors_are_named(tmp_path):
    bad = tmp_path / "bad.cfg"
    bad.write_text("[net]\nbatch=1\nwidth=2\nheight=2\nchannels=1\n[connected]\noutputs=3\n")
    with pytest.raises(shoal.FormatError, match=r"bad.cfg:7: \[connected\] unknown key \"outputs\""):
        shoal.Net(str(bad))
    net = shoal.Net(LENET, batch=4, threads=1)
    x, y = batch(4)
    net.forward(x)
    with pytest.raises(shoal.InvalidError, match="no forward with training"):
        net.backward(y)
    net.forward(x, training=True)
    with pytest.raises(shoal.InvalidError, match="label 12 of image 0"):
        net.backward(np.array([12, 0, 0, 0]))
    with pytest.raises(ValueError, match="labels holds 3"):
        net.backward(np.array([1, 0, 0]))
    with pytest.raises(shoal.InvalidError, match="5 images, the net takes 1..4"):
        net.forward(np.zeros((5, 1, 28, 28), np.float32))


def test_importing_shoal_first_gives_openblas_this_cpus_kernels():
    import subprocess
    from conftest import PYTHON, env
    code = "import shoal, numpy; numpy.ones(4) @ numpy.ones(4); print(shoal._shoal._blas_kernels())"
    out = subprocess.run([PYTHON, "-c", code], env=env(OPENBLAS_CORETYPE=None), stdout=subprocess.PIPE,
                         text=True, check=True).stdout
    name, avx2 = eval(out)
    if name is None:
        pytest.skip("numpy does not use OpenBLAS here")
    assert not (avx2 and name.strip().lower() in ("prescott", "core2", "nehalem", "atom")), out
