"""Memory snapshots on the local driver: looking for a working CRIU, and why a box's memory is still not kept.

A memory snapshot would checkpoint a box's processes with CRIU, 4.1 or later on this kernel (Debian bookworm's
3.17 fails at start with "Unexpected rt vDSO area bounds"). ``memory_why`` finds CRIU (``sandbox.local.criu``,
default ``criu`` on PATH), checks its version and ``criu check``, and says why the driver offers no "memory"
kind here. Even a working CRIU cannot keep a box as the launcher makes it (docs/memory-snapshots.md has the
commands and their output):

- A namespace box's user namespace is made last, by the code's own process, and maps only the box's uid; its
  pid, net, ipc, uts, cgroup and mount namespaces belong to the host's user namespace. CRIU 4.1 dumps a tree
  only when every namespace in it belongs to its root task's user namespace and that namespace maps root:
  from the box's pid 1 it stops at "Can't dump nested user namespace", from the code's process at "Unable to
  convert uid or gid". A fork's layers are idmapped mounts, which CRIU does not know at all. And CRIU reads
  each task's rlimits, which for a task of another uid (the box's code is never root) needs CAP_SYS_RESOURCE,
  a capability some roots lack (this machine's: "Can't get rlimit 0: Operation not permitted").
- Weak mode's code runs in a Landlock domain, which CRIU neither records nor can enter: its parasite's socket
  is refused there ("Unable to connect a transport socket: Operation not permitted").
- An image holds the interpreter's memory, freed or not: a secret a cell was once given is in it, so a memory
  snapshot would also have to refuse any session that ever held one.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess

MIN_VERSION = (4, 1)
CAP_SYS_RESOURCE = 24
PROBE_TIMEOUT = 5.0  # ``criu check`` takes about 0.1 s here
_VERSION = re.compile(rb"Version:\s*(\d+)\.(\d+)(?:\.\d+)*")

NAMESPACE_BOX = (
    "CRIU cannot dump a namespace box: its user namespace, made last by the code's process, maps only the box's "
    "uid and its other namespaces belong to the host's, while CRIU dumps only trees whose namespaces all belong "
    'to a user namespace that maps root (it stops at "Can\'t dump nested user namespace")'
)
WEAK_BOX = (
    "weak mode's code runs in a Landlock domain, which CRIU does not checkpoint (its parasite's socket is refused "
    "inside the domain)"
)


def memory_why(criu: str, isolation: str, landlock_abi: int = 0) -> str:
    """Why the local driver keeps no "memory" snapshots on this machine, naming what was found (never "")."""
    if isolation != "namespace":
        return f"memory snapshots: {WEAK_BOX}" if landlock_abi > 0 else "memory snapshots: not in weak mode"
    found = shutil.which(criu)
    if found is None:
        return f"memory snapshots need CRIU {_dotted(MIN_VERSION)} or later: no {criu!r} found (sandbox.local.criu)"
    version, problem = _working(found)
    if problem:
        return f"memory snapshots need a working CRIU {_dotted(MIN_VERSION)} or later: {problem}"
    why = f"memory snapshots: CRIU {version} at {found} works (criu check passes), but {NAMESPACE_BOX}"
    return why if _has_sys_resource() else f"{why}; nor can it read a box's rlimits without CAP_SYS_RESOURCE"


@functools.cache  # once per program and process: the capabilities are made on the event loop
def _working(path: str) -> tuple[str, str]:
    """The version of the CRIU at ``path`` and what is wrong with it ("": recent enough, ``criu check`` passes)."""
    try:
        shown = subprocess.run([path, "--version"], capture_output=True, timeout=PROBE_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return "", f"{path} --version failed: {exc}"
    match = _VERSION.search(shown.stdout)
    if match is None:
        return "", f"{path} --version printed no version"
    version = match[0].split()[-1].decode()
    if (int(match[1]), int(match[2])) < MIN_VERSION:
        return version, f"{path} is CRIU {version} (Debian bookworm's 3.17 fails on this kernel)"
    try:
        checked = subprocess.run([path, "check"], capture_output=True, timeout=PROBE_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return version, f"{path} check failed: {exc}"
    if checked.returncode != 0:
        lines = (checked.stderr or checked.stdout).decode(errors="replace").strip().splitlines()
        return version, f"`{path} check` fails: {lines[-1][:200] if lines else f'exit status {checked.returncode}'}"
    return version, ""


def _has_sys_resource() -> bool:
    """Whether this process holds CAP_SYS_RESOURCE, which CRIU needs to read the rlimits of another uid's task."""
    try:
        with open("/proc/self/status") as fh:
            effective = next(line for line in fh if line.startswith("CapEff:"))
    except (OSError, StopIteration):
        return False
    return bool(int(effective.split()[1], 16) >> CAP_SYS_RESOURCE & 1)


def _dotted(version: tuple[int, int]) -> str:
    return ".".join(map(str, version))
