"""Plots from one-shot Python runs: each matplotlib figure the code shows or leaves open comes back as a PNG result.

Every Python run (no look at the code's text) is sent as ``python3 -E -s -c <wrapper> <code>`` (or with the
code on stdin when it is long). The wrapper is ``mainsdk/kernel/run.py``, in-box code like the cell kernel's (its
header says how it runs the code as ``python -c`` would and how its matplotlib backend saves the figures); core
sends its text as it sends the kernel's, and the cassettes keep it by name.
Figures are written as ``../out/.mainsdk-figures/<n>.png``; core takes that folder out of the run's files and
returns its PNGs as ``RunResult.results`` (``take_figures``). So any driver that collects the out folder gets
them, with no driver change. Code could write that folder itself: it gets no more than it could with any out
file (the same ``limits.files`` bytes, at most ``MAX_FIGURES`` PNGs, each checked to be a PNG, and the names
it chose never shown).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import attrs

from mainsdk import kernel_start
from mainsdk.driver import Collected, Command, OutFile
from mainsdk.files import FileRef
from mainsdk.kernel import figures_hook
from mainsdk.rich import INLINE_LIMIT, RichResult

MAX_FIGURES = figures_hook.MAX_FIGURES  # figures a run returns: the wrapper saves no more, core keeps no more
FOLDER = ".mainsdk-figures"  # in the out folder; reserved: what the code writes there is taken as figures
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_FIGURE_NAME = re.compile(r"([1-9][0-9]{0,5})\.png")


def wrapper() -> str:
    """The in-box wrapper's text: ``mainsdk/kernel/run.py`` and its call, with ``figures_hook.py`` as a string."""
    files = kernel_start.kernel_files()
    # A leading newline: a text whose first line is a comment compiled 0.4 ms slower (CPython 3.11, measured).
    return f"\n{files['run.py']}_mainsdk_run({files['figures_hook.py']!r}, {FOLDER!r})\n"


def python_command(code: str, *, on_stdin: bool, timeout: float, env: Mapping[str, str]) -> Command:
    """The command that runs Python ``code`` under the wrapper (the code in argv, or on stdin when long)."""
    if on_stdin:
        return Command("python3", ("-E", "-s", "-c", wrapper()), stdin=code.encode(), timeout=timeout, env=env)
    return Command("python3", ("-E", "-s", "-c", wrapper(), code), timeout=timeout, env=env)


@attrs.frozen
class Figures:
    """The figures a run drew, split from its out files: ``collected`` is what is left, the code's own files."""

    collected: Collected
    pngs: tuple[bytes, ...] = ()
    dropped: int = 0  # figures not returned: past MAX_FIGURES, not a PNG, a name the wrapper never writes


def take_figures(collected: Collected) -> Figures:
    """Split the figures folder out of a run's collected out folder, in the order they were drawn."""
    files: list[OutFile] = []
    numbered: list[tuple[int, bytes]] = []
    dropped = 0
    prefix = FOLDER + "/"
    for file in collected.files:
        if not file.name.startswith(prefix):
            files.append(file)
            continue
        match = _FIGURE_NAME.fullmatch(file.name[len(prefix) :])
        if match is None or not file.data.startswith(PNG_SIGNATURE):
            dropped += 1
            continue
        numbered.append((int(match.group(1)), file.data))
    numbered.sort(key=lambda item: item[0])
    dropped += max(0, len(numbered) - MAX_FIGURES)
    # What the driver left out of the folder (past limits.files) is a figure lost, not one of the code's files.
    skipped = tuple(entry for entry in collected.skipped if not entry[0].startswith(prefix))
    dropped += len(collected.skipped) - len(skipped)
    rest = attrs.evolve(collected, files=tuple(files), skipped=skipped)
    return Figures(rest, tuple(data for _n, data in numbered[:MAX_FIGURES]), dropped)


@attrs.frozen
class Drawn:
    """The figures a run drew, as results, and how many did not come back."""

    results: tuple[RichResult, ...] = ()
    dropped: int = 0


def keep_figures(figures: Figures, put: Callable[[str, bytes], FileRef]) -> Drawn:
    """The figures as ``image/png`` results: inline up to ``INLINE_LIMIT``, else kept with ``put`` as FileRefs.

    A figure the store cannot keep is counted, not raised: the run has finished, its result stands.
    """
    results: list[RichResult] = []
    lost = 0
    for number, data in enumerate(figures.pngs, start=1):
        if len(data) <= INLINE_LIMIT:
            results.append(RichResult("image/png", data))
            continue
        try:
            results.append(RichResult("image/png", None, put(f"figure-{number}.png", data)))
        except OSError:
            lost += 1
    return Drawn(tuple(results), figures.dropped + lost)
