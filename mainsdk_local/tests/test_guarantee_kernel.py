"""Code cannot reach the kernel's risky interfaces: raw and foreign sockets, ptrace, io_uring, bpf, TIOCSTI.

The seccomp filter and the socket family allowlist, tried from real code (ctypes syscalls, every address
family, another ABI), and what runtimes still need (inet sockets, netlink route, node without io_uring).
"""

from __future__ import annotations

import errno
import json
import os
import shutil

import pytest
from escape_probes import NUMBERS, SOCKET_PROBE, check_socket_families
from mainsdk import Sandbox
from requires import NAMESPACES

ABI_CHILD = r"""
import ctypes, mmap, sys
which = sys.argv[1]
if which == 'x32':
    libc = ctypes.CDLL(None, use_errno=True); libc.syscall.restype = ctypes.c_long
    print(libc.syscall(0x40000000 | 41, 40, 1, 0), flush=True)
else:
    number = {'i386-socket': 359, 'i386-socketcall': 102}[which]
    args = (ctypes.c_uint32 * 3)(40, 1, 0)
    # mov eax, number; mov ebx, 40 (or 1: SYS_SOCKET); mov ecx, 1 (or &args); xor edx, edx; int 0x80; ret
    ebx, ecx = (40, 1) if which == 'i386-socket' else (1, ctypes.addressof(args) & 0xFFFFFFFF)
    blob = (b'\xb8' + number.to_bytes(4, 'little') + b'\xbb' + ebx.to_bytes(4, 'little')
            + b'\xb9' + ecx.to_bytes(4, 'little') + b'\x31\xd2\xcd\x80\xc3')
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(blob)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    print(ctypes.CFUNCTYPE(ctypes.c_int)(address)(), flush=True)
"""


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_raw_sockets_ptrace_io_uring_and_kernel_interfaces_are_refused(sandbox: Sandbox) -> None:
    # Must hold: the code cannot open raw or packet sockets, trace anything, use io_uring (ENOSYS, so
    # runtimes fall back), load BPF or modules, mount, make namespaces or use keyrings.
    code = f"""
import ctypes, json, socket
libc = ctypes.CDLL(None, use_errno=True); libc.syscall.restype = ctypes.c_long
def call(name, *args):
    result = libc.syscall({NUMBERS}[name], *args)
    return ctypes.get_errno() if result < 0 else 'ok'
out = {{}}
kinds = [('raw', (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
         ('packet', (socket.AF_PACKET, socket.SOCK_RAW, 0)),
         ('raw6', (socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6))]
for name, args in kinds:
    try:
        socket.socket(*args); out[name] = 'ok'
    except OSError as exc:
        out[name] = exc.errno
params = ctypes.create_string_buffer(120)
out['io_uring_setup'] = call('io_uring_setup', 8, params)
out['ptrace'] = call('ptrace', 0, 0, 0, 0)
out['bpf'] = call('bpf', 0, 0, 0)
out['keyctl'] = call('keyctl', 0, -3, 0)
out['perf_event_open'] = call('perf_event_open', 0, 0, -1, -1, 0)
out['userfaultfd'] = call('userfaultfd', 0)
out['mount'] = call('mount', b'none', b'/work', b'tmpfs', 0, 0)
out['unshare'] = call('unshare', 0x10000000)
out['setns'] = call('setns', 0, 0)
out['init_module'] = call('init_module', 0, 0, b'')
out['seccomp'] = [l.split()[1] for l in open('/proc/self/status') if l.startswith('Seccomp:')][0]
print(json.dumps(out))
"""
    result = sandbox.run(code)
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out.pop("seccomp") == "2"  # a filter is installed
    assert out.pop("io_uring_setup") == errno.ENOSYS
    assert out.pop("packet") == errno.EAFNOSUPPORT  # not a family the filter lets through
    assert out == dict.fromkeys(out, errno.EPERM), out


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_only_inet_sockets_and_netlink_route_can_be_made(sandbox: Sandbox) -> None:
    # Must hold: socket() takes an allowlist of families. vsock (which reaches past the network namespace:
    # the VM's vsock port space is shared), packet, Unix, crypto, bluetooth and the rest are refused, and
    # so is every netlink protocol but NETLINK_ROUTE (kernel uevents of the host reached the box over
    # NETLINK_KOBJECT_UEVENT). What Python, Node, bash and curl need still works: TCP, socketpair,
    # getaddrinfo with AI_ADDRCONFIG, if_nameindex (NETLINK_ROUTE, showing only the box's lo).
    result = sandbox.run(SOCKET_PROBE)
    check_socket_families(result)
    assert json.loads(result.stdout)["interfaces"] == ["lo"]
    script = (
        "exec 3<>/dev/tcp/127.0.0.1/9 2>/dev/null || echo bash-tcp-refused\n"  # a real TCP attempt: ECONNREFUSED
        "curl -sS -m 5 http://127.0.0.1:9/ 2>&1 | grep -o 'Could not connect\\|Failed to connect' | head -1\n"
    )
    if shutil.which("curl") is not None:
        assert sandbox.run(script, "bash").stdout.splitlines() == ["bash-tcp-refused", "Failed to connect"]
    if shutil.which("node") is not None:
        node = (
            "const os = require('os'), net = require('net');"
            "console.log(Object.keys(os.networkInterfaces()).join(','));"
            "const s = net.createServer((c) => c.end('hi')).listen(0, '127.0.0.1', () => {"
            " net.connect(s.address().port, '127.0.0.1').on('data', (d) => { console.log(String(d)); s.close(); }); });"
        )
        result = sandbox.run(node, "node")
        assert result.stdout == "lo\nhi\n", result.stderr


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the i386 and x32 ABIs exist on x86_64 only")
def test_sockets_through_another_abi_kill_the_process(sandbox: Sandbox) -> None:
    # Must hold: the socket allowlist cannot be bypassed through another ABI's numbers: i386's socket (359)
    # or socketcall (102) through int 0x80, or x32's socket (0x40000000 | 41). Each kills the caller with
    # SIGSYS before the kernel looks at the call (x86_64 itself has no socketcall).
    code = (
        f"import subprocess, sys\nCHILD = {ABI_CHILD!r}\n"
        "for which in ('x32', 'i386-socket', 'i386-socketcall'):\n"
        "    done = subprocess.run([sys.executable, '-c', CHILD, which], capture_output=True, text=True)\n"
        "    print(which, done.returncode, done.stdout.strip())\n"
    )
    result = sandbox.run(code)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [f"{which} -31 " for which in ("x32", "i386-socket", "i386-socketcall")]


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_node_that_asks_for_io_uring_falls_back_and_runs(sandbox: Sandbox) -> None:
    # Must hold: io_uring is refused with ENOSYS, not a kill, so libuv (which uses it when asked) falls
    # back to its thread pool and Node's file operations still work.
    code = (
        "const fs = require('fs'); fs.writeFileSync('x', 'y');"
        " fs.promises.readFile('x', 'utf8').then((text) => console.log('read', text));"
    )
    result = sandbox.run(code, "node", env={"UV_USE_IO_URING": "1"})
    assert (result.stdout, result.exit_code) == ("read y\n", 0), result.stderr


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_tiocsti_cannot_push_input_into_a_terminal(sandbox: Sandbox) -> None:
    # Must hold: the code has no controlling terminal and no terminal at all (its stdio are a pipe and
    # /dev/null), cannot open or make one, and TIOCSTI is refused even on a terminal it could find.
    code = """
import fcntl, json, os, termios
out = {'stdin': os.readlink('/proc/self/fd/0'), 'sid': os.getsid(0) == os.getpid()}
for path in ['/dev/tty', '/dev/ptmx', '/dev/console', '/dev/pts/0', '/dev/tty1']:
    try:
        os.open(path, os.O_RDWR); out[path] = 'opened'
    except OSError as exc:
        out[path] = exc.errno
try:
    os.openpty(); out['openpty'] = 'ok'
except OSError as exc:
    out['openpty'] = exc.errno
for fd in (0, 1, 2):
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b'x'); out[f'TIOCSTI {fd}'] = 'ok'
    except OSError as exc:
        out[f'TIOCSTI {fd}'] = exc.errno
print(json.dumps(out))
"""
    result = sandbox.run(code)
    out = json.loads(result.stdout)
    assert out.pop("stdin") == "/dev/null"
    assert out.pop("sid") is True  # it leads a session of its own (setsid before exec): no controlling terminal
    assert "opened" not in out.values() and out.pop("openpty") != "ok"
    assert {k: v for k, v in out.items() if k.startswith("TIOCSTI")} == {
        f"TIOCSTI {fd}": errno.EPERM for fd in (0, 1, 2)
    }
