"""The Python executor: runs the cells in its main thread, and between cells waits in ``read(R)``."""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from . import plain, shell
from .cell import Cell, Results, error_of, one_write_print
from .loader import prctl
from .protocol import PROBE

PR_SET_PDEATHSIG = 1


Runner = Callable[[str, int], "dict[str, str] | None"]  # runs one cell's code: its error, or None


def main(req_fd: int, res_fd: int, start_line: str) -> NoReturn:
    """Run cells from ``req_fd`` until the supervisor is gone; each result a JSON line on ``res_fd``."""
    start = json.loads(start_line)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the supervisor gone, nothing would ever end this cell
    sys.argv[:] = [""]
    site = list(start.get("site") or [])  # the supervisor checked it: folders
    # The kernel's own packages come after the user's site-packages: a user who pins one of them gets theirs.
    sys.path.extend(site)
    os.set_inheritable(req_fd, False)
    os.set_inheritable(res_fd, False)
    builtins.print = one_write_print(builtins.print)  # a print's line in one write, as a reader wants it
    cell = Cell(res_fd)
    pip = shell.Pip(site)
    ipython = shell.ipython_shell(cell, pip)  # imported before the folder joins sys.path: nothing planted there runs
    run: Runner
    if ipython is not None:
        sys.meta_path.insert(0, shell.InlineBackend())
        run = shell.ipython_runner(ipython)
    else:
        run = plain.plain_runner(cell)
    sys.path.insert(0, "")  # a notebook imports from its folder (``-I`` left it out while the kernel imported)
    running = [False]

    def interrupt(signum: int, frame: object) -> None:
        # Only a running cell is interrupted: a SIGINT that lands after it ended must not break the kernel.
        if running[0]:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    pending: list[bytes] = []

    def next_request() -> dict[str, Any]:
        # The main thread waits here, in read(req_fd), between cells: what the supervisor watches for.
        while True:
            joined = b"".join(pending)
            if b"\n" in joined:
                line, _, rest = joined.partition(b"\n")
                pending[:] = [rest] if rest else []
                request: dict[str, Any] = json.loads(line)
                return request
            pending[:] = [joined]
            data = os.read(req_fd, 1 << 16)
            if not data:
                os._exit(0)
            pending.append(data.replace(PROBE, b""))  # the supervisor's probes: "this thread waits here"

    cell.write(b'{"ready": true}\n')
    while True:
        request = next_request()
        number = request["cell"]
        results = Results(int(request.get("max_results", 1 << 20)))
        cell.number, cell.results = number, results
        pip.index = request.get("pip_index") is True
        given = request.get("env")
        env: dict[str, Any] = given if isinstance(given, dict) else {}
        saved = {name: os.environ.get(name) for name in env}
        error: dict[str, str] | None = None
        try:
            os.environ.update({str(k): str(v) for k, v in env.items()})  # this cell's own, over the session's
            running[0] = True
            error = run(request["code"], number)
        except BaseException as exc:  # noqa: BLE001 - an interrupt that landed in the kernel's own code, between the cell's
            error = error_of(exc, 0)
        finally:
            running[0] = False
            for name, value in saved.items():
                with contextlib.suppress(Exception):
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
        cell.number, cell.results = None, None
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        frame: dict[str, Any] = {
            "cell": number,
            "results": results.items,
            "results_dropped": results.dropped,
            "error": error,
        }
        try:
            data = json.dumps(frame).encode() + b"\n"
        except (TypeError, ValueError):  # a result item the cell's own code made unserialisable
            bare = {"cell": number, "results": [], "results_dropped": len(results.items), "error": error}
            data = json.dumps(bare).encode() + b"\n"
        cell.write(data)
