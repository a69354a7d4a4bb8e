"""Where the CPU of a ``sandbox.run`` goes, process by process, against a bare start, from the scheduler's own record.

Each case runs ``--runs`` runs back to back in a process of its own, under ``perf record -a``
of the scheduler's tracepoints (``sched_switch``, ``sched_process_fork``, ``sched_process_exec``,
``sched_process_exit``; on the monotonic clock). Every stretch a task ran on a CPU is then summed
per role, exactly (no sampling): a task's time is charged from when it was switched in to when it
was switched out, and split at its ``execve``. The roles come from the fork tree:

- ``app``: the process calling ``sandbox.run`` (core, the driver, the client, the sync bridge);
- ``launcher server``: the app's child that serves boxes; ``server children``: anything it execs;
- ``B``: the launcher's children (pid 1 of each run's pid namespace: cgroups, namespaces, reaping);
- ``C``: B's child before its ``execve`` (mounts, pivot_root, uid, seccomp);
- ``box program``: C after its ``execve`` (the interpreter) and whatever it forks;
- ``bare start``: for a bare case, the child the app started;
- ``kernel threads``: kworkers, RCU, softirq threads and the like. They serve every process on the
  machine, so their time is compared with the same window's share in the bare cases and with
  ``--idle`` (a window where the case process only sleeps). Kernel work done in a process's own
  context (its syscalls, its exit, its page faults) is in that process's row.
- ``other``: everything else on the machine in the window (other users' load; not the case's).

The window opens after ``--warmup`` runs and a short settle (so spares and warm interpreters made
for the first run are outside it) and closes a settle after the last run (so the last run's
teardown and the spare made for a next one are inside it, as one was before the window opened).

Needs root and ``perf`` (Debian: ``apt-get install linux-perf``); CI does not install it. As a cross-check,
each case also sits in a cpuacct cgroup of its own, ``_cost.py``'s measure, whose CPU over the same window
is printed beside the sum of the roles (``= ours``). That cgroup cannot see kernel threads: the work they
do for a run (a network namespace's teardown, ``cleanup_net``, is the largest) is missing from the CPU
figures of ``cold_path.py`` and ``throughput.py``.

    python benchmarks/cpu_split.py [--runs 100] [--cases python-off,python-pool,bash-off,bare-I-S,bare-I] [--base DIR]

Cases: ``python-off``, ``python-pool``, ``bash-off``, ``bash-pool``, ``node-off``, ``node-pool`` (``sandbox.run``
with the warm pool off, or at the driver's default), and the bare starts ``bare-I-S``, ``bare-I`` (from an
empty venv), ``bare-bash`` and ``bare-node``.

``--profile`` also samples the CPU clock (``perf record -g``) and says, per role, how much went to
user space (the interpreter), page faults (copy-on-write after ``fork``, mostly), and each system call
(``clone``, ``unshare``, ``execve``, ``exit_group``, ...): the share of the role's samples times its exact
CPU above.

``--base DIR`` (a checkout of older code, e.g. ``git archive COMMIT | tar -x -C DIR``) runs each
sandbox case with that code too, right after this checkout's, for a before/after in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from _cost import CODE, CpuMeter, _children, bare_argv, empty_venv, python_program

EVENTS = ("sched:sched_switch", "sched:sched_process_fork", "sched:sched_process_exec", "sched:sched_process_exit")
SETTLE = 0.5  # seconds before and after the measured runs
KERNEL_THREAD = re.compile(
    r"^(kworker|rcu_|ksoftirqd|migration|kcompactd|kthreadd|kswapd|khugepaged|kdamond|idle_inject|cpuhp|watchdog|irq/)"
)
ROLES = ("app", "launcher server", "server children", "B", "C", "box program", "bare start")
CASES: dict[str, dict[str, Any]] = {
    "python-off": {"kind": "sandbox", "language": "python", "pool": 0},
    "python-pool": {"kind": "sandbox", "language": "python"},  # the driver's default pool
    "bash-off": {"kind": "sandbox", "language": "bash", "pool": 0},
    "bash-pool": {"kind": "sandbox", "language": "bash"},
    "bare-I-S": {"kind": "bare", "argv": ["PYTHON", "-I", "-S", "-c", CODE["python"]]},
    "bare-I": {"kind": "bare", "argv": ["VENV", "-I", "-c", CODE["python"]]},
    "bare-bash": {"kind": "bare", "argv": ["/bin/bash", "-c", CODE["bash"]]},
    "node-off": {"kind": "sandbox", "language": "node", "pool": 0},
    "node-pool": {"kind": "sandbox", "language": "node"},
    "bare-node": {"kind": "bare", "argv": ["NODE", "-e", CODE["node"]]},
}


def _is_launcher(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"launcher" in cmdline.read()
    except OSError:
        return False


# -- the case process ----------------------------------------------------------------------------


async def _case(spec: dict[str, Any]) -> None:
    """Run ``spec``'s warm-up, then print the monotonic window of the measured runs (as JSON)."""
    runs, warmup = spec["runs"], spec["warmup"]
    # The cross-check: _cost.py's measure, a cpuacct cgroup holding this process and all it starts.
    meter = CpuMeter(f"mainsdk-cpu-split-{os.getpid()}")
    with open(meter.procs, "w") as procs:
        procs.write("0")
    if spec["kind"] == "idle":
        started = time.monotonic()
        await asyncio.sleep(spec["seconds"])
        print(json.dumps({"start": started, "end": time.monotonic(), "pid": os.getpid()}), flush=True)
        return
    if spec["kind"] == "bare":

        async def one() -> None:
            proc = await asyncio.create_subprocess_exec(
                *spec["argv"], env={}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            out, err = await proc.communicate()
            assert out == b"2\n", (out, err)

        sandbox = None
    else:
        from mainsdk import AsyncSandbox, SandboxDeps

        import mainsdk_local
        from mainsdk_local import local_sandbox_driver

        driver = local_sandbox_driver(**({"pool": spec["pool"]} if "pool" in spec else {}))
        sandbox = AsyncSandbox(SandboxDeps(driver=driver, load_entrypoints=False))
        if spec.get("pythonpath") and not mainsdk_local.__file__.startswith(spec["pythonpath"].split("/core/src")[0]):
            raise SystemExit(f"the old side imported {mainsdk_local.__file__}, not {spec['pythonpath']}")

        async def one() -> None:
            result = await sandbox.run(CODE[spec["language"]], language=spec["language"])
            assert result.stdout == "2\n", result

    try:
        for _ in range(warmup):
            await one()
        await asyncio.sleep(SETTLE)
        servers = [pid for pid in _children() if _is_launcher(pid)]
        started, cgroup_before = time.monotonic(), meter.seconds()
        for _ in range(runs):
            await one()
        await asyncio.sleep(SETTLE)
        ended, cgroup_cpu = time.monotonic(), meter.seconds() - cgroup_before
        server = servers[0] if len(servers) == 1 else None
        if sandbox is not None and server is None:
            raise SystemExit(f"expected one launcher server among the app's children, found {servers}")
        window = {"start": started, "end": ended, "pid": os.getpid(), "server": server, "cgroup": cgroup_cpu}
        print(json.dumps(window), flush=True)
    finally:
        if sandbox is not None:
            await sandbox.aclose()


# -- reading the scheduler's record --------------------------------------------------------------

STACK = re.compile(r"^\s+[0-9a-f]+ (\S+) \((.*)\)$")
SAMPLE_HZ = 1999
LINE = re.compile(r"^\s*(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)$")
FIELD = re.compile(r"(\w+)=(\S*)")


class Split:
    """CPU seconds per role within [start, end], from ``perf script`` lines of the four events."""

    def __init__(self, app_pid: int, start: float, end: float) -> None:
        self.app_pid = app_pid
        self.start, self.end = start, end
        self.tgid: dict[int, int] = {}  # tid -> tgid (from the lines' pid/tid)
        self.parent: dict[int, int] = {}  # tgid -> parent tgid (forks of new processes)
        self.execd: set[int] = set()  # tgids that called execve since they were forked
        self.running: dict[int, tuple[int, float]] = {}  # cpu -> (tid, since)
        self.spent: collections.defaultdict[str, float] = collections.defaultdict(float)
        self.comms: dict[int, str] = {}
        self.server: int | None = None
        self.kernel_comms: collections.defaultdict[str, float] = collections.defaultdict(float)
        self.dying: set[int] = set()  # tasks past their exit event
        # --profile: CPU-clock samples per role and what they were doing (see ``category``).
        self.samples: collections.defaultdict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        self.stack: list[tuple[str, str]] | None = None  # the frames of the sample being read, leaf first
        self.sampled: tuple[int, float] = (0, 0.0)

    def role(self, tid: int) -> str:
        if tid == 0:
            return "idle"
        tgid = self.tgid.get(tid, tid)
        chain = [tgid]
        while chain[-1] in self.parent and len(chain) < 64:
            chain.append(self.parent[chain[-1]])
        if self.app_pid not in chain:
            comm = self.comms.get(tid, "")
            return "kernel threads" if KERNEL_THREAD.match(comm) else "other"
        depth = chain.index(self.app_pid)
        if depth == 0:
            return "app"
        top = chain[depth - 1]  # the app's child this task descends from
        if self.server is None or top != self.server:
            return "bare start"
        if depth == 1:
            return "launcher server"
        if depth == 2 and tgid in self.execd:
            return "server children"  # something the server exec'd, not a worker
        if depth == 2:
            return "B"
        if depth == 3 and tgid not in self.execd:
            return "C"
        return "box program"

    def charge(self, tid: int, since: float, until: float) -> None:
        since, until = max(since, self.start), min(until, self.end)
        if until > since:
            role = self.role(tid)
            self.spent[role] += until - since
            if role == "kernel threads":
                self.kernel_comms[re.sub(r"[/:].*", "", self.comms.get(tid, "?"))] += until - since

    def frame(self, line: str) -> None:
        """One frame of a sample's call graph (leaf first)."""
        m = STACK.match(line)
        if m is not None and self.stack is not None:
            self.stack.append((m[1], m[2]))

    def end_sample(self) -> None:
        if self.stack is not None:
            tid, at = self.sampled
            if self.start <= at <= self.end:
                self.samples[self.role(tid)][category(self.stack)] += 1
        self.stack = None

    def feed(self, line: str) -> None:
        self.end_sample()
        m = LINE.match(line)
        if m is None:
            return
        tgid, tid, cpu, at, event = int(m[1]), int(m[2]), int(m[3]), float(m[4]), m[5]
        if event.startswith("cpu-clock"):
            self.tgid[tid] = tgid
            self.stack, self.sampled = [], (tid, at)
            return
        fields = dict(FIELD.findall(m[6]))
        if tid:
            self.tgid[tid] = tgid
        was = self.running.get(cpu)
        running = int(fields["prev_pid"]) if event == "sched:sched_switch" else tid
        if was is not None and was[0] != running:
            # The record lacks the switch in between: here, the last one of a task that exited (its exit
            # event comes before it frees its memory and namespaces). Until now that task was exiting.
            if was[0] in self.dying:
                self.charge(was[0], was[1], at)
            self.running[cpu] = was = (running, at)
        if event == "sched:sched_switch":
            prev, nxt = int(fields["prev_pid"]), int(fields["next_pid"])
            self.comms[prev] = fields["prev_comm"]
            self.comms[nxt] = fields["next_comm"]
            if was is not None and was[0] == prev:
                self.charge(prev, was[1], at)
            self.running[cpu] = (nxt, at)
        elif event == "sched:sched_process_exit":
            self.dying.add(tid)
        elif event == "sched:sched_process_fork":
            child, parent = int(fields["child_pid"]), int(fields["pid"])
            ptgid = self.tgid.get(parent, parent)
            # A thread shares its process's tgid; a process's first line names it later, so the fork's
            # parent is kept by the child's tid, which is its tgid when it is a process.
            if child not in self.tgid:
                self.parent[child] = ptgid
        elif event == "sched:sched_process_exec":
            was = self.running.get(cpu)
            if was is not None and was[0] == tid:
                self.charge(tid, was[1], at)  # C's time until execve, as C
                self.running[cpu] = (tid, at)
            self.execd.add(tgid)
            self.comms[tid] = os.path.basename(fields.get("filename", "?"))

    def finish(self) -> None:
        self.end_sample()
        for tid, since in self.running.values():
            self.charge(tid, since, self.end)


def category(stack: list[tuple[str, str]]) -> str:
    """What a sample was doing: user code (the interpreter, libraries), a system call by name, a page fault."""
    if not stack or "kernel" not in stack[0][1]:
        return "user space"
    for symbol, _ in stack:
        if symbol.startswith("asm_exc_page_fault"):
            return "page faults"
        for prefix in ("__x64_sys_", "__do_sys_", "__arm64_sys_"):
            if symbol.startswith(prefix):
                return "syscall " + symbol.removeprefix(prefix)
    return "kernel, other"


def _record(spec: dict[str, Any], folder: str, *, sample: bool) -> tuple[dict[str, Any], str]:
    """Run one case under ``perf record`` (``sample``: with call graphs of the CPU clock); its window, the record."""
    data = os.path.join(folder, "perf.data")
    env = dict(os.environ)
    if spec.get("pythonpath"):
        env["PYTHONPATH"] = spec["pythonpath"]
    command = ["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-a", "-o", data, "-m", "16M"]
    if sample:
        command += ["-g", "-e", f"cpu-clock/freq={SAMPLE_HZ}/"]
    for event in EVENTS:
        command += ["-e", event]
    command += ["--", sys.executable, os.path.abspath(__file__), "--case", json.dumps(spec)]
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1]), data


