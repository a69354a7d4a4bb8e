"""A seccomp filter for what the code never needs, as a classic BPF program built here.

C installs it after no_new_privs, just before execve; it holds for the code and
everything it starts, and nothing can remove it. It is defence in depth: the
namespaces, the dropped capabilities and no_new_privs already deny most of it.

- A syscall made under another architecture's ABI (i386 ``int 0x80`` on x86_64,
  x32) kills the process: its numbers would mean other calls.
- ``ptrace``, ``process_vm_*``, ``pidfd_getfd``, ``kcmp`` (other processes'
  memory and files), keyrings, ``bpf``, ``perf_event_open``, ``userfaultfd``,
  mount and namespace calls (``mount``, ``pivot_root``, the new mount API,
  ``unshare``, ``setns``, ``clone`` with a ``CLONE_NEW*`` flag), modules,
  kexec, reboot, swap, ``acct``, quotas, ``open_by_handle_at``, ``syslog``,
  ``chroot``: EPERM.
- ``io_uring_*`` and ``clone3`` (whose flags a filter cannot read): ENOSYS, so
  libuv and glibc fall back to what they used before them.
- ``socket()`` takes an allowlist of address families: ``AF_INET`` and
  ``AF_INET6``, and ``AF_NETLINK`` with protocol ``NETLINK_ROUTE`` only (glibc's
  ``getifaddrs``/``if_nameindex`` and ``getaddrinfo(AI_ADDRCONFIG)``, Node's
  ``os.networkInterfaces()``; in the box's network namespace it shows ``lo``
  alone and changes nothing without ``CAP_NET_ADMIN`` there). Every other family
  (``AF_UNIX``, ``AF_VSOCK``, ``AF_PACKET``, ``AF_ALG``, ``AF_BLUETOOTH``, ...)
  gets EAFNOSUPPORT, as from a kernel without it; other netlink protocols
  (``NETLINK_KOBJECT_UEVENT``: the host's uevents) get EPROTONOSUPPORT. A network
  namespace does not confine ``AF_VSOCK`` (the VM's vsock port space is shared),
  hence a list of what is allowed rather than of what is not. ``socketpair``
  stays for ``AF_UNIX`` only (asyncio and libuv use it, and a pair reaches
  nothing). x86_64 has no ``socketcall``; i386's is killed with its ABI.
- Setting extended attributes (``setxattr`` and its ``l``/``f``/``at`` forms):
  EOPNOTSUPP, as from a file system without them. On the box's tmpfs they are
  kernel memory that neither the tmpfs size nor ``statvfs`` counts, so in a
  session they outlived each command's cgroup (5 commands under 64 MiB held
  ~300 MiB); the code never needs them.
- ``ioctl(TIOCSTI)`` and ``ioctl(TIOCLINUX)``: EPERM (the code has no controlling
  terminal anyway: setsid).

Standard library only; the server builds the program once (``FILTER``), before it forks.
"""

from __future__ import annotations

import errno
import os
import struct

from . import linux

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
_NR = 0
_ARCH = 4


def _arg_low(index: int) -> int:
    return 16 + 8 * index  # the low 32 bits of args[index] on a little-endian machine


_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

RET_KILL_PROCESS = 0x80000000
RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

AF_UNIX = 1
AF_INET = 2
AF_INET6 = 10
AF_NETLINK = 16
NETLINK_ROUTE = 0
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
CLONE_NEW_FLAGS = 0x7E020000  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
X32_SYSCALL_BIT = 0x40000000

# Per machine: its audit architecture and the numbers of the syscalls the filter names
# (from asm/unistd_64.h on x86_64, asm-generic/unistd.h on aarch64).
_X86_64 = """
    ptrace 101  process_vm_readv 310  process_vm_writev 311  pidfd_getfd 438  kcmp 312
    keyctl 250  add_key 248  request_key 249  bpf 321  perf_event_open 298  userfaultfd 323
    mount 165  umount2 166  pivot_root 155  move_mount 429  open_tree 428  fsopen 430  fsconfig 431
    fsmount 432  fspick 433  mount_setattr 442  unshare 272  setns 308  chroot 161
    init_module 175  finit_module 313  delete_module 176  kexec_load 246  kexec_file_load 320
    reboot 169  swapon 167  swapoff 168  acct 163  quotactl 179  quotactl_fd 443
    open_by_handle_at 304  name_to_handle_at 303  lookup_dcookie 212  syslog 103  iopl 172  ioperm 173
    uselib 134  io_uring_setup 425  io_uring_enter 426  io_uring_register 427  clone3 435
    socket 41  socketpair 53  ioctl 16  clone 56
    setxattr 188  lsetxattr 189  fsetxattr 190  setxattrat 463
"""
_AARCH64 = """
    ptrace 117  process_vm_readv 270  process_vm_writev 271  pidfd_getfd 438  kcmp 272
    keyctl 219  add_key 217  request_key 218  bpf 280  perf_event_open 241  userfaultfd 282
    mount 40  umount2 39  pivot_root 41  move_mount 429  open_tree 428  fsopen 430  fsconfig 431
    fsmount 432  fspick 433  mount_setattr 442  unshare 97  setns 268  chroot 51
    init_module 105  finit_module 273  delete_module 106  kexec_load 104  kexec_file_load 294
    reboot 142  swapon 224  swapoff 225  acct 89  quotactl 60  quotactl_fd 443
    open_by_handle_at 265  name_to_handle_at 264  lookup_dcookie 18  syslog 116
    io_uring_setup 425  io_uring_enter 426  io_uring_register 427  clone3 435
    socket 198  socketpair 199  ioctl 29  clone 220
    setxattr 5  lsetxattr 6  fsetxattr 7  setxattrat 463
"""


