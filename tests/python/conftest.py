"""conftest.py — what the Python tests share: the shoal binary and Python they run, starting
N ranks of a script under `shoal launch` (or another launcher) with a deadline, and skipping
cleanly (with the reason) where torch or a launcher is missing.
Not here: the tests (test_*.py) and the rank scripts they start (ranks/*.py)."""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RANKS = os.path.join(HERE, "ranks")
PYTHON = os.environ.get("SHOAL_PYTHON", sys.executable)


def shoal_bin():
    b = os.environ.get("SHOAL_BIN") or os.path.join(ROOT, "build", "shoal")
    if not os.path.exists(b):
        pytest.fail("no shoal binary at %s: run make (or set SHOAL_BIN)" % b)
    return b


def env(**extra):
    e = dict(os.environ)
    e.setdefault("SHOAL_TIMEOUT", "20000")
    e.setdefault("OMP_NUM_THREADS", "1")
    e.setdefault("SHOAL_THREADS", "1")
    for k, v in extra.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = str(v)
    return e


def run(cmd, timeout=120, **extra):
    """Run cmd (a list); return (exit code, stdout+stderr). A hang is a failure naming cmd."""
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env(**extra), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout, text=True)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        pytest.fail("%s: still running after %d s; its output:\n%s" % (" ".join(cmd), timeout, out))
    return p.returncode, p.stdout


def launch(n, script, *args, timeout=120, **extra):
    """n ranks of tests/python/ranks/<script> under `shoal launch`."""
    return run([shoal_bin(), "launch", "-n", str(n), PYTHON, os.path.join(RANKS, script)] + list(args),
               timeout=timeout, **extra)


def need_torch():
    """Skip (the test, or the whole module when called at its top) without torch."""
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip("torch is not installed (python3-torch; scripts/deps.sh installs it)", allow_module_level=True)


def need(binary):
    if not shutil.which(binary):
        pytest.skip("%s not found (scripts/deps.sh installs it)" % binary)


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Ranks:
    """n ranks of a script started directly (no launcher between them and the test), so a test
    may signal or kill one: SHOAL_RANK, SHOAL_WORLD_SIZE, the master and a job key as
    `shoal launch` sets them. wait() returns each rank's (exit code, output)."""

    def __init__(self, n, script, *args, **extra):
        port = free_port()
        self.procs = []
        for r in range(n):
            e = env(SHOAL_RANK=r, SHOAL_WORLD_SIZE=n, SHOAL_MASTER_ADDR="127.0.0.1",
                    SHOAL_MASTER_PORT=port, SHOAL_JOB_KEY="%064x" % port, **extra)
            self.procs.append(subprocess.Popen([PYTHON, os.path.join(RANKS, script)] + list(args),
                                               cwd=ROOT, env=e, stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, text=True))

    def wait(self, timeout=60):
        res = []
        for p in self.procs:
            try:
                out, _ = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                for q in self.procs:
                    q.kill()
                out, _ = p.communicate()
                pytest.fail("a rank still ran after %d s; its output:\n%s" % (timeout, out))
            res.append((p.returncode, out))
        return res


def write_idx(d, prefix, n, side, classes, seed):
    """A learnable IDX split (gzipped, as Fashion-MNIST ships): class c brightens rows of band c."""
    import gzip
    import struct
    import numpy as np
    rng = np.random.default_rng(seed)
    y = (np.arange(n) % classes).astype(np.uint8)
    x = rng.integers(0, 100, (n, side, side)).astype(np.uint8)
    band = side // classes
    for i in range(n):
        x[i, band * y[i]:band * (y[i] + 1)] += 150
    with gzip.open(os.path.join(d, prefix + "-images-idx3-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, side, side) + x.tobytes())
    with gzip.open(os.path.join(d, prefix + "-labels-idx1-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + y.tobytes())


@pytest.fixture(scope="session")
def mnist_like(tmp_path_factory):
    """Fashion-MNIST's shape and files (28x28, 10 classes), small and learnable: 2048 train and
    512 test images, so the examples run in seconds."""
    d = str(tmp_path_factory.mktemp("mnist_like"))
    write_idx(d, "train", 2048, 28, 10, 1)
    write_idx(d, "t10k", 512, 28, 10, 2)
    return d
