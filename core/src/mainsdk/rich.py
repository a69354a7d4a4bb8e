"""Rich results: a value or a figure in a MIME form, as cells and one-shot runs return them."""

from __future__ import annotations

import base64
from typing import Any

import attrs

from mainsdk.files import FileRef

INLINE_LIMIT = 64 * 1024  # a rich result up to this many bytes comes inline; a larger one as a FileRef
MIME_TYPES = ("image/png", "image/svg+xml", "text/html", "application/json", "text/plain")


@attrs.frozen
class RichResult:
    """One form of a value a cell produced, or a figure the code drew.

    ``data`` holds it inline (``bytes`` for ``image/png``, ``str`` for the text forms) when it is at most
    64 KiB; a larger one is kept in the file store and ``file`` is its ``FileRef`` (``data`` is None).
    """

    mime: str
    data: str | bytes | None = None
    file: FileRef | None = None

    def bytes(self) -> bytes | None:
        """The inline data as bytes (text forms UTF-8 encoded), or None when it is a FileRef."""
        if self.data is None:
            return None
        return self.data if isinstance(self.data, bytes) else self.data.encode()


def rich_entry(result: RichResult) -> dict[str, Any]:
    """A rich result as JSON (an agent's or ``--json``'s): text inline, an image as base64, a large one as a file id."""
    if result.file is not None:
        return {"mime": result.mime, "file": {"id": result.file.id, "name": result.file.name, "size": result.file.size}}
    if isinstance(result.data, bytes):
        return {"mime": result.mime, "base64": base64.b64encode(result.data).decode("ascii")}
    return {"mime": result.mime, "text": result.data}
