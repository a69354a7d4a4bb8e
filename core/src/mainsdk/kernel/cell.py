"""The running cell as the Python executor's display hooks see it: its results, sent live as each output comes."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from .protocol import TEXT_LIMIT

# MIME types whose data is bytes (sent base64); every other form is text. IPython's formatters give these as bytes.
BINARY_MIMES = ("image/png", "image/jpeg", "application/pdf")


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` on ``fd``."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Results:
    """The rich results of one cell, bounded in bytes (what does not fit is counted, not sent).

    Each display output is a bundle of forms (one MIME type each); every item says which output it belongs to
    (``display``, its index in the cell) and whether that output is the final expression's (``main``).
    """

    def __init__(self, max_bytes: int) -> None:
        self.items: list[dict[str, Any]] = []
        self.dropped = 0
        self.displays = 0
        self._room = max_bytes

    def add(self, mime: str, data: object, index: int | None = None, main: bool = False) -> dict[str, Any] | None:
        """One form as a result item (None when it does not fit or cannot be encoded)."""
        if isinstance(data, (bytes, bytearray, memoryview)):
            text, encoding = base64.b64encode(bytes(data)).decode("ascii"), "base64"
        elif mime in BINARY_MIMES and isinstance(data, str):
            try:  # IPython gives a binary form as base64 text when the object did
                raw = base64.b64decode(data.encode("ascii"), validate=False)
            except (ValueError, UnicodeEncodeError):
                self.dropped += 1
                return None
            text, encoding = base64.b64encode(raw).decode("ascii"), "base64"
        elif not isinstance(data, str):
            try:
                text, encoding = json.dumps(data, default=repr), "utf-8"
            except (TypeError, ValueError):
                self.dropped += 1
                return None
        else:
            text, encoding = data, "utf-8"
        if len(text) > self._room:
            self.dropped += 1
            return None
        self._room -= len(text)
        item: dict[str, Any] = {"mime": mime, "data": text, "encoding": encoding}
        if index is not None:
            item["display"] = index
            item["main"] = main
        self.items.append(item)
        return item

    def add_bundle(self, bundle: dict[str, Any], main: bool = False) -> list[dict[str, Any]]:
        """One display output, all its forms (``text/plain`` last), as result items; the items sent."""
        index = self.displays
        self.displays += 1
        sent: list[dict[str, Any]] = []
        forms = [(m, d) for m, d in bundle.items() if isinstance(m, str) and m != "text/plain"]
        if "text/plain" in bundle:
            forms.append(("text/plain", bundle["text/plain"]))
        for mime, data in forms:
            if data is None:
                continue
            item = self.add(mime, data, index, main)
            if item is not None:
                sent.append(item)
        return sent


class Cell:
    """The running cell, as the executor's display hooks see it: its results, sent live as each output comes."""

    def __init__(self, res_fd: int) -> None:
        self.res_fd = res_fd
        self.number: int | None = None
        self.results: Results | None = None
        self.lock: threading.Lock | None = (
            None  # made once threads exist (a thread may display while the main thread writes)
        )

    def show(self, bundle: object, main: bool = False) -> None:
        """One display output: kept for the cell's result and sent to the supervisor at once (``on_result``)."""
        results, number = self.results, self.number
        if results is None or not isinstance(bundle, dict):
            return  # between cells (a thread's display): nobody's result
        items = results.add_bundle(bundle, main)
        if not items:
            return
        for stream in (sys.stdout, sys.stderr):  # the output before it reaches the app before it
            with contextlib.suppress(Exception):
                stream.flush()
        line = json.dumps({"cell": number, "display": items[0]["display"], "results": items}).encode() + b"\n"
        self.write(line)

    def write(self, data: bytes) -> None:
        """One line on the result pipe, whole (a thread may display while the main thread writes)."""
        if self.lock is None:
            self.lock = threading.Lock()
        with self.lock:
            write_all(self.res_fd, data)


def error_of(exc: BaseException, skip: int) -> dict[str, str]:
    """A cell's error as the frame carries it, without the kernel's own first ``skip`` frames."""
    tb = exc.__traceback__
    for _ in range(skip):  # the kernel's own frames are not the cell's
        if tb is not None:
            tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    return {"name": type(exc).__name__, "value": str_of(exc)[:TEXT_LIMIT], "traceback": text[-TEXT_LIMIT:]}


def str_of(exc: BaseException) -> str:
    """``str(exc)``, which the cell's own exception class may break."""
    with contextlib.suppress(Exception):
        return str(exc)
    return "<str failed>"


def one_write_print(original: Callable[..., None]) -> Callable[..., None]:
    """``print`` that writes its whole text at once to the executor's stdout or stderr.

    The executor runs unbuffered (``-u``: output streams live), where ``print("a", "b")`` made four writes, so a
    reader could see the line in pieces. Onto another stream (a file, a cell's own object) it is the original.
    """

    def print_(
        *objects: object, sep: str | None = " ", end: str | None = "\n", file: Any = None, flush: bool = False
    ) -> None:
        stream = sys.stdout if file is None else file
        plain = isinstance(sep, str | None) and isinstance(end, str | None)
        if stream is None or not plain or (stream is not sys.stdout and stream is not sys.stderr):
            original(*objects, sep=sep, end=end, file=file, flush=flush)
            return
        stream.write((" " if sep is None else sep).join(map(str, objects)) + ("\n" if end is None else end))
        if flush:
            stream.flush()

    print_.__name__ = print_.__qualname__ = "print"
    print_.__doc__, print_.__module__ = original.__doc__, "builtins"
    return print_
