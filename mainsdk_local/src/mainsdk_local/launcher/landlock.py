"""Landlock for weak mode: where the kernel has it, the code may read, write and connect only where it must.

Weak mode runs the code on the host, in the host's filesystem and network, so
Landlock closes what namespaces would have: reads outside the system
directories, the interpreter and the box; writes outside the box; TCP
connections to anything but the run's proxy port, and TCP binds; and (ABI 6)
signals and abstract Unix sockets outside the code's own domain. It does not
cover UDP or ICMP: weak mode stays weak. The namespace path does not need it
(its root, mounts and network namespace already give less), so it is not
applied there.

C calls ``restrict`` after no_new_privs, before execve. Standard library only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
from typing import Any

from . import common

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

# Generic syscall numbers: the same on x86_64 and aarch64.
_CREATE_RULESET = 444
_ADD_RULE = 445
_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
_FS_V1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

# What weak mode's code may read and run: the system, and the curated parts of /etc a root template holds.
READABLE = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/dev")
READABLE_ETC = ("passwd", "group", "hosts", "nsswitch.conf", "localtime", "ld.so.cache", "ld.so.conf", "ld.so.conf.d")
WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


def abi() -> int:
    """The kernel's Landlock ABI version; 0 when it has none (or it is disabled)."""
    version: int = _libc.syscall(_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    return max(version, 0)


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock {what}: {os.strerror(err)}")
    return result


def restrict(readable: list[str], writable: list[str], connect_ports: list[int]) -> int:
    """Restrict this thread and what it execs; returns the ABI used (0: none, nothing done).

    ``readable`` paths (and everything under a directory) may be read and run,
    ``writable`` ones read and written; missing paths are skipped. TCP connects
    go only to ``connect_ports``; nothing may bind a TCP port.
    """
    version = abi()
    if version < 1:
        return 0
    fs = _FS_V1 | (REFER if version >= 2 else 0) | (TRUNCATE if version >= 3 else 0)
    fs |= IOCTL_DEV if version >= 5 else 0
    net = NET_BIND_TCP | NET_CONNECT_TCP if version >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0
    attr = struct.pack("=QQQ", fs, net, scoped)[: 8 if version < 4 else 16 if version < 6 else 24]
    ruleset = _check(_libc.syscall(_CREATE_RULESET, attr, len(attr), 0), "create_ruleset")
    try:
        read = EXECUTE | READ_FILE | READ_DIR
        for paths, access in ((readable, read), (writable, fs)):
            for path in paths:
                _add_path(ruleset, path, access & fs)
        if net:
            for port in connect_ports:
                rule = struct.pack("=QQ", NET_CONNECT_TCP, port)
                _check(_libc.syscall(_ADD_RULE, ruleset, _RULE_NET_PORT, rule, 0), f"port {port}")
        _check(_libc.syscall(_RESTRICT_SELF, ruleset, 0), "restrict_self")
    finally:
        os.close(ruleset)
    return version


def _add_path(ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
            return
        raise
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= _FILE_RIGHTS  # a file rule may only grant file rights
        rule = struct.pack("=Qi", access, fd)
        _check(_libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, rule, 0), f"path {path}")
    finally:
        os.close(fd)


def weak_rules(box_dir: str, readonly: list[str], node_preload: str, proxy_port: int | None) -> dict[str, list[Any]]:
    """The rules for one weak exec: what ``restrict`` gets, as JSON for the job."""
    readable = [*READABLE, *(f"/etc/{name}" for name in READABLE_ETC), "/etc/ssl", "/etc/ca-certificates"]
    readable += [*readonly, node_preload]
    writable = [*(os.path.join(box_dir, name) for name in common.BOX_FOLDERS), *WRITABLE_DEVICES]
    return {"readable": readable, "writable": writable, "connect": [proxy_port] if proxy_port else []}
