"""The kernel's loader: the one text on a kernel process's command line (``python3 -I -u -c <this>``).

It holds no kernel code. The supervisor's run reads, on stdin (which only the app writes), the token line, then
``HEADER <size> <sha256>\\n`` and that many bytes: the package, a JSON object of file name to text (the
``.py`` modules, ``node_executor.js``, ``bash_executor.sh``). It checks the size and the SHA-256, serves the
modules from memory as the package ``mainsdk_kernel`` (a finder first on ``sys.meta_path``: no file in the box
is ever imported as a kernel module) and runs ``supervisor.main``. The Python executor's run (``executor <sha256>
<fd> ...``) reads the same bytes from a sealed in-memory file the supervisor wrote, checks them against the
SHA-256 the supervisor put in its arguments, and runs ``executor.main``. Anything that does not check out ends
the process with ``UNSUPPORTED_EXIT`` and a message on stderr. The app imports this module only for its constants.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Sequence
from typing import NoReturn

PR_SET_DUMPABLE = 4
PACKAGE = "mainsdk_kernel"  # the kernel package's name in the box (served from memory, never a file there)
HEADER = b"mainsdk-kernel"  # the package's header line: HEADER, its size in bytes, its SHA-256 (hex)
UNSUPPORTED_EXIT = 125  # the kernel's exit status when it cannot run in this box (protocol.py re-exports it)
LINE_LIMIT = 4096  # the token and header lines are far shorter


def prctl(option: int, value: int) -> bool:
    """``prctl(option, value)`` through ctypes; False when the platform gives no way to call it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (ImportError, OSError, AttributeError):
        return False


def fail(why: str) -> NoReturn:
    """End this process: the kernel cannot start (``why`` on stderr)."""
    os.write(2, f"mainsdk cell kernel: {why}; cells cannot run in this box\n".encode())
    os._exit(UNSUPPORTED_EXIT)


class Reader:
    """Lines and exact byte counts from a descriptor, with what was read past them kept (``rest``)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.rest = bytearray()

    def _more(self) -> None:
        data = os.read(self.fd, 1 << 16)
        if not data:
            os._exit(0)  # the app closed the channel before the kernel started: nothing to run
        self.rest += data

    def line(self) -> bytes:
        """The next line, without its newline."""
        while b"\n" not in self.rest:
            if len(self.rest) > LINE_LIMIT:
                fail("a kernel start line is too long")
            self._more()
        line, _, rest = bytes(self.rest).partition(b"\n")
        self.rest = bytearray(rest)
        return line

    def exact(self, size: int) -> bytes:
        """The next ``size`` bytes."""
        while len(self.rest) < size:
            self._more()
        data = bytes(self.rest[:size])
        del self.rest[:size]
        return data


def unpack(raw: bytes, digest: str) -> dict[str, str]:
    """The package's files, once ``raw`` has the SHA-256 ``digest``."""
    import hashlib
    import json

    if hashlib.sha256(raw).hexdigest() != digest:
        fail("the kernel package does not match its SHA-256")
    files: object = json.loads(raw)
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        fail("the kernel package is not a JSON object of file texts")
    return {str(name): str(text) for name, text in files.items()}


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the package's modules from memory: ``mainsdk_kernel`` and ``mainsdk_kernel.<module>``."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def _file(self, name: str) -> str | None:
        if name == PACKAGE:
            return "__init__.py"
        module = name.removeprefix(PACKAGE + ".")
        if module == name or "." in module or f"{module}.py" not in self.files:
            return None
        return f"{module}.py"

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        """The spec of one of the package's modules, else None (the other finders look)."""
        file = self._file(fullname)
        if file is None:
            return None
        return importlib.util.spec_from_loader(
            fullname, self, origin=f"{PACKAGE}/{file}", is_package=fullname == PACKAGE
        )

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        """The default module object."""
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        """Run the module's text in it: the kernel's own code, as the app sent it."""
        file = self._file(module.__name__)
        assert file is not None
        code = compile(self.files[file], f"{PACKAGE}/{file}", "exec")  # mainsdk: allow MAIN-SANDBOX-0010
        exec(code, module.__dict__)  # mainsdk: allow MAIN-SANDBOX-0010

    def get_source(self, name: str) -> str | None:
        """The module's text (tracebacks show the kernel's lines)."""
        file = self._file(name)
        return None if file is None else self.files[file]


def install(files: dict[str, str]) -> None:
    """Make the package importable, ahead of every other finder."""
    sys.meta_path.insert(0, Finder(files))


def main() -> None:
    """Read the package, check it, and run the supervisor or (``executor ...``) the Python executor."""
    import importlib

    args = sys.argv[1:]
    if args[:1] == ["executor"]:
        digest, fd = args[1], int(args[2])
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        os.close(fd)
        install(unpack(b"".join(chunks), digest))
        executor = importlib.import_module(PACKAGE + ".executor")
        executor.main(int(args[3]), int(args[4]), args[5])
        return
    # The supervisor: undumpable before it reads the token (same-uid code cannot read its memory or descriptors).
    guarded = prctl(PR_SET_DUMPABLE, 0)
    stdin = Reader(0)
    token = stdin.line()  # on stdin, never in argv (/proc/<pid>/cmdline is readable)
    fields = stdin.line().split()
    if len(fields) != 3 or fields[0] != HEADER or not fields[1].isdigit():
        fail("the kernel package's header line is not 'mainsdk-kernel <size> <sha256>'")
    raw = stdin.exact(int(fields[1]))
    digest = fields[2].decode("ascii", "replace")
    files = unpack(raw, digest)
    install(files)
    supervisor = importlib.import_module(PACKAGE + ".supervisor")
    supervisor.main(token, bytes(stdin.rest), files, raw, digest, guarded)


if __name__ == "__main__":
    main()
