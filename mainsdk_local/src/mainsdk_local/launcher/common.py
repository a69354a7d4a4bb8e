"""What every part of the launcher server shares: its constants, the request error, descriptors, /proc.

Standard library only, like the whole server (``python -I -S launcher/__main__.py``);
server modules import each other from this directory.
"""

from __future__ import annotations

import contextlib
import os
import resource

UID_BASE = 1_500_000_000
SLOTS_PER_SERVER = 512  # boxes open at once in one server; also spaces servers' uid ranges apart
INSIDE_ID = 1000  # the code's uid and gid inside its user namespace
MOUNT_BASE = "/tmp/.mainsdk-local"  # the server's private tmpfs of boxes and root templates
REPORT_LIMIT = 4096  # the longest setup error a forked stage reports
MAX_POOL = 64  # warm interpreters a server may keep idle at most (about 10 MB each; see pool.py)
# A box's folders, all on its own tmpfs (its disk limit): /work, /out and /tmp in its root (``stages``).
BOX_FOLDERS = ("work", "out", "tmp")
# Where a box's python execs see the cell kernel's own packages (IPython), read-only: apart from the user's
# site-packages and off sys.path (the kernel appends it; mainsdk_driver_kernel_site). An overlay's one target
# that is not a hidden path.
KERNEL_SITE = "/opt/mainsdk/kernel"
# The same for the kernel's node packages (typescript, for TypeScript cells where the box's node strips no types),
# which the node executor loads from its start line's site: the other overlay target that is not a hidden path.
NODE_KERNEL_SITE = "/opt/mainsdk/node-kernel"
KERNEL_SITES = (KERNEL_SITE, NODE_KERNEL_SITE)
HOME_IN_TMP = "home"  # the code's HOME: a folder of the box's tmp/, made with the box (``boxes.make_box_fs``)


def box_environment(env: dict[str, str], tmp: str) -> dict[str, str]:
    """The run's environment: the app's ``env``, plus HOME and TMPDIR in the box's ``tmp`` unless it names them.

    Nothing of the host's environment: the rest is the app's own, as before.
    """
    return {"HOME": os.path.join(tmp, HOME_IN_TMP), "TMPDIR": tmp, **env}


class RequestError(Exception):
    """A request failed; ``kind`` tells the client which exception to raise."""

    def __init__(self, kind: str, message: str, err: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind  # "value" | "os" | "launcher"
        self.errno = err


def launch_error(stage: str, exc: BaseException) -> RequestError:
    """A launcher error naming the stage that failed."""
    err = exc.errno if isinstance(exc, OSError) else None
    return RequestError("launcher", f"{stage}: {exc}", err)


def host_pid() -> int:
    """Our pid as the host (and /proc) sees it; os.getpid() is 1 inside our own pid namespace."""
    return int(os.readlink("/proc/self"))


def proc_starttime(pid: int | str) -> str | None:
    """When ``pid`` started (clock ticks since boot), to tell a live process from a reused pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    return raw[raw.rindex(b")") + 2 :].split()[19].decode()


def close_fd(fd: int | None) -> None:
    """Close ``fd`` if it is one, ignoring errors."""
    if fd is not None and fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)


def close_all_except(keep: set[int]) -> None:
    """Close every descriptor but ``keep`` (close_range under the hood: cheap)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    top = 1 << 20 if hard < 0 or hard > 1 << 20 else hard  # RLIM_INFINITY is -1 here
    start = 0
    for fd in sorted(keep):
        if fd > start:
            os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, top)
