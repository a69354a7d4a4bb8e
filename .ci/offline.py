"""Run a command with no network but loopback, no package index and empty caches: how tox runs the E2B and
Vercel suites, so a test that reaches the network (an index, a provider) fails in CI instead of passing there.

    python .ci/offline.py pytest mainsdk_e2b/tests ...

It re-executes itself under ``unshare -n`` (as root; else ``unshare -rn``, a user namespace), brings loopback up
there, checks that nothing outside answers (a connection to a public address must fail at once), then runs the
command with ``PIP_NO_INDEX=1`` and ``PIP_CACHE_DIR`` and ``XDG_CACHE_HOME`` in a fresh empty folder.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile

INSIDE = "--inside-the-namespace"
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def loopback_up() -> None:
    """Set ``lo`` up (a new network namespace has it down), with the ioctl ``ip link set lo up`` makes."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def nothing_outside() -> None:
    """Refuse to run when an outside address can be reached: the check would prove nothing."""
    for address in (("1.1.1.1", 443), ("8.8.8.8", 53)):
        try:
            socket.create_connection(address, timeout=2).close()
        except OSError:
            continue
        sys.exit(f"offline.py: {address[0]} answers inside the namespace; refusing to run as if offline")


def main(argv: list[str]) -> int:
    if not argv:
        sys.exit("usage: python .ci/offline.py COMMAND [ARG ...]")
    if argv[0] != INSIDE:
        unshare = shutil.which("unshare")
        if unshare is None:
            sys.exit("offline.py: unshare (util-linux) is needed to run the suite with no network")
        flags = ["-n"] if os.geteuid() == 0 else ["-rn"]
        return subprocess.call([unshare, *flags, "--", sys.executable, os.path.abspath(__file__), INSIDE, *argv])
    loopback_up()
    nothing_outside()
    with tempfile.TemporaryDirectory(prefix="mainsdk-offline-") as empty:
        env = dict(os.environ, PIP_NO_INDEX="1", PIP_CACHE_DIR=f"{empty}/pip", XDG_CACHE_HOME=f"{empty}/cache")
        return subprocess.call(argv[1:], env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
