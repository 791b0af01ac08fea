"""test_launchers.py — proves that a Python program joins its job under every launcher the C
library reads: `shoal launch`, Open MPI's mpirun, MPICH's mpiexec and Slurm's srun (on a
one-node cluster of its own, scripts/slurm-local.sh), with the same variables and job-key
rules; a launcher that is not installed is skipped with the reason."""
import os
import shutil

import pytest

from conftest import PYTHON, RANKS, ROOT, free_port, launch, need, run

HELLO = os.path.join(RANKS, "hello.py")


def check_job(out, n, launcher):
    for r in range(n):
        assert "rank %d of %d: sum %d, launcher %s" % (r, n, n * (n - 1) // 2, launcher) in out, out


def test_shoal_launch():
    rc, out = launch(3, "hello.py")
    assert rc == 0, out
    check_job(out, 3, "shoal")


def test_mpirun_open_mpi():
    need("mpirun.openmpi")
    rc, out = run(["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-np", "3",
                   "-x", "SHOAL_MASTER_ADDR=127.0.0.1", "-x", "SHOAL_MASTER_PORT=%d" % free_port(),
                   "-x", "PYTHONPATH", PYTHON, HELLO], SHOAL_JOB_KEY=None)
    assert rc == 0, out
    check_job(out, 3, "openmpi")
    assert out.count("no SHOAL_JOB_KEY") == 1, "the derived job key is not said once: %s" % out


def test_mpiexec_mpich():
    need("mpiexec.mpich")
    rc, out = run(["mpiexec.mpich", "-n", "3", "-genv", "SHOAL_MASTER_ADDR", "127.0.0.1",
                   "-genv", "SHOAL_MASTER_PORT", str(free_port()), PYTHON, HELLO])
    assert rc == 0, out
    check_job(out, 3, "mpich")


def test_srun():
    need("srun")
    if not (shutil.which("slurmd") or os.path.exists("/usr/sbin/slurmd")):
        pytest.skip("slurmd not found (scripts/deps.sh installs it)")
    d = "/tmp/shoal-slurm-py-%d" % os.getpid()
    rc, out = run(["scripts/slurm-local.sh", "start", d], timeout=60)
    if rc != 0:
        run(["scripts/slurm-local.sh", "stop", d])
        pytest.skip("no local Slurm cluster: %s" % out)
    try:
        rc, out = run(["timeout", "120", "srun", "-n", "3", "--overcommit", "-t", "2", PYTHON, HELLO],
                      SLURM_CONF=d + "/slurm.conf", SHOAL_MASTER_ADDR=None, SHOAL_MASTER_PORT=None,
                      SHOAL_RANK=None, SHOAL_WORLD_SIZE=None)
        assert rc == 0, out
        check_job(out, 3, "slurm")
    finally:
        run(["scripts/slurm-local.sh", "stop", d])
