#!/usr/bin/env python3
"""drill.py — the elastic fault drill behind bench/faults/elastic.sh and elastic_accuracy.sh.

Runs a 3-rank data-parallel `shoal train ... --elastic 2` again and again, each run hit once at
a random moment by a random fault on a random rank: kill (SIGKILL), stop (SIGSTOP) or, across
the emulated cluster (--hosts 3), cut (its host's switch port set down with `ip link set
down`). A first run without a fault gives the run's length and the accuracy to compare with.
A run passes when the job ends before a deadline (no hang), the ranks that remain finish every
planned step, at most one step is redone per change, and training paused at most
SHOAL_TIMEOUT + 2 s. One line a run, then a table. Exit status 0 only when every run passed.
Standard library only; the machine it runs on should be quiet (timing is checked).
"""
import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LAB = os.path.join(REPO, "scripts", "netlab.sh")


def args_of():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--faults", type=int, default=50)
    p.add_argument("--kinds", default="kill,stop", help="kill,stop[,cut]: cut needs --hosts 3")
    p.add_argument("--ranks", default="0,1,2", help="the ranks a fault may hit")
    p.add_argument("--hosts", type=int, default=1, help="1: three ranks here; 3: one rank on each of 3 lab hosts")
    p.add_argument("--cfg", default=os.path.join(REPO, "examples", "lenet.cfg"))
    p.add_argument("--data", default=os.environ.get("SHOAL_DATA_DIR", "/usr/share/datasets/fashion-mnist"))
    p.add_argument("--steps", type=int, default=0, help="max steps a run (0: --epochs)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--timeout-ms", type=int, default=5000, help="SHOAL_TIMEOUT of the runs")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--shoal", default=os.path.join(REPO, "build", "shoal"))
    p.add_argument("--out", default=os.path.join(REPO, "bench", "out", "faults"))
    p.add_argument("--rate", default="1gbit", help="--hosts 3: the lab's link rate")
    return p.parse_args()


def report_of(text):
    """The reporter's JSON line ("[rank K] {...}" or "{...}"), or None."""
    for line in text.splitlines():
        m = re.match(r"^(\[rank \d+\] )?(\{.*\})\s*$", line)
        if m:
            try:
                return json.loads(m.group(2))
            except ValueError:
                pass
    return None


