"""shoal.train(cfg, data=..., epochs=..., ranks=..., **options) — the job `shoal train` runs,
with every option it has (by its long name, underscores for dashes: bucket_mb=4 is
--bucket-mb 4, quiet=True is --quiet), returning its --json report as a dict.

How it runs: in this process through the C API (shoal_train_opts_set and
shoal_train_report_json, include/shoal/train.h) when the library has them and the job is
this process alone; otherwise the shoal binary: `shoal train CFG --json -n RANKS ...` (ranks
on this machine through shoal launch), or, when this process is itself a rank of a launched
job, one `shoal train` per rank joining a job of the same ranks on a port rank 0 picks.
Not here: the job (src/train), its options (shoal train --help).
Proved by tests/python/test_train.py."""
import json
import os
import shutil
import subprocess
import sys
import threading

from . import _shoal


def shoal_binary():
    """The shoal binary beside this module: SHOAL_BIN, the build tree's, the prefix's, PATH's."""
    here = os.path.dirname(os.path.abspath(__file__))
    cands = [os.environ.get("SHOAL_BIN"), os.path.join(here, os.pardir, os.pardir, "shoal"),
             os.path.join(here, os.pardir, os.pardir, os.pardir, os.pardir, "bin", "shoal"), shutil.which("shoal")]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.realpath(c)
    raise FileNotFoundError("shoal.train: no shoal binary found (set SHOAL_BIN, or install shoal with make install)")


def _options(data, epochs, options):
    """[(long name, value)] in the CLI's spelling; True is a bare flag, False/None nothing."""
    out = []
    if data is not None:
        out.append(("data", str(data)))
    if epochs is not None:
        out.append(("epochs", str(epochs)))
    for k, v in options.items():
        name = k.replace("_", "-")
        if name in ("json", "n"):
            raise ValueError("shoal.train: %s is shoal.train's own business (the report is returned; ranks=N)" % k)
        if v is None or v is False:
            continue
        out.append((name, None if v is True else str(v)))
    return out


def _report(lines):
    for line in reversed(lines):
        text = line[line.index("]") + 2:] if line.startswith("[rank ") else line
        if text.startswith("{"):
            return json.loads(text)
    return None


def _run_binary(cfg, opts, ranks, env):
    cmd = [shoal_binary(), "train", str(cfg), "--json"]
    for name, value in opts:
        cmd.append("--" + name)
        if value is not None:
            cmd.append(value)
    if ranks > 1:
        cmd += ["-n", str(ranks)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    tail = []

    def relay():  # progress lines go on to this process's stderr; the last ones name a failure
        for line in p.stderr:
            sys.stderr.write(line)
            tail.append(line.rstrip("\n"))
            del tail[:-20]

    th = threading.Thread(target=relay, daemon=True)
    th.start()
    out = p.stdout.read()
    rc = p.wait()
    th.join()
    report = _report(out.splitlines())
    if rc != 0 or report is None:
        why = [t for t in tail if t.strip()]
        raise _shoal.Error("shoal train failed (exit %d): %s" % (rc, why[-1] if why else out.strip()[-500:]))
    return report


def train(cfg, data=None, epochs=None, ranks=1, **options):
    """train(cfg, data=None, epochs=None, ranks=1, **options) -> the job's report (dict): accuracy,
    loss, test_loss, images_per_s, epochs, steps, seconds, threads, history, ... as
    `shoal train --json` prints it. options: every flag of `shoal train` by its long name
    (bucket_mb=4, compress="1bit", pipeline=2, save="run.ckpt", quiet=True). ranks > 1 trains on
    that many ranks of this machine; called by every rank of a launched job (shoal launch,
    mpirun, srun), it trains on the job's ranks and every rank gets the report. Raises
    shoal.Error with shoal's message when the job fails."""
    from . import init, _world, job_env
    ranks = int(ranks)
    opts = _options(data, epochs, options)
    env = dict(os.environ)
    job = job_env()
    if job["launcher"] is None and ranks == 1 and _shoal.HAVE_TRAIN_API:
        return json.loads(_shoal.train_run(str(cfg), [(n, "1" if v is None else v) for n, v in opts]))
    if job["launcher"] is not None:
        if ranks not in (1, job["world"]):
            raise ValueError("shoal.train: ranks=%d, but this process is one of the %d ranks of a launched job "
                             "(the job's ranks train)" % (ranks, job["world"]))
        # The job's communicator holds the launcher's port: the trainers meet on another.
        import numpy as np
        comm = _world if _world is not None else init()
        port = np.zeros(1, dtype=np.int64)
        if comm.rank == 0:
            import socket
            s = socket.socket()
            s.bind(("", 0))
            port[0] = s.getsockname()[1]
            s.close()
        comm.broadcast(port, 0)
        env["SHOAL_MASTER_PORT"] = str(int(port[0]))
        report = _run_binary(cfg, opts, 1, env) if comm.rank == 0 else None
        if comm.rank != 0:
            _run_binary_quiet(cfg, opts, env)
        return _share(comm, report)
    return _run_binary(cfg, opts, ranks, env)


def _run_binary_quiet(cfg, opts, env):
    """A rank other than 0: its `shoal train` prints no report; a failure still raises."""
    cmd = [shoal_binary(), "train", str(cfg)]
    for name, value in opts:
        cmd.append("--" + name)
        if value is not None:
            cmd.append(value)
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        lines = [t for t in p.stderr.splitlines() if t.strip()]
        raise _shoal.Error("shoal train failed (exit %d): %s" % (p.returncode, lines[-1] if lines else ""))


def _share(comm, report):
    """Rank 0's report on every rank."""
    import numpy as np
    data = json.dumps(report).encode() if comm.rank == 0 else b""
    n = np.array([len(data)], dtype=np.int64)
    comm.broadcast(n, 0)
    buf = bytearray(data) if comm.rank == 0 else bytearray(int(n[0]))
    comm.broadcast(buf, 0)
    return json.loads(bytes(buf))
