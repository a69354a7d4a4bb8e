"""Rich results: a value or a figure in a MIME form, as cells and one-shot runs return them."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import attrs

from mainsdk.files import FileRef
from mainsdk.kernel import protocol

INLINE_LIMIT = 64 * 1024  # a rich result up to this many bytes comes inline; a larger one as a FileRef
# Forms whose data is bytes (``RichResult.data`` is ``bytes``, sent base64); every other form is text.
BINARY_MIME_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"})
# The kernel's data forms (docs/notebooks-and-agents.md): a chart's and a DataFrame's JSON, named in its protocol.
CHART_MIME = protocol.CHART_MIME
DATAFRAME_MIME = protocol.DATAFRAME_MIME
_MIME = re.compile(r"[a-z0-9][a-z0-9.+-]{0,62}/[a-z0-9][a-z0-9.+-]{0,126}")


def is_mime(mime: object) -> bool:
    """Whether ``mime`` is a well-formed, lowercase MIME type (``type/subtype``): the forms a cell may return."""
    return isinstance(mime, str) and _MIME.fullmatch(mime) is not None


def is_binary(mime: str) -> bool:
    """Whether the form ``mime`` holds bytes rather than text."""
    return mime in BINARY_MIME_TYPES or (mime.startswith(("image/", "audio/", "video/")) and "svg" not in mime)


@attrs.frozen
class RichResult:
    """One form of a value a cell produced, or a figure the code drew.

    ``data`` holds it inline (``bytes`` for the binary forms, ``image/png`` ..., ``str`` for the text forms)
    when it is at most 64 KiB; a larger one is kept in the file store and ``file`` is its ``FileRef`` (``data``
    is None). ``display``: which display output of the cell the form belongs to (its index, from 0; the forms of
    one output share it), None where nothing said; ``main``: the output is the cell's final expression's.
    """

    mime: str
    data: str | bytes | None = None
    file: FileRef | None = None
    display: int | None = None
    main: bool = False

    def bytes(self) -> bytes | None:
        """The inline data as bytes (text forms UTF-8 encoded), or None when it is a FileRef."""
        if self.data is None:
            return None
        return self.data if isinstance(self.data, bytes) else self.data.encode()


@attrs.frozen
class Display:
    """One display output of a cell (a ``display()`` call, a figure, or the final expression), all its forms."""

    index: int
    forms: tuple[RichResult, ...]
    main: bool = False

    def get(self, mime: str) -> RichResult | None:
        """The form ``mime`` of this output, or None."""
        return next((form for form in self.forms if form.mime == mime), None)

    @property
    def mimes(self) -> tuple[str, ...]:
        """The MIME types this output came in."""
        return tuple(form.mime for form in self.forms)

    @property
    def text(self) -> str | None:
        """Its ``text/plain`` form, when inline."""
        form = self.get("text/plain")
        return form.data if form is not None and isinstance(form.data, str) else None

    @property
    def chart(self) -> Any:
        """A figure's chart form, parsed (``{"type": "bar", "title": ..., "elements": [...]}``), or None.

        The shape of E2B's ``result.chart`` (``docs/notebooks-and-agents.md``). None too when the form is not
        JSON Python can parse (nested deeper than its parser goes, about 1,000 levels)."""
        return self._json(CHART_MIME)

    @property
    def data(self) -> Any:
        """A DataFrame's data form, parsed (``{"columns": [...], "index": [...], "data": {column: values}}``), or
        None. As E2B's ``result.data``, by column."""
        return self._json(DATAFRAME_MIME)

    def _json(self, mime: str) -> Any:
        form = self.get(mime)
        if form is None or not isinstance(form.data, str):
            return None  # absent, or kept as a file (over INLINE_LIMIT): read it with sandbox.files.read
        try:
            return json.loads(form.data)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth: no form to read
            return None


def group_displays(results: tuple[RichResult, ...]) -> tuple[Display, ...]:
    """The results as display outputs, in order: the forms with one ``display`` index together.

    A form with no index (a one-shot run's figure) is an output of its own.
    """
    groups: list[list[RichResult]] = []
    where: dict[int, int] = {}
    for result in results:
        if result.display is None:
            groups.append([result])
        elif result.display in where:
            groups[where[result.display]].append(result)
        else:
            where[result.display] = len(groups)
            groups.append([result])
    return tuple(Display(i, tuple(forms), any(f.main for f in forms)) for i, forms in enumerate(groups))


def rich_entry(result: RichResult) -> dict[str, Any]:
    """A rich result as JSON (an agent's or ``--json``'s): text inline, an image as base64, a large one as a file id."""
    if result.file is not None:
        return {"mime": result.mime, "file": {"id": result.file.id, "name": result.file.name, "size": result.file.size}}
    if isinstance(result.data, bytes):
        return {"mime": result.mime, "base64": base64.b64encode(result.data).decode("ascii")}
    return {"mime": result.mime, "text": result.data}
