"""Thin ctypes wrappers for the Linux calls the launcher server needs.

Standard library only: the server runs with ``python -I -S`` and imports this
module from its own directory. Every wrapper raises ``OSError`` with the errno
and the name of what failed, so an error can be reported with its stage.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import socket
import struct

_libc = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_SLAVE = 1 << 19
MS_SHARED = 1 << 20

MNT_DETACH = 2

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

# pivot_root has no glibc wrapper on Debian 12; the syscall number is per architecture.
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}

_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.setfsuid.argtypes = [ctypes.c_uint]
_libc.setfsgid.argtypes = [ctypes.c_uint]
_libc.syscall.restype = ctypes.c_long


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    """unshare(2); uses ``os.unshare`` where Python has it (3.12+)."""
    native = getattr(os, "unshare", None)
    if native is not None:
        try:
            native(flags)
        except OSError as exc:
            raise OSError(exc.errno, f"unshare({flags:#x}): {exc.strerror}") from None
        return
    _check(_libc.unshare(flags), f"unshare({flags:#x})")


def setns(fd: int, nstype: int) -> None:
    """setns(2)."""
    _check(_libc.setns(fd, nstype), f"setns({nstype:#x})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2)."""
    _check(
        _libc.mount(
            source.encode() if source is not None else None,
            target.encode(),
            fstype.encode() if fstype is not None else None,
            flags,
            data.encode() if data is not None else None,
        ),
        f"mount {target}",
    )


def bind_readonly(source: str, target: str, *, recursive: bool = True) -> None:
    """Bind ``source`` at ``target`` and make the new mount, and every mount under it, read-only, nosuid, nodev.

    A bind mount takes its flags from the source, so read-only needs a second
    call; and a remount changes only the top mount, so a writable mount under
    /usr (or /etc, or an interpreter's prefix) would stay writable, suid and dev.
    ``mount_setattr(AT_RECURSIVE)`` changes the whole tree at once, as bubblewrap
    does; kernels before 5.12 get each submount remounted from mountinfo.
    """
    mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
    try:
        mount_setattr(target, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, recursive=recursive)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            raise
        for point in submounts(target) if recursive else [target]:
            remount_readonly(point)


MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
_SYS_MOUNT_SETATTR = 442  # the same on every architecture (a generic number)


def mount_setattr(target: str, attr_set: int, *, recursive: bool) -> None:
    """mount_setattr(2): set ``attr_set`` (MOUNT_ATTR_*) on ``target``, and on every mount under it if ``recursive``."""
    attr = struct.pack("=QQQQ", attr_set, 0, 0, 0)  # struct mount_attr: set, clr, propagation, userns_fd
    flags = AT_RECURSIVE if recursive else 0
    if _libc.syscall(_SYS_MOUNT_SETATTR, AT_FDCWD, target.encode(), flags, attr, len(attr)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount_setattr {target}: {os.strerror(err)}")


# Per-mount flags (mountinfo's fifth field) a read-only remount must keep: in a user namespace the
# kernel refuses to clear a locked one.
_MOUNT_OPTIONS = {"noexec": MS_NOEXEC, "noatime": 1024, "nodiratime": 2048, "relatime": 1 << 21}


def _unescape(field: str) -> str:
    """A mountinfo path: the kernel writes space, tab, newline and backslash as octal escapes (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def submounts(target: str) -> list[str]:
    """``target`` and every mount point under it, parents first, from /proc/self/mountinfo."""
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            point = _unescape(line.split()[4])
            if point == target or point.startswith(target.rstrip("/") + "/"):
                found.append(point)
    return sorted(set(found), key=lambda p: p.count("/"))


def remount_readonly(point: str) -> None:
    """Remount one mount point read-only, nosuid and nodev, keeping its other per-mount flags."""
    keep = 0
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            if _unescape(fields[4]) == point:
                keep = 0
                for option in fields[5].split(","):
                    keep |= _MOUNT_OPTIONS.get(option, 0)
    mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | keep)


def umount(target: str, flags: int = MNT_DETACH) -> None:
    """umount2(2), detaching lazily by default."""
    _check(_libc.umount2(target.encode(), flags), f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    """pivot_root(2)."""
    number = _SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown syscall number on {os.uname().machine}")
    _check(_libc.syscall(number, new_root.encode(), put_old.encode()), "pivot_root")


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    """prctl(2); returns the call's non-negative result."""
    result: int = _libc.prctl(option, arg2, arg3, arg4, arg5)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")
    return result


def drop_bounding_set() -> None:
    """Drop every capability from the bounding set and clear the ambient set."""
    cap = 0
    while True:
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            if err == errno.EINVAL:  # past the last capability this kernel knows
                break
            raise OSError(err, f"drop capability {cap}: {os.strerror(err)}")
        cap += 1
    # Ambient capabilities would survive execve of a non-root program.
    if _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        if err != errno.EINVAL:  # kernels before 4.3 have no ambient set
            raise OSError(err, f"clear ambient capabilities: {os.strerror(err)}")


_SYS_KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 271, "s390x": 280}
KEYCTL_JOIN_SESSION_KEYRING = 1


