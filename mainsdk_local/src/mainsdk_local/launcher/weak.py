"""Weak mode's own housekeeping: the private base directory of its boxes, and finding a run's strays.

Without namespaces nothing kills a run's tree for us; the server sweeps what the
run left (same cgroup, else same uid or session) and reaps it as subreaper.
"""

from __future__ import annotations

import contextlib
import os

from . import common

WEAK_PREFIX = "mainsdk-local-weak-"


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
