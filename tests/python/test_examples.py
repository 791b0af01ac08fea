"""test_examples.py — runs every script of examples/python/ (the ones docs/python.md shows) with
small settings on Fashion-MNIST, under `shoal launch` where it takes ranks, and checks what
it prints."""
import os
import re

import pytest

from conftest import PYTHON, ROOT, free_port, launch, need_torch, run

EX = os.path.join(ROOT, "examples", "python")
DATA = os.environ.get("SHOAL_DATA_DIR", "/usr/share/datasets/fashion-mnist")


def need_data():
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")) and \
            not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte")):
        pytest.skip("Fashion-MNIST is not in %s (dataset-fashion-mnist; scripts/deps.sh installs it)" % DATA)


def ex(name):
    return os.path.join(EX, name)


def test_allreduce():
    rc, out = launch(3, ex("allreduce.py"))
    assert rc == 0, out
    for r in range(3):
        assert "rank %d of 3: sum 3, avg 3, ranks [0, 1, 2], half of %d" % (r, 2 if r % 2 == 0 else 1) in out, out


@pytest.mark.parametrize("comp", ["none", "onebit"])
def test_horovod_train(comp):
    need_torch()
    need_data()
    rc, out = launch(2, ex("horovod_train.py"), "--epochs", "0.03", "--compression", comp, SHOAL_DATA_DIR=DATA)
    assert rc == 0, out
    m = re.search(r"test accuracy ([0-9.]+)%", out)
    assert m and float(m.group(1)) > 30, out


def test_ddp_hook():
    need_torch()
    rc, out = launch(2, ex("ddp_hook.py"), "30", MASTER_PORT=free_port())
    assert rc == 0, out
    falls = re.findall(r"loss ([0-9.]+) -> ([0-9.]+) after 30 steps", out)
    assert len(falls) == 2 and all(float(b) < 0.7 * float(a) for a, b in falls), out


def test_net_train(tmp_path):
    need_data()
    w = str(tmp_path / "lenet.weights")
    rc, out = launch(2, ex("net_train.py"), "--steps", "40", "--save", w)
    assert rc == 0, out
    m = re.search(r"test accuracy ([0-9.]+)% after 40 steps on 2 ranks", out)
    assert m and float(m.group(1)) > 40, out
    assert os.path.getsize(w) > 400000


def test_to_torch():
    need_torch()
    need_data()
    rc, out = run([PYTHON, ex("to_torch.py"), DATA, "30"])
    assert rc == 0, out
    m = re.search(r"outputs: ([0-9.e+-]+)", out)
    assert m and float(m.group(1)) < 1e-4, out
    assert "PyTorch went on" in out


def test_train():
    need_data()
    rc, out = run([PYTHON, ex("train.py"), DATA, "20"])
    assert rc == 0, out
    assert re.search(r"test accuracy [0-9.]+% after 20 steps", out), out