def join_new_session_keyring() -> None:
    """Replace the inherited session keyring with a new anonymous one.

    Keys in a keyring a process "possesses" are readable with possessor rights,
    whatever its uid: the app's session keyring must not reach the code.
    """
    number = _SYS_KEYCTL.get(os.uname().machine)
    if number is None:
        raise OSError(errno.ENOSYS, f"keyctl: unknown syscall number on {os.uname().machine}")
    if _libc.syscall(number, KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        err = ctypes.get_errno()
        # A kernel without keys has nothing to leak; a seccomp filter that refuses keyctl (container
        # runtimes' default profiles do) refuses it to the code as well, since filters are inherited.
        if err not in (errno.ENOSYS, errno.EPERM):
            raise OSError(err, f"keyctl(JOIN_SESSION_KEYRING): {os.strerror(err)}")


PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


class SeccompProgram:
    """A classic BPF seccomp filter (``struct sock_filter[]``), laid out once for prctl.

    Built in the server before any fork, so installing it in C is one system call
    and touches no new memory.
    """

    def __init__(self, program: bytes) -> None:
        self._buffer = ctypes.create_string_buffer(program, len(program))
        self._fprog = _SockFprog(len(program) // 8, ctypes.addressof(self._buffer))

    def install(self) -> None:
        """Install the filter on this thread (and what it execs); needs no_new_privs."""
        if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(self._fprog), 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"seccomp filter: {os.strerror(err)}")


def setfsids(uid: int, gid: int) -> None:
    """Set the filesystem uid and gid of this thread (no error reporting in the kernel ABI).

    Moving the fsuid away from 0 also drops the file capabilities (DAC override and
    friends) from the effective set, so file operations for a box are checked
    exactly as if that box's user made them; moving back to 0 restores them.
    """
    _libc.setfsgid(gid)
    _libc.setfsuid(uid)


LOOPBACK_MTU = 1500


def loopback_up(mtu: int | None = None) -> None:
    """Bring ``lo`` up in the current network namespace, with ``mtu`` if given."""
    siocsifflags = 0x8914
    siocsifmtu = 0x8922
    iff_up_running = 0x1 | 0x40
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        if mtu is not None:
            fcntl.ioctl(sock.fileno(), siocsifmtu, struct.pack("16si20x", b"lo", mtu))
        ifreq = struct.pack("16sH22x", b"lo", iff_up_running)  # struct ifreq is 40 bytes
        fcntl.ioctl(sock.fileno(), siocsifflags, ifreq)


def read_file(path: str) -> str:
    """Read a short control file (a sysctl) with one read(2)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096).decode()
    finally:
        os.close(fd)


def write_file(path: str, data: str) -> None:
    """Write a short control file (uid_map, cgroup knobs) with one write(2)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data.encode())
    finally:
        os.close(fd)