def _table(text: str) -> dict[str, int]:
    words = text.split()
    return {name: int(number) for name, number in zip(words[::2], words[1::2], strict=True)}


_ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, _table(_X86_64)),
    "aarch64": (0xC00000B7, _table(_AARCH64)),
}
# Not errors of their own: ENOSYS makes callers fall back to an older call.
_NOT_IMPLEMENTED = ("io_uring_setup", "io_uring_enter", "io_uring_register", "clone3")
# What a file system without extended attributes answers; cp, tar and shutil.copystat carry on.
_NOT_SUPPORTED = ("setxattr", "lsetxattr", "fsetxattr", "setxattrat")
# Checked by argument below, not refused outright.
_BY_ARGUMENT = ("socket", "socketpair", "ioctl", "clone")


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _errno(value: int) -> int:
    return _RET_ERRNO | value


def build(machine: str) -> bytes | None:
    """The filter program (``struct sock_filter[]``) for ``machine``, or None when there is no table for it."""
    if machine not in _ARCHES:
        return None
    audit_arch, numbers = _ARCHES[machine]
    prog = [
        _insn(_LD_W_ABS, 0, 0, _ARCH),
        _insn(_JEQ_K, 1, 0, audit_arch),
        _insn(_RET_K, 0, 0, RET_KILL_PROCESS),  # a foreign ABI: fail closed
        _insn(_LD_W_ABS, 0, 0, _NR),
    ]
    if machine == "x86_64":
        prog += [_insn(_JGE_K, 0, 1, X32_SYSCALL_BIT), _insn(_RET_K, 0, 0, RET_KILL_PROCESS)]
    for name, number in numbers.items():
        if name in _BY_ARGUMENT:
            continue
        code = errno.ENOSYS if name in _NOT_IMPLEMENTED else errno.EOPNOTSUPP if name in _NOT_SUPPORTED else errno.EPERM
        prog += [_insn(_JEQ_K, 0, 1, number), _insn(_RET_K, 0, 0, _errno(code))]
    eperm = _insn(_RET_K, 0, 0, _errno(errno.EPERM))
    allow = _insn(_RET_K, 0, 0, RET_ALLOW)
    reload_nr = _insn(_LD_W_ABS, 0, 0, _NR)
    no_family = _insn(_RET_K, 0, 0, _errno(errno.EAFNOSUPPORT))
    # socket(family, type, protocol): an allowlist of families (ints: the low 32 bits).
    prog += [
        _insn(_JEQ_K, 0, 9, numbers["socket"]),
        _insn(_LD_W_ABS, 0, 0, _arg_low(0)),
        _insn(_JEQ_K, 5, 0, AF_INET),
        _insn(_JEQ_K, 4, 0, AF_INET6),
        _insn(_JEQ_K, 0, 4, AF_NETLINK),
        _insn(_LD_W_ABS, 0, 0, _arg_low(2)),
        _insn(_JEQ_K, 1, 0, NETLINK_ROUTE),
        _insn(_RET_K, 0, 0, _errno(errno.EPROTONOSUPPORT)),
        allow,
        no_family,
    ]
    # socketpair(AF_UNIX, ...) only.
    prog += [
        _insn(_JEQ_K, 0, 4, numbers["socketpair"]),
        _insn(_LD_W_ABS, 0, 0, _arg_low(0)),
        _insn(_JEQ_K, 0, 1, AF_UNIX),
        allow,
        no_family,
    ]
    # ioctl(fd, TIOCSTI | TIOCLINUX, ...): refused (the request is an unsigned int: the low 32 bits).
    prog += [
        _insn(_JEQ_K, 0, 5, numbers["ioctl"]),
        _insn(_LD_W_ABS, 0, 0, _arg_low(1)),
        _insn(_JEQ_K, 1, 0, TIOCSTI),
        _insn(_JEQ_K, 0, 1, TIOCLINUX),
        eperm,
        allow,
    ]
    # clone(flags, ...) with a CLONE_NEW* flag: refused (flags sit in the low 32 bits).
    prog += [
        reload_nr,
        _insn(_JEQ_K, 0, 3, numbers["clone"]),
        _insn(_LD_W_ABS, 0, 0, _arg_low(0)),
        _insn(_JSET_K, 0, 1, CLONE_NEW_FLAGS),
        eperm,
        allow,
    ]
    return b"".join(prog)


_program = build(os.uname().machine)
FILTER = linux.SeccompProgram(_program) if _program is not None else None  # None: no table for this machine
