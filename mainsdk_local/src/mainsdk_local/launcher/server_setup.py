"""How the server sets itself up: its own namespaces when it is not root, the private mount that holds
boxes and roots, the probe that decides between namespace and weak isolation, and forking into a new
pid namespace.

Weak isolation is chosen only when the kernel or the machine's policy gives no namespaces
(``means_no_namespaces``): a refusal (EPERM, EACCES from a security module, EINVAL or ENOSYS
from a kernel without them, a namespace limit set to 0). Anything else on the namespace path
(a full /tmp, no inodes, no memory, too many processes or files) is an error the app sees,
never a quieter sandbox.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import os
import signal
import stat

from . import common, linux, stages

# What a kernel or a policy without namespaces answers (seccomp profiles of container runtimes: EPERM;
# AppArmor and SELinux: EACCES; kernels built without them: EINVAL or ENOSYS).
REFUSALS = (errno.EPERM, errno.EACCES, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)
NAMESPACE_LIMITS = ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup")


def means_no_namespaces(exc: OSError) -> bool:
    """Whether a failure on the namespace path means this machine gives no namespaces (so: weak).

    ENOSPC from unshare means a namespace count limit was reached: only a limit of 0
    (namespaces switched off) counts; a limit used up by other processes is transient.
    """
    if exc.errno in REFUSALS:
        return True
    if exc.errno == errno.ENOSPC and "unshare" in str(exc):
        for kind in NAMESPACE_LIMITS:
            try:
                with open(f"/proc/sys/user/max_{kind}_namespaces") as fh:
                    if fh.read().strip() == "0":
                        return True
            except OSError:
                continue
    return False


def enter_own_namespaces() -> None:
    """Not root: become root of our own user namespace, and pid 1 of a pid namespace it owns.

    A run's pid namespace is made by unsharing one for our next child and going back
    with setns(2) afterwards, which needs CAP_SYS_ADMIN over the user namespace owning
    our own pid namespace: so that must be ours. The process the app started stays
    outside as a shim that only mirrors our exit, so the app's Popen sees us.
    """
    uid, gid = os.geteuid(), os.getegid()
    linux.unshare(linux.CLONE_NEWUSER | linux.CLONE_NEWNS | linux.CLONE_NEWPID)
    linux.write_file("/proc/self/setgroups", "deny")
    linux.write_file("/proc/self/uid_map", f"0 {uid} 1")
    linux.write_file("/proc/self/gid_map", f"0 {gid} 1")
    pid = os.fork()
    if pid != 0:
        gc.disable()
        common.close_all_except({2})
        with contextlib.suppress(BaseException):
            while True:
                _, status = os.waitpid(pid, 0)
                os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
        os._exit(1)
    # We are pid 1 of the new pid namespace. If the shim is killed (the app's Launcher
    # gives up waiting), we go too, and our workers with us.
    linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)


def mount_private_base(*, new_mount_namespace: bool) -> None:
    """Mount the server's own tmpfs at MOUNT_BASE, in a mount namespace where nothing propagates."""
    if new_mount_namespace:
        linux.unshare(linux.CLONE_NEWNS)
    # Private: box and root mounts stay in our namespace, host mounts do not leak in.
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
    with contextlib.suppress(FileExistsError):
        os.mkdir(common.MOUNT_BASE, 0o700)
    if not stat.S_ISDIR(os.lstat(common.MOUNT_BASE).st_mode):
        raise OSError(errno.ENOTDIR, f"{common.MOUNT_BASE} is not a directory")
    # Every server mounts its own tmpfs here in its own namespace; the host sees an
    # empty directory and there is nothing to clean after a crash.
    linux.mount("tmpfs", common.MOUNT_BASE, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "size=1m,mode=0711")


def fork_in_new_pidns(own_pidns: int) -> int:
    """fork(2) with the child as pid 1 of a new pid namespace; the parent stays in ``own_pidns``."""
    linux.unshare(linux.CLONE_NEWPID)
    try:
        pid = os.fork()
    except BaseException:
        linux.setns(own_pidns, linux.CLONE_NEWPID)
        raise
    if pid != 0:
        # Back to our own pid namespace for children, so the next fork can unshare again.
        linux.setns(own_pidns, linux.CLONE_NEWPID)
    return pid


def probe(own_pidns: int, proc_dir: str, uid: int, *, drop_uid: bool) -> None:
    """Fork a throwaway child through the namespace steps a run takes; OSError when one fails.

    ``proc_dir`` is an empty directory to mount a proc on; ``uid`` the host uid a box
    would get, switched to first when ``drop_uid`` (the server is root).
    """
    r, w = os.pipe2(os.O_CLOEXEC)
    pid = fork_in_new_pidns(own_pidns)
    if pid == 0:
        gc.disable()
        try:
            linux.unshare(
                linux.CLONE_NEWNS | linux.CLONE_NEWNET | linux.CLONE_NEWIPC | linux.CLONE_NEWUTS | linux.CLONE_NEWCGROUP
            )
            linux.mount("proc", proc_dir, "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC)
            linux.loopback_up()
            if drop_uid:
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                linux.prctl(linux.PR_SET_DUMPABLE, 1)
            linux.unshare(linux.CLONE_NEWUSER)
            linux.write_file("/proc/self/setgroups", "deny")
            linux.write_file("/proc/self/uid_map", f"{common.INSIDE_ID} {uid} 1")
            os._exit(0)
        except BaseException as exc:  # noqa: BLE001 - report anything, never return into the server
            stages.report_failure(w, "probe", exc)
            os._exit(1)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    msg = os.read(r, common.REPORT_LIMIT * 2)
    os.close(r)
    if status != 0:
        # The child's own errno, so a transient failure (EAGAIN, ENOMEM, ENOSPC) is not taken for a refusal.
        err: int | None = None
        with contextlib.suppress(ValueError):
            err = json.loads(msg[4:]).get("errno")
        text = msg[4:].decode(errors="replace")
        raise OSError(err if isinstance(err, int) else errno.EIO, f"namespace probe failed: {text}")
