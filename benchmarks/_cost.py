"""Shared by the cold-path and throughput benchmarks: baselines, worker processes, CPU read from a cgroup.

Every case (a ``sandbox.run`` with this checkout's code or another's, a bare interpreter start,
a bubblewrap start) runs in a worker process of its own, started from this file, which first
joins a cpuacct cgroup of its own. Everything the case costs then lands in that cgroup and
nowhere else: the worker (the "app"), the launcher server it starts, the server's spares, the
boxes' processes, and for a bare start the child. The CPU per run is the cgroup's
``cpuacct.usage`` (nanoseconds, not sampled ticks) over the rounds, divided by them: a spare
prepared after a run reports counts as much as the run's own start.

Baselines are the floor this machine offers, never a start slowed by its ``.pth`` hooks:

- ``python -I -S``: no site module at all;
- ``python -I`` from an empty venv (``python -m venv --without-pip``): the site module over an
  empty site-packages, which is what the box's ``-E -s`` start does (the box hides site-packages);
- bubblewrap (``bwrap --unshare-all``) around the box's own command line (``-E -s``), with the
  interpreter's prefix bound read-only and its site-packages hidden behind a tmpfs, as in the box.
  Install it with ``apt-get install bubblewrap``; without it that baseline is left out and said so.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

CODE = {"python": "print(1 + 1)", "bash": "echo 2", "node": "console.log(1 + 1)"}
# What the box runs for each language (core's code_command): python with -E -s, the others plain.
CODE_ARGS = {"python": ["-E", "-s", "-c"], "bash": ["-c"], "node": ["-e"]}
CGROUP_V1 = "/sys/fs/cgroup/cpuacct"
CGROUP_V2 = "/sys/fs/cgroup"


class CpuMeter:
    """A cpuacct cgroup (v1) or a cgroup with a cpu.stat (v2) of its own: the CPU of what is put in it."""

    def __init__(self, name: str) -> None:
        if os.path.isfile(os.path.join(CGROUP_V1, "cpuacct.usage")):
            self.v2 = False
            self.path = os.path.join(CGROUP_V1, name)
        elif os.path.isfile(os.path.join(CGROUP_V2, "cgroup.controllers")):
            self.v2 = True
            self.path = os.path.join(CGROUP_V2, name)
        else:
            raise SystemExit("no cpuacct cgroup (v1) and no cgroup v2 here: CPU per run cannot be measured")
        os.makedirs(self.path, exist_ok=True)
        self.procs = os.path.join(self.path, "cgroup.procs")

    def seconds(self) -> float:
        """CPU time of everything that ran in the cgroup, user and system, since it was made."""
        if not self.v2:
            with open(os.path.join(self.path, "cpuacct.usage")) as usage:
                return int(usage.read()) / 1e9
        with open(os.path.join(self.path, "cpu.stat")) as stat:
            for line in stat:
                key, value = line.split()
                if key == "usage_usec":
                    return int(value) / 1e6
        raise RuntimeError(f"no usage_usec in {self.path}/cpu.stat")

    def remove(self) -> None:
        """Remove the cgroup once everything in it exited (a straggler gets a moment to go)."""
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)


def python_program() -> str:
    """The interpreter the box runs for python (the driver's own resolution)."""
    from mainsdk_local.programs import resolve_program

    return resolve_program("python", "python3").executable


def bare_argv(language: str) -> list[str]:
    """The bare start of ``language`` with the box's own command line."""
    from mainsdk_local.programs import resolve_program

    program = resolve_program(language, {"python": "python3"}.get(language, language)).executable
    return [program, *CODE_ARGS[language], CODE[language]]


def bwrap_argv(argv: Sequence[str]) -> list[str] | None:
    """``argv`` under ``bwrap --unshare-all`` with a minimal read-only root; None when bubblewrap is missing."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    from mainsdk_local.programs import resolve_program

    wrapped = [bwrap, "--unshare-all", "--die-with-parent", "--new-session"]
    for top in ("/usr", "/etc"):
        wrapped += ["--ro-bind", top, top]
    for link in ("/bin", "/lib", "/lib64", "/sbin"):
        if os.path.islink(link):
            wrapped += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            wrapped += ["--ro-bind", link, link]
    python = resolve_program("python", "python3")
    if argv[0] == python.executable:
        for path in python.readonly_paths:
            if not path.startswith("/usr/"):
                wrapped += ["--ro-bind", path, path]
        for hidden in python.hidden_paths:
            wrapped += ["--tmpfs", hidden]  # the box hides site-packages the same way
    wrapped += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", "/tmp"]
    return [*wrapped, *argv]


def empty_venv(folder: str) -> str:
    """A venv with nothing in it, made in ``folder``: its python."""
    subprocess.run([python_program(), "-m", "venv", "--without-pip", folder], check=True)
    return os.path.join(folder, "bin", "python")


class Worker:
    """A process running one case, in a cgroup of its own; lines of JSON in and out.

    ``case`` is {"kind": "sandbox"} (``sandbox.run`` with the code on ``pythonpath``, or the
    installed code when None; ``"pool": N`` sets the local driver's warm pool, left at the
    driver's default when absent) or {"kind": "bare", "argv": [...]}.
    """

    def __init__(self, name: str, case: dict[str, Any], pythonpath: str | None = None) -> None:
        self.name = name
        self.meter = CpuMeter(f"mainsdk-bench-{os.getpid()}-{len(name)}-{abs(hash(name)) % 10**8}")
        env = dict(os.environ)
        if pythonpath is not None:
            env["PYTHONPATH"] = pythonpath
        spec = dict(case, cgroup=self.meter.procs)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.ready = self.call({"op": "ready"})

    def call(self, request: dict[str, Any]) -> Any:
        """Send one request, return the worker's answer."""
        self.stdin.write(json.dumps(request) + "\n")
        self.stdin.flush()
        line = self.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} exited (status {self.proc.wait()})")
        return json.loads(line)

    def run(self, language: str = "python") -> float:
        """One run: its milliseconds."""
        return float(self.call({"op": "run", "language": language}))

    def close(self) -> None:
        """Stop the worker and remove its cgroup."""
        with contextlib.suppress(OSError):
            self.stdin.close()
        self.proc.wait()
        self.meter.remove()


# -- the worker process ------------------------------------------------------------------------


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _children() -> list[int]:
    found: list[int] = []
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{task}/children") as f:
            found += [int(p) for p in f.read().split()]
    return found


async def _lane(one: Callable[[str], Awaitable[None]], left: Iterator[int], language: str) -> None:
    """Runs one after another while any of the batch's are left (several lanes share ``left``)."""
    for _ in left:
        await one(language)


async def _worker(spec: dict[str, Any]) -> None:
    with open(spec["cgroup"], "w") as procs:
        procs.write("0")  # everything this process starts from now on is charged to the case's cgroup
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    sandbox: Any = None
    session: Any = None
    driver: Any = None
    if spec["kind"] == "sandbox":
        from mainsdk import AsyncSandbox, SandboxDeps

        import mainsdk_local
        from mainsdk_local import local_sandbox_driver

        # An older checkout (--base) may predate the warm pool: it has none to turn off then.
        takes_pool = "pool" in inspect.signature(local_sandbox_driver).parameters
        driver = local_sandbox_driver(**({"pool": spec["pool"]} if "pool" in spec and takes_pool else {}))
        sandbox = AsyncSandbox(SandboxDeps(driver=driver, load_entrypoints=False))
        source = mainsdk_local.__file__

    async def one(language: str) -> None:
        if sandbox is None:
            proc = await asyncio.create_subprocess_exec(
                *spec["argv"], env={}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            out, err = await proc.communicate()
            assert out == b"2\n", (out, err)
        elif language == "session":
            result = await session.run("python3", ["-c", CODE["python"]])
            assert result.stdout == "2\n", result
        else:
            result = await sandbox.run(CODE[language], language=language)
            assert result.stdout == "2\n", result

    try:
        while line := await reader.readline():
            request = json.loads(line)
            op = request["op"]
            answer: Any = None
            if op == "ready":
                if sandbox is not None:
                    session = await sandbox.create()  # commands back to back on one session
                    for _ in range(3):
                        for language in CODE:
                            await one(language)
                answer = {"source": source if sandbox is not None else spec["argv"][0], "servers": len(_children())}
            elif op == "run":
                started = time.perf_counter()
                await one(request["language"])
                answer = (time.perf_counter() - started) * 1000
            elif op == "batch":
                # ``runs`` runs, ``concurrency`` at a time: the seconds they took together.
                left = iter(range(request["runs"]))
                started = time.perf_counter()
                await asyncio.gather(*(_lane(one, left, request["language"]) for _ in range(request["concurrency"])))
                answer = time.perf_counter() - started
            elif op == "pool":  # the warm pool's counters (a box of its own asks the launcher)
                box = await driver._launcher.open_box(disk_bytes=1 << 20, session=False)
                try:
                    answer = await box.pool_stats()
                finally:
                    await box.close()
            elif op == "rss":
                answer = {"self": _rss_kb(os.getpid()), "children": sum(_rss_kb(p) for p in _children())}
            print(json.dumps(answer), flush=True)
    finally:
        if session is not None:
            await session.close()
        if sandbox is not None:
            await sandbox.aclose()


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    asyncio.run(_worker(json.loads(sys.argv[2])))
