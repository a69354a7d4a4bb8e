"""How the app starts a cell kernel in a box: the loader on the command line, the package on stdin.

``kernel_command`` gives the program and arguments (``python3 -I -u -c <loader.py>``: only the loader, a few KiB,
the same for every kernel, so no box's argument limit bounds the kernel's size) and the first bytes of the
command's stdin, a channel only the app writes (``Command.input``): the token line, then the package (its
header, ``mainsdk-kernel <size> <sha256>``, then a JSON object of the package's files), then the start line.
See ``mainsdk.kernel``'s docstring for the protocol.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import json
from collections.abc import Mapping
from typing import Any

from mainsdk.kernel.loader import HEADER

SUFFIXES = (".py", ".js", ".sh")  # what of the package goes to the box: its modules and the executors' texts


@functools.cache
def kernel_files() -> Mapping[str, str]:
    """The text of every file of the kernel package, by name (read once)."""
    package = importlib.resources.files("mainsdk.kernel")
    return {
        entry.name: entry.read_text("utf-8")
        for entry in sorted(package.iterdir(), key=lambda e: e.name)
        if entry.is_file() and entry.name.endswith(SUFFIXES)
    }


def package_bytes(files: Mapping[str, str] | None = None) -> bytes:
    """The package as it travels: its header line, then the JSON of ``files`` (the kernel's own by default)."""
    raw = json.dumps(dict(kernel_files() if files is None else files), sort_keys=True).encode()
    return b"%s %d %s\n" % (HEADER, len(raw), hashlib.sha256(raw).hexdigest().encode()) + raw


def kernel_command(
    token: str, start: Mapping[str, Any], files: Mapping[str, str] | None = None
) -> tuple[str, tuple[str, ...], bytes]:
    """(program, arguments, first stdin bytes) of a kernel: ``token``, the package, the ``start`` line."""
    loader = (kernel_files() if files is None else files)["loader.py"]
    stdin = token.encode() + b"\n" + package_bytes(files) + json.dumps(dict(start)).encode() + b"\n"
    return "python3", ("-I", "-u", "-c", loader), stdin


def start_line_of(stdin: bytes) -> dict[str, Any] | None:
    """The start line of a kernel's first stdin bytes as ``kernel_command`` made them, or None for anything else.

    A driver that must know a kernel's language before it starts (the local driver binds that language's
    program) reads it here, so the framing is parsed in the one module that writes it.
    """
    _token, _, rest = stdin.partition(b"\n")
    header, _, rest = rest.partition(b"\n")
    fields = header.split(b" ")
    if len(fields) != 3 or fields[0] != HEADER:
        return None
    try:
        size = int(fields[1])
        start = json.loads(rest[size:].partition(b"\n")[0])
    except ValueError:
        return None
    return start if isinstance(start, dict) else None
