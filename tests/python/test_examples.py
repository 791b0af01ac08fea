"""test_examples.py — runs every script of examples/python/ (the ones docs/python.md shows) with
small settings, on data shaped and stored as Fashion-MNIST (conftest.mnist_like), under
`shoal launch` where it takes ranks, and checks what it prints."""
import os
import re

import pytest

from conftest import PYTHON, ROOT, free_port, launch, need_torch, run

EX = os.path.join(ROOT, "examples", "python")

def ex(name):
    return os.path.join(EX, name)


def test_allreduce():
    rc, out = launch(3, ex("allreduce.py"))
    assert rc == 0, out
    for r in range(3):
        assert "rank %d of 3: sum 3, avg 3, ranks [0, 1, 2], half of %d" % (r, 2 if r % 2 == 0 else 1) in out, out


@pytest.mark.parametrize("comp", ["onebit"])  # none: test_torch.py trains it against DDP
def test_horovod_train(comp, mnist_like):
    need_torch()
    rc, out = launch(2, ex("horovod_train.py"), "--epochs", "0.5", "--compression", comp, "--data", mnist_like)
    assert rc == 0, out
    m = re.search(r"test accuracy ([0-9.]+)%", out)
    assert m and float(m.group(1)) > 30, out


def test_ddp_hook():
    need_torch()
    rc, out = launch(2, ex("ddp_hook.py"), "30", MASTER_PORT=free_port())
    assert rc == 0, out
    falls = re.findall(r"loss ([0-9.]+) -> ([0-9.]+) after 30 steps", out)
    assert len(falls) == 2 and all(float(b) < 0.7 * float(a) for a, b in falls), out


def test_net_train(tmp_path, mnist_like):
    w = str(tmp_path / "lenet.weights")
    rc, out = launch(2, ex("net_train.py"), "--steps", "40", "--save", w, "--data", mnist_like)
    assert rc == 0, out
    m = re.search(r"test accuracy ([0-9.]+)% after 40 steps on 2 ranks", out)
    assert m and float(m.group(1)) > 40, out
    assert os.path.getsize(w) > 400000


def test_to_torch(mnist_like):
    need_torch()
    rc, out = run([PYTHON, ex("to_torch.py"), mnist_like, "30"])
    assert rc == 0, out
    m = re.search(r"outputs: ([0-9.e+-]+)", out)
    assert m and float(m.group(1)) < 1e-4, out
    assert "PyTorch went on" in out


def test_train(mnist_like):
    rc, out = run([PYTHON, ex("train.py"), mnist_like, "20"])
    assert rc == 0, out
    assert re.search(r"test accuracy [0-9.]+% after 20 steps", out), out
