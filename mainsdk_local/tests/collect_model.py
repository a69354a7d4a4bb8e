"""Random /out trees and what collecting them must give: the model the collector is checked against.

A tree is built inside a box by real code (``BUILD``, fed the tree as JSON), then collected by the real
server; ``expected`` says, from the tree alone, which files must come back in which order, and whether
the result is cut. Used by a fixed-seed slice in ``test_launcher.py`` and by ``benchmarks/fuzz_collect.py``.
"""

from __future__ import annotations

import json
import random
from typing import Any

import attrs

# The server's bounds (``launcher/boxes.py``) the trees here can reach; the others (entries, names) stay far away.
MAX_FILES = 1000
MAX_DEPTH = 32
MAX_SKIPPED = 100
SKIPPED_NAME_CHARS = 200

# Runs in the box: builds the tree in ../out from tree.json, one directory descriptor at a time (paths may
# be longer than PATH_MAX).
BUILD = r"""
import json, os
def build(fd, node):
    for name, size in node["files"].items():
        f = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=fd)
        os.write(f, content(node["paths"][name], size)); os.close(f)
    for name in node["links"]:
        os.symlink("/etc/passwd", name, dir_fd=fd)
    for name in node["fifos"]:
        os.mkfifo(name, dir_fd=fd)
    for name, sub in node["dirs"].items():
        os.mkdir(name, dir_fd=fd)
        sfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        build(sfd, sub); os.close(sfd)
def content(path, size):
    seed = path.encode() + b"|"
    return (seed * (size // len(seed) + 1))[:size]
build(os.open("../out", os.O_RDONLY | os.O_DIRECTORY), json.load(open("tree.json")))
"""


def content(path: str, size: int) -> bytes:
    """What BUILD writes into the file at ``path`` (relative to /out)."""
    seed = path.encode() + b"|"
    return (seed * (size // len(seed) + 1))[:size]


_ALPHABET = "abcXYZ019 _-.,+=~é漢\x01\t"


def _name(rng: random.Random, taken: set[str]) -> str:
    while True:
        length = rng.choice([1, 2, 3, 8, 40, 200]) if rng.random() < 0.9 else rng.randint(1, 255)
        name = "".join(rng.choice(_ALPHABET) for _ in range(length))
        if name not in (".", "..") and name not in taken and len(name.encode()) <= 255:
            taken.add(name)
            return name


def random_tree(
    rng: random.Random, prefix: str = "", depth: int = 0, budget: list[int] | None = None
) -> dict[str, Any]:
    """A random folder: files (name -> size), symlinks, FIFOs and subfolders, sometimes a chain past MAX_DEPTH."""
    budget = budget if budget is not None else [rng.choice([30, 80, 200])]
    taken: set[str] = set()
    node: dict[str, Any] = {"files": {}, "paths": {}, "links": [], "fifos": [], "dirs": {}}
    chain = depth > 0 and rng.random() < 0.15  # a long thin chain: depth is what it tests
    for _ in range(rng.randint(0, 1 if chain else 6)):
        if budget[0] <= 0:
            break
        budget[0] -= 1
        kind = rng.choices(["file", "link", "fifo", "dir"], weights=[6, 1, 1, 3])[0]
        name = _name(rng, taken)
        if kind == "file":
            node["files"][name] = rng.choice([0, 1, 10, 100, 3000])
            node["paths"][name] = prefix + name
        elif kind == "link":
            node["links"].append(name)
        elif kind == "fifo":
            node["fifos"].append(name)
        elif depth < MAX_DEPTH + 4:
            node["dirs"][name] = random_tree(rng, prefix + name + "/", depth + 1, budget)
    if depth <= 1 and rng.random() < 0.3:  # now and then a chain that goes past the depth bound
        name = _name(rng, taken)
        node["dirs"][name] = _chain(prefix + name + "/", depth + 1, MAX_DEPTH + 3)
    return node


def _chain(prefix: str, depth: int, bottom: int) -> dict[str, Any]:
    node: dict[str, Any] = {"files": {"f": 1}, "paths": {"f": prefix + "f"}, "links": [], "fifos": [], "dirs": {}}
    if depth < bottom:
        node["dirs"]["d"] = _chain(prefix + "d/", depth + 1, bottom)
    return node


@attrs.define
class Expected:
    """What collecting a tree must return."""

    files: list[tuple[str, bytes]] = attrs.field(factory=list)
    skipped: list[tuple[str, str]] = attrs.field(factory=list)
    truncated: bool = False
    full: bool = False
    total: int = 0


def expected(tree: dict[str, Any], max_bytes: int) -> Expected:
    """The files (in walk order), skipped entries and cut the collector must give for ``tree``."""
    out = Expected()
    _walk(tree, "", 0, max_bytes, out)
    return out


def _walk(node: dict[str, Any], prefix: str, depth: int, max_bytes: int, out: Expected) -> None:
    kinds = {name: "file" for name in node["files"]} | {name: "dir" for name in node["dirs"]}
    kinds |= {name: "symlink" for name in node["links"]} | {name: "fifo" for name in node["fifos"]}
    subdirs = []
    for name in sorted(kinds):
        kind = kinds[name]
        if kind == "dir":
            subdirs.append(name)
        elif kind != "file":
            rel = prefix + name
            out.skipped.append((rel if len(rel) <= SKIPPED_NAME_CHARS else rel[:SKIPPED_NAME_CHARS] + "...", kind))
        else:
            size = node["files"][name]
            if len(out.files) >= MAX_FILES:
                out.truncated = out.full = True
                return
            if out.total + size > max_bytes:  # skipped, and the walk goes on to the files that still fit
                out.truncated = True
                rel = prefix + name
                cut = rel if len(rel) <= SKIPPED_NAME_CHARS else rel[:SKIPPED_NAME_CHARS] + "..."
                out.skipped.append((cut, "larger than what is left of limits.files"))
                continue
            out.total += size
            out.files.append((prefix + name, content(prefix + name, size)))
    for name in subdirs:
        if depth + 1 > MAX_DEPTH:
            out.truncated = True
            return
        _walk(node["dirs"][name], prefix + name + "/", depth + 1, max_bytes, out)
        if out.full:
            return


def tree_json(tree: dict[str, Any]) -> bytes:
    """The tree as BUILD reads it."""
    return json.dumps(tree).encode()


def disagreement(found: Any, want: Expected) -> str | None:
    """How a ``Collected`` differs from the model, or None when it agrees."""
    got = [(f.name, f.data) for f in found.files]
    if got != want.files:
        return f"files: got {[n for n, _ in got]!r}, model {[n for n, _ in want.files]!r}"
    if found.truncated != want.truncated:
        return f"truncated: got {found.truncated}, model {want.truncated}"
    listed = want.skipped[:MAX_SKIPPED]
    if len(want.skipped) > len(listed):
        listed.append(("...", f"{len(want.skipped) - len(listed)} more skipped entries not listed"))
    if list(found.skipped) != listed:
        return f"skipped: got {list(found.skipped)!r}, model {listed!r}"
    return None