def split(spec: dict[str, Any], folder: str, *, sample: bool = False) -> tuple[Split, dict[str, Any]]:
    """The case's CPU per role over its window, and the window (its ends, and the cgroup's CPU in it)."""
    window, data = _record(spec, folder, sample=sample)
    CpuMeter(f"mainsdk-cpu-split-{window['pid']}").remove()  # the case process is gone: its cgroup is empty
    result = Split(window["pid"], window["start"], window["end"])
    result.server = window.get("server")
    fields = "pid,tid,cpu,time,event,trace" + (",ip,sym,dso" if sample else "")
    script = subprocess.Popen(
        ["perf", "script", "-i", data, "-F", fields],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert script.stdout is not None
    for line in script.stdout:
        if line[:1] in ("\t", " ") and STACK.match(line):
            result.frame(line)
        else:
            result.feed(line)
    script.wait()
    result.finish()
    os.unlink(data)
    return result, window


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--cases", default="python-off,python-pool,bash-off,bare-I-S,bare-I,bare-bash")
    parser.add_argument("--idle", action="store_true", help="also measure a window where nothing of ours runs")
    parser.add_argument("--base", metavar="DIR", help="also run each sandbox case with the code of this checkout")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also sample the CPU clock with call graphs: what each role spends its CPU on (page faults, syscalls)",
    )
    args = parser.parse_args()
    if shutil.which("perf") is None or os.geteuid() != 0:
        raise SystemExit("needs root and perf (apt-get install linux-perf)")
    names = args.cases.split(",")
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; known: {', '.join(CASES)}")
    python = python_program()
    rows: dict[str, dict[str, float]] = {}
    kernel: dict[str, str] = {}  # the kernel threads that took most, per column
    profiles: dict[str, dict[str, tuple[float, collections.Counter[str]]]] = {}
    runs: list[tuple[str, str, str | None]] = []  # (column, case, PYTHONPATH)
    for name in names:
        runs.append((name, name, None))
        if args.base and CASES[name]["kind"] == "sandbox":
            base = os.path.abspath(args.base)
            runs.append((f"{name} old", name, f"{base}/core/src:{base}/mainsdk_local/src"))
    with tempfile.TemporaryDirectory(prefix="cpu-split-") as folder:
        venv = empty_venv(os.path.join(folder, "venv"))
        for column, name, pythonpath in runs:
            spec = dict(CASES[name], runs=args.runs, warmup=args.warmup, pythonpath=pythonpath)
            if "argv" in spec:
                stand_in = {"PYTHON": python, "VENV": venv}
                if "NODE" in spec["argv"]:
                    stand_in["NODE"] = bare_argv("node")[0]  # the driver's own node
                spec["argv"] = [stand_in.get(a, a) for a in spec["argv"]]
            result, window = split(spec, folder, sample=args.profile)
            seconds = window["end"] - window["start"]
            row = {role: result.spent[role] / args.runs * 1000 for role in (*ROLES, "kernel threads", "other")}
            row["window ms"] = seconds * 1000
            row["cgroup"] = window["cgroup"] / args.runs * 1000
            row["ms per run"] = (seconds - SETTLE) * 1000 / args.runs
            rows[column] = row
            if args.profile:
                profiles[column] = {role: (row[role], result.samples[role]) for role in ROLES if role in result.samples}
            top = sorted(result.kernel_comms.items(), key=lambda item: -item[1])[:6]
            kernel[column] = ", ".join(f"{comm} {spent / args.runs * 1000:.2f}" for comm, spent in top)
        if args.idle:
            spec = {"kind": "idle", "runs": 0, "warmup": 0, "seconds": 2 * SETTLE + 2.0}
            result, window = split(spec, folder)
            seconds = window["end"] - window["start"]
            rows["idle"] = {"kernel threads": result.spent["kernel threads"] * 1000 / seconds, "other": 0.0}
    print(f"CPU-ms per run by role ({args.runs} runs per case, back to back; perf sched tracepoints)")
    columns = [n for n in rows if n != "idle"]
    print(f"  {'role':<18}" + "".join(f"{n:>17}" for n in columns))
    for role in (*ROLES, "kernel threads"):
        print(f"  {role:<18}" + "".join(f"{rows[n][role]:17.2f}" for n in columns))
    ours = {n: sum(rows[n][r] for r in ROLES) for n in columns}
    print(f"  {'= ours':<18}" + "".join(f"{ours[n]:17.2f}" for n in columns))
    print(f"  {'+ kernel threads':<18}" + "".join(f"{ours[n] + rows[n]['kernel threads']:17.2f}" for n in columns))
    print(f"  {'cpuacct cgroup':<18}" + "".join(f"{rows[n]['cgroup']:17.2f}" for n in columns))
    print(f"  {'other (not ours)':<18}" + "".join(f"{rows[n]['other']:17.2f}" for n in columns))
    print(f"  {'wall ms per run':<18}" + "".join(f"{rows[n]['ms per run']:17.2f}" for n in columns))
    if "idle" in rows:
        print(f"idle window: kernel threads {rows['idle']['kernel threads']:.2f} CPU-ms per second")
    for n in columns:
        print(f"  kernel threads in {n}: {kernel[n]}")
    for column, profile in profiles.items():
        print(f"{column}: what each role's CPU went to (share of its samples x its CPU-ms per run)")
        for role in ROLES:
            if role not in profile or not profile[role][0]:
                continue
            spent, counts = profile[role]
            total = sum(counts.values())
            parts = ", ".join(f"{what} {count / total * spent:.2f}" for what, count in counts.most_common(7))
            print(f"  {role} ({spent:.2f}; {total} samples): {parts}")
    baseline_language = {"bare-I": "python", "bare-I-S": "python", "bare-bash": "bash", "bare-node": "node"}
    for base, language in baseline_language.items():
        if base not in ours:
            continue
        for n in columns:
            case = CASES[n.removesuffix(" old")]
            if case["kind"] == "sandbox" and case["language"] == language:
                print(f"{n} vs {base}: {ours[n] / ours[base]:.2f}x (own processes only)")


if __name__ == "__main__" and sys.argv[1:2] == ["--case"]:
    asyncio.run(_case(json.loads(sys.argv[2])))
elif __name__ == "__main__":
    main()
