"""test_train.py — proves shoal.train: the job `shoal train` runs, from Python, alone and on 2
ranks, its --json report as a dict, options passed by their long names (a checkpoint saved
and read back by shoal.Net, --compress's fields in the report), called by every rank of a
launched job, and a bad option or model a shoal.Error carrying the CLI's message."""
import json
import os
import struct

import numpy as np
import pytest

import shoal
from conftest import launch

CFG = """[net]
batch=16
width=8
height=8
channels=1
learning_rate=0.05
momentum=0.9
[connected]
output=24
activation=relu
[connected]
output=4
activation=linear
[softmax]
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A learnable IDX data set (8x8 images, 4 classes: the bright rows say which) and a cfg."""
    d = tmp_path_factory.mktemp("tiny")
    for prefix, n, seed in (("train", 256, 1), ("t10k", 64, 2)):
        rng = np.random.default_rng(seed)
        y = (np.arange(n) % 4).astype(np.uint8)
        x = rng.integers(0, 100, (n, 8, 8)).astype(np.uint8)
        for i in range(n):
            x[i, 2 * y[i]:2 * y[i] + 2] += 150
        (d / (prefix + "-images-idx3-ubyte")).write_bytes(struct.pack(">IIII", 0x803, n, 8, 8) + x.tobytes())
        (d / (prefix + "-labels-idx1-ubyte")).write_bytes(struct.pack(">II", 0x801, n) + y.tobytes())
    (d / "mlp.cfg").write_text(CFG)
    return d


def test_alone_with_a_checkpoint(tiny, tmp_path):
    ckpt = tmp_path / "run.ckpt"
    r = shoal.train(str(tiny / "mlp.cfg"), data=str(tiny), epochs=2, threads=1, seed=3, quiet=True, save=str(ckpt))
    assert r["accuracy"] > 0.9 and r["steps"] == 32 and len(r["history"]) == 2, r
    net = shoal.Net(str(tiny / "mlp.cfg"))
    net.load(str(ckpt))
    x = np.zeros((4, 1, 8, 8), np.float32)
    for c in range(4):
        x[c, 0, 2 * c:2 * c + 2] = 200 / 255.0
    assert list(net.forward(x).argmax(1)) == [0, 1, 2, 3]


def test_two_ranks_and_compression_fields(tiny):
    r = shoal.train(str(tiny / "mlp.cfg"), data=str(tiny), epochs=2, ranks=2, threads=1, scaling="strong",
                    compress="1bit", bucket_mb=0.5, quiet=True)
    assert r["steps"] == 32 and r["accuracy"] > 0.8, r
    assert r.get("compress") == "1bit" and r["compression_ratio"] > 4, r


def test_every_rank_of_a_launched_job_gets_the_report(tiny):
    rc, out = launch(2, "train_job.py", str(tiny), str(tiny / "mlp.cfg"))
    assert rc == 0, out
    reports = [json.loads(line.split(" report ", 1)[1]) for line in out.splitlines() if " report " in line]
    assert len(reports) == 2 and reports[0] == reports[1] and reports[0]["steps"] == 32, out


def test_failures_carry_shoals_message(tiny):
    with pytest.raises(shoal.Error, match="no-such-flag"):
        shoal.train(str(tiny / "mlp.cfg"), data=str(tiny), no_such_flag=3)
    with pytest.raises(shoal.Error, match="nothere.cfg"):
        shoal.train(str(tiny / "nothere.cfg"), data=str(tiny))
    with pytest.raises(ValueError, match="ranks=N"):
        shoal.train(str(tiny / "mlp.cfg"), n=2)


def test_in_process_through_the_c_api(tiny):
    if not shoal._shoal.HAVE_TRAIN_API:
        pytest.skip("this libshoal lacks shoal_train_opts_set / shoal_train_report_json (r2cli's training API): "
                    "shoal.train runs the shoal binary until it has them")
    run = shoal._shoal.train_run
    r = json.loads(run(str(tiny / "mlp.cfg"), [("data", str(tiny)), ("epochs", "2"), ("threads", "1"),
                                               ("seed", "3"), ("quiet", "1")]))
    assert r["steps"] == 32 and len(r["history"]) == 2 and r["accuracy"] > 0.9, r
    cli = shoal.train(str(tiny / "mlp.cfg"), data=str(tiny), epochs=2, threads=1, seed=3, quiet=True)
    assert r["history"][-1]["train_loss"] == cli["history"][-1]["train_loss"], (r, cli)
    with pytest.raises(shoal.InvalidError, match="no-such-flag"):
        run(str(tiny / "mlp.cfg"), [("no-such-flag", "3")])
