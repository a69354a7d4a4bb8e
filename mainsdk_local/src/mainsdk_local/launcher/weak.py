"""Weak mode's own housekeeping: the private base directory of its boxes, and finding a run's strays.

Without namespaces nothing kills a run's tree for us; the server sweeps what the
run left (same cgroup, else same uid or session) and reaps it as subreaper.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import TYPE_CHECKING

from . import cgroups, common, landlock, linux, rootfs

if TYPE_CHECKING:
    from .runs import Run, Worker

WEAK_PREFIX = "mainsdk-local-weak-"
WEAK_SWEEP_SECONDS = 2.0  # how long a run's end waits for its strays to go


def weak_base() -> str:
    """A private directory for weak boxes; removes those of servers that died."""
    import shutil  # here, not at the top: the namespace path never needs them
    import tempfile

    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):
        if not name.startswith(WEAK_PREFIX):
            continue
        with contextlib.suppress(ValueError):
            pid_text, start = name[len(WEAK_PREFIX) :].split("-", 1)
            if (
                common.proc_starttime(int(pid_text)) != start
                and os.stat(os.path.join(tmp, name)).st_uid == os.geteuid()
            ):
                shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
    base = os.path.join(tmp, f"{WEAK_PREFIX}{common.host_pid()}-{common.proc_starttime('self')}")
    os.mkdir(base, 0o711)  # box users must traverse it, not list it
    return base


def pids_of_uid(uid: int) -> list[int]:
    """Processes whose /proc entry belongs to ``uid``."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{name}").st_uid == uid:
                    out.append(int(name))
    return out


def pids_of_session(sid: int) -> list[int]:
    """Processes in session ``sid``."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if os.getsid(int(name)) == sid:
                    out.append(int(name))
    return out


def prepare_host() -> tuple[str, str, int]:
    """Weak mode's host side: (the boxes' private folder, the Node proxy preload in it, the kernel's Landlock ABI).

    Orphans of a weak run are re-parented to the server from here on, so it can reap what it kills.
    """
    linux.prctl(linux.PR_SET_CHILD_SUBREAPER, 1)
    base = weak_base()
    node_preload = os.path.join(base, "node-proxy.cjs")
    rootfs.write_node_preload(node_preload)
    return base, node_preload, landlock.abi()


def reap_orphans(workers: dict[int, Worker]) -> None:
    """Weak mode: the server is the subreaper of what runs leave behind; keep its workers' statuses."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        worker = workers.get(pid)
        if worker is not None and not worker.reaped:
            worker.reaped = True
            worker.status = status  # its pidfd callback finishes the run


def sweep(run: Run, workers: dict[int, Worker], *, root: bool, wait: bool) -> None:
    """Weak mode: kill what the code left behind (same cgroup, else same uid or session); reap it, keeping the
    statuses of the server's ``workers``. With ``wait``, until nothing is left or WEAK_SWEEP_SECONDS pass."""
    end = time.monotonic() + (WEAK_SWEEP_SECONDS if wait else 0)
    session = run.worker.pid if run.worker is not None else 0
    while True:
        if run.cgroup is not None and run.cgroup.pids_dir is not None:
            pids = cgroups.Cgroups.members(run.cgroup.pids_dir)
        elif root:
            pids = pids_of_uid(run.box.uid)
        else:
            pids = pids_of_session(session)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        reap_orphans(workers)
        if not pids or time.monotonic() > end:
            return
        time.sleep(0.002)
