"""What several guarantee modules share: syscall numbers, the socket family probe, the app's secret, launcher pids.

A helper module, not a test module: test modules import from here, never from each other.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from pathlib import Path
from typing import Any

# Syscall numbers the code calls through ctypes, per machine.
SYSCALLS = {
    "x86_64": {"ptrace": 101, "process_vm_readv": 310, "io_uring_setup": 425, "bpf": 321, "keyctl": 250,
               "perf_event_open": 298, "userfaultfd": 323, "mount": 165, "unshare": 272, "setns": 308,
               "init_module": 175, "pidfd_getfd": 438},
    "aarch64": {"ptrace": 117, "process_vm_readv": 270, "io_uring_setup": 425, "bpf": 280, "keyctl": 219,
                "perf_event_open": 241, "userfaultfd": 282, "mount": 40, "unshare": 97, "setns": 268,
                "init_module": 105, "pidfd_getfd": 438},
}  # fmt: skip


NUMBERS = SYSCALLS[os.uname().machine]


SECRET = "s3cr3t-" + secrets.token_hex(8)  # what the app holds and the code must never print


def launcher_server_pids() -> list[int]:
    """The launcher servers this process started (their command line names launcher/__main__.py)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            ppid = int(Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
        except OSError:
            continue
        if b"launcher/__main__.py" in cmdline and ppid == os.getpid():
            pids.append(int(entry))
    return pids


# Address families the code tries, as (name, family, type, protocol); every one must be refused.
FOREIGN_SOCKETS = [
    ("vsock", 40, socket.SOCK_STREAM, 0),  # AF_VSOCK: the VM's vsock port space, which no netns confines
    ("vsock-dgram", 40, socket.SOCK_DGRAM, 0),
    ("packet", 17, socket.SOCK_RAW, 0),  # AF_PACKET
    ("unix", 1, socket.SOCK_STREAM, 0),  # AF_UNIX: nothing inside needs a new one
    ("alg", 38, socket.SOCK_SEQPACKET, 0),  # AF_ALG: kernel crypto, a classic exploit surface
    ("bluetooth", 31, socket.SOCK_RAW, 0),
    ("tipc", 30, socket.SOCK_RDM, 0),
    ("rds", 21, socket.SOCK_SEQPACKET, 0),
    ("xdp", 44, socket.SOCK_RAW, 0),
    ("netlink-uevent", 16, socket.SOCK_DGRAM, 15),  # NETLINK_KOBJECT_UEVENT: the host's uevents
    ("netlink-diag", 16, socket.SOCK_DGRAM, 4),  # NETLINK_SOCK_DIAG
    ("netlink-audit", 16, socket.SOCK_RAW, 9),
    ("netlink-generic", 16, socket.SOCK_RAW, 16),
]


SOCKET_PROBE = f"""
import errno, json, socket
out = {{}}
for name, family, kind, proto in {[(n, f, int(k), p) for n, f, k, p in FOREIGN_SOCKETS]!r}:
    try:
        s = socket.socket(family, kind, proto)
    except OSError as exc:
        out[name] = errno.errorcode[exc.errno]
        continue
    try:  # what the outside attack did with it: bind and listen where the host side sees it
        s.bind((0xFFFFFFFF, 5005) if family == 40 else ('',) if family == 1 else (0, 1) if family == 16 else ())
        if kind == socket.SOCK_STREAM:
            s.listen(1)
        out[name] = 'bound'
    except (OSError, TypeError) as exc:
        out[name] = 'created'
a, b = socket.socketpair(); a.send(b'x'); out['socketpair'] = b.recv(1).decode()
try:
    socket.socketpair(socket.AF_INET)
except OSError as exc:
    out['socketpair-inet'] = errno.errorcode[exc.errno]
out['interfaces'] = [n for _, n in socket.if_nameindex()]  # NETLINK_ROUTE: the box's own namespace
out['getaddrinfo'] = sorted({{a[4][0] for a in socket.getaddrinfo('localhost', 80, flags=socket.AI_ADDRCONFIG)}})
try:
    with socket.create_server(('127.0.0.1', 0)) as server, socket.create_connection(server.getsockname()) as c:
        c.sendall(b'tcp'); out['tcp'] = server.accept()[0].recv(3).decode()
except OSError as exc:
    out['tcp'] = errno.errorcode[exc.errno]
print(json.dumps(out))
"""


def check_socket_families(result: Any, tcp: str = "tcp") -> None:
    """What SOCKET_PROBE must print: every foreign family refused, what runtimes need still working."""
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    refused = {name: out.pop(name) for name, *_ in FOREIGN_SOCKETS}
    assert refused == {
        name: "EPROTONOSUPPORT" if name.startswith("netlink") else "EAFNOSUPPORT" for name, *_ in FOREIGN_SOCKETS
    }, refused
    assert out.pop("socketpair") == "x" and out.pop("socketpair-inet") == "EAFNOSUPPORT"
    assert out.pop("getaddrinfo") == ["127.0.0.1"] and out.pop("tcp") == tcp
    assert out.pop("interfaces")  # netlink route works (only lo in the box: checked by the caller)
