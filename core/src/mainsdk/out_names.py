"""The names of a run's out files: chosen by the code in the box, so checked as hostile before the host writes one.

A name is a plain relative path: no absolute path, no ``..``, ``.`` or empty part, no NUL. Whoever writes
out files on the host checks it first: a driver (``mainsdk_driverkit.hostbox.write_under``, through
``mainsdk.driver``) and the command line's ``--out`` (``mainsdk_cli.out_dir``). Standard library only, so
that ``mainsdk.driver`` can re-export it without an import circle (``files`` imports ``arguments``, which
imports ``driver``).
"""

from __future__ import annotations


class UnsafeName(ValueError):
    """An out file's name that cannot be written under a folder; the message says why."""


def check_name(name: str) -> list[str]:
    """The parts of ``name`` if it is a plain relative path; ``UnsafeName`` otherwise."""
    if not name or "\0" in name:
        raise UnsafeName("an empty name or one with a NUL byte")
    if name.startswith("/"):
        raise UnsafeName("an absolute path")
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise UnsafeName("a path with an empty, '.' or '..' part")
    return parts