class Job:
    """One run: a launcher here (--hosts 1) or one per lab host (--hosts 3)."""

    def __init__(self, a, run, tag):
        self.a, self.logs, self.procs = a, [], []
        port = 30000 + random.randrange(20000)
        key = os.urandom(32).hex()
        env = dict(os.environ, SHOAL_TIMEOUT=str(a.timeout_ms), SHOAL_JOB_KEY=key, SHOAL_MASTER_PORT=str(port),
                   OPENBLAS_NUM_THREADS="1")
        env.pop("OPENBLAS_CORETYPE", None)
        how = ["--epochs", str(a.epochs)] if not a.steps else ["--max-steps", str(a.steps)]
        train = [a.shoal, "train", a.cfg, "--data", a.data, "--elastic", "2", "--threads", "1", "--json"] + how
        if a.hosts == 1:
            cmds = [train + ["-n", "3"]]
        else:
            master = subprocess.check_output([LAB, "addr", "h0"], text=True).strip()
            cmds = [[LAB, "exec", "h%d" % k] + train + ["-n", "1", "--nnodes", "3", "--node-rank", str(k),
                                                        "--master-addr", master] for k in range(3)]
        for k, cmd in enumerate(cmds):
            log = os.path.join(a.out, "run%03d-%s-%d.log" % (run, tag, k))
            f = open(log, "w")
            self.logs.append(log)
            self.procs.append(subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                                               start_new_session=True))
            f.close()
        self.t0 = time.time()

    def rank_pids(self):
        """The ranks' pids in rank order (children of the launchers), once all are up."""
        pids = []
        for p in self.procs:
            kids = []
            for pid in [p.pid] + self.descendants(p.pid):
                try:
                    with open("/proc/%d/cmdline" % pid, "rb") as f:
                        argv = f.read().split(b"\0")
                except OSError:
                    continue
                with open("/proc/%d/environ" % pid, "rb") as f:
                    envs = f.read().split(b"\0")
                ranks = [e for e in envs if e.startswith(b"SHOAL_RANK=")]
                if b"train" in argv and ranks:
                    kids.append((int(ranks[0][11:]), pid))
            pids += kids
        return [pid for _, pid in sorted(pids)]

    @staticmethod
    def descendants(pid):
        out = []
        try:
            kids = open("/proc/%d/task/%d/children" % (pid, pid)).read().split()
        except OSError:
            return out
        for k in kids:
            out.append(int(k))
            out += Job.descendants(int(k))
        return out

    def kill_all(self):
        for p in self.procs:
            for pid in [p.pid] + self.descendants(p.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def outputs(self):
        return [open(log).read() for log in self.logs]


def link(host, up):
    name = os.environ.get("NETLAB_NAME", "lab")
    subprocess.call(["ip", "netns", "exec", "shl-%s-sw" % name, "ip", "link", "set", host, "up" if up else "down"])


def run_once(a, run, fault, duration):
    """One run; fault = None or (kind, rank, after_s). Returns a dict of what happened."""
    job = Job(a, run, fault[0] if fault else "none")
    pids = []
    while len(pids) < 3 and time.time() - job.t0 < 60:
        time.sleep(0.05)
        pids = job.rank_pids()
    hit_at, missed = None, None
    # the job as started forms first (its ranks' rendezvous): faults come once it trains, when
    # rank 0 prints its first line, at `after` (a fraction of the unbroken run's training time)
    started = None
    while fault and started is None and time.time() - job.t0 < 120 and all(p.poll() is None for p in job.procs):
        if re.search(r"^(\[rank 0\] )?train ", open(job.logs[0]).read(), re.M):
            started = time.time()
        time.sleep(0.02)
    if fault and len(pids) != 3:
        missed = "found %d ranks" % len(pids)
    elif fault and not started:
        missed = "no start line"
    if fault and len(pids) == 3 and started:
        kind, rank, after = fault
        while time.time() < started + after and all(p.poll() is None for p in job.procs):
            time.sleep(0.02)
        hit_at = time.time() - job.t0
        try:
            if kind == "kill":
                os.kill(pids[rank], signal.SIGKILL)
            elif kind == "stop":
                os.kill(pids[rank], signal.SIGSTOP)
            else:
                link("h%d" % rank, False)
        except OSError as e:
            hit_at, missed = None, "the rank had ended (%s)" % e
    deadline = time.time() + (duration or 600) * 3 + 2 * a.timeout_ms / 1000 + 30
    # Across hosts a hit host's own launcher is not the job's: a stopped rank's waits for it
    # (the drill ends it), a killed or cut-off one's ends by itself, soon after the others.
    alone = fault[1] if fault and a.hosts == 3 else -1
    codes = [None] * len(job.procs)
    for k, p in enumerate(job.procs):
        if k == alone:
            continue
        try:
            codes[k] = p.wait(timeout=max(deadline - time.time(), 0.1))
        except subprocess.TimeoutExpired:
            pass
    if alone >= 0 and fault[0] != "stop":
        try:
            codes[alone] = job.procs[alone].wait(timeout=2 * a.timeout_ms / 1000 + 15)
        except subprocess.TimeoutExpired:
            pass
    if fault and fault[0] == "cut":
        link("h%d" % fault[1], True)
    hung = [k for k, c in enumerate(codes) if c is None and not (k == alone and fault[0] == "stop")]
    job.kill_all()
    texts = job.outputs()
    reps = [report_of(t) for t in texts]
    rep = next((r for r in reps if r), None)
    return {"run": run, "fault": fault[0] if fault else "none", "rank": fault[1] if fault else -1,
            "hit_s": hit_at, "missed": missed, "seconds": time.time() - job.t0, "codes": codes, "hung": hung, "report": rep}


def judge(a, res):
    """'ok', 'late' (the fault came after the last step), or why it failed."""
    rep = res["report"]
    if res["hung"]:
        return "HANG (launchers %s still running at the deadline)" % res["hung"]
    if rep is None:
        return "FAIL (no report; exit codes %s)" % res["codes"]
    # every planned step (--max-steps), or every epoch: after a change of world an epoch has
    # another number of steps, but ends where its images do
    if a.steps and rep.get("steps") != a.steps:
        return "FAIL (%s of %s steps)" % (rep.get("steps"), a.steps)
    if not a.steps and abs(rep.get("epochs", 0) - a.epochs) > 1e-3:
        return "FAIL (%.4f of %d epochs)" % (rep.get("epochs", 0), a.epochs)
    el = rep.get("elastic", {})
    if res["fault"] != "none" and el.get("changes", 0) == 0:
        return "late (%s)" % (res["missed"] or "after the last step")
    limit = a.timeout_ms / 1000 + 2
    for ch in el.get("log", []):
        if ch.get("steps_redone", 0) > 1:
            return "FAIL (%d steps redone at step %d)" % (ch["steps_redone"], ch["step"])
        if ch.get("pause_s", 0) > limit:
            return "SLOW (paused %.1f s > %.1f s)" % (ch["pause_s"], limit)
    survivors = [c for k, c in enumerate(res["codes"]) if a.hosts == 1 or k != res["rank"]]
    if any(c != 0 for c in survivors):
        return "FAIL (exit codes %s)" % res["codes"]
    return "ok"


def main():
    a = args_of()
    random.seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    kinds = [k for k in a.kinds.split(",") if k]
    if "cut" in kinds and a.hosts != 3:
        sys.exit("drill.py: cut needs --hosts 3 (the emulated cluster)")
    base = run_once(a, 0, None, None)
    brep = base["report"]
    if not brep or any(c != 0 for c in base["codes"]):
        sys.exit("drill.py: the unbroken run failed: see %s" % a.out)
    duration = base["seconds"]
    training = brep.get("seconds", duration)  # from the first step on
    print("unbroken: %d steps (%.2f epochs) in %.1f s, accuracy %.2f%%" % (brep["steps"], brep["epochs"], duration,
                                                                           100 * brep["accuracy"]), flush=True)
    rows = []
    for run in range(1, a.faults + 1):
        kind, rank = random.choice(kinds), random.choice([int(r) for r in a.ranks.split(",")])
        after = random.uniform(0.0, 0.9) * training
        res = run_once(a, run, (kind, rank, after), duration)
        verdict = judge(a, res)
        rep = res["report"] or {}
        log = (rep.get("elastic") or {}).get("log") or [{}]
        ch = log[0]
        acc = rep.get("accuracy", float("nan"))
        rows.append((kind, verdict.split(" ")[0], ch.get("pause_s"), ch.get("steps_redone"), acc))
        print("run %3d: %-4s rank %d at %5.1f s: %-6s pause %s, redone %s, accuracy %.2f%% (unbroken %.2f%%)%s" % (
            run, kind, rank, res["hit_s"] or 0, verdict.split(" ")[0],
            "%.2f s" % ch["pause_s"] if "pause_s" in ch else "-", ch.get("steps_redone", "-"), 100 * acc,
            100 * brep["accuracy"], "" if verdict == "ok" else "  " + verdict), flush=True)
    print()
    print("| fault | runs | ok | late | failed | hangs | median pause s | max pause s | max redone | "
          "median accuracy - unbroken (points) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    bad = 0
    for kind in kinds + ["all"]:
        rs = [r for r in rows if kind == "all" or r[0] == kind]
        if not rs:
            continue
        ok = sum(r[1] == "ok" for r in rs)
        late = sum(r[1] == "late" for r in rs)
        hangs = sum(r[1].startswith("HANG") for r in rs)
        failed = len(rs) - ok - late
        pauses = [r[2] for r in rs if r[2] is not None]
        redone = [r[3] for r in rs if r[3] is not None]
        accs = [100 * (r[4] - brep["accuracy"]) for r in rs if r[1] == "ok"]
        if kind == "all":
            bad = failed
        print("| %s | %d | %d | %d | %d | %d | %s | %s | %s | %s |" % (
            kind, len(rs), ok, late, failed, hangs, "%.2f" % statistics.median(pauses) if pauses else "-",
            "%.2f" % max(pauses) if pauses else "-", max(redone) if redone else "-",
            "%+.2f" % statistics.median(accs) if accs else "-"))
    print("\nlimit: pause <= SHOAL_TIMEOUT + 2 s = %.1f s, at most 1 step redone; logs in %s" % (
        a.timeout_ms / 1000 + 2, a.out))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
