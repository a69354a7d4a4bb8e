"""Wheels for a remote box's Python, fetched by the app's own pip and kept on the app's side by content.

A driver whose boxes must not reach a package index (E2B, Vercel: their network is what the run was
given, often nothing) installs ``sandbox.packages.python`` offline. It probes the box's interpreter once
(version, ABI, machine, glibc: the driver's own ``BoxInterpreter``), and the app's pip downloads binary
wheels of the pinned set and its dependencies for exactly that interpreter (``pip download
--only-binary=:all:`` with the interpreter's ``--python-version``, ``--abi`` and ``--platform`` options),
with the app's network and index configuration, into ``$XDG_CACHE_HOME/mainsdk/wheels/<sha256>``. A set
is built once, under a file lock, in a temporary folder renamed into place when complete, and reused by
every later box of the same interpreter and pins. The driver uploads the wheels with the box's files and
installs them there with ``--no-index``: nothing in the box asks an index.

pip runs as every tool the host runs for a box does (``mainsdk_driverkit.host_tools``): ``python -I`` in a fresh
private folder, reading no configuration file and only the index settings of ``INDEX_VARIABLES`` from
the app's environment, so nothing a box wrote into the app's folder is read or run.

No provider SDK here: the probe and the install command are each driver's own.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import attrs
from attrs import AttrsInstance
from mainsdk.driver import DRIVER_UNAVAILABLE, INVALID_OPTION, SandboxError, canonical_name, long_wait, parse_pin

from mainsdk_driverkit.host_tools import private_folder, tool_environment

FORMAT = 1  # bumped when the layout of a wheelhouse folder changes
MANIFEST = "mainsdk-wheels.json"
DOWNLOAD_TIMEOUT = 900.0  # seconds: pandas and matplotlib are 40-55 MB of wheels
OLDEST_GLIBC_MINOR = 5  # manylinux1 is glibc 2.5: nothing older is on PyPI
_MESSAGE_CHARS = 1500


class BoxInterpreter(AttrsInstance, Protocol):
    """A box's Python as pip picks wheels for it (an attrs class: its fields are part of the set's key)."""

    def pip_target(self) -> list[str]:
        """``pip download`` options selecting wheels for this interpreter and platform."""
        ...

    def describe(self) -> str:
        """Which box's Python this is, for messages: ``the E2B box's python 3.11 (cp311, ...)``."""
        ...


@attrs.frozen
class WheelSet:
    """A downloaded set: its key, its folder on the app's side, the wheels' file names and the pins asked."""

    key: str
    folder: Path
    names: tuple[str, ...]
    pins: tuple[str, ...]

    @property
    def paths(self) -> list[Path]:
        """Each wheel's path, in ``names`` order."""
        return [self.folder / name for name in self.names]

    def read(self) -> dict[str, bytes]:
        """Each wheel's bytes, by file name."""
        return {name: (self.folder / name).read_bytes() for name in self.names}


def manylinux_platforms(glibc_minor: int, machine: str, oldest: int = OLDEST_GLIBC_MINOR) -> tuple[str, ...]:
    """Every manylinux tag a glibc 2.``glibc_minor`` box on ``machine`` runs, newest first, with the legacy aliases.

    ``oldest`` is the oldest glibc minor to name (PEP 600 tags down to it; PEP 599, 571 and 513 aliases).
    """
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags: list[str] = []
    for minor in range(glibc_minor, oldest - 1, -1):
        tags.append(f"manylinux_2_{minor}_{machine}")
        # manylinux2010 and manylinux1 were defined for x86 only (PEP 571, PEP 513); manylinux2014 for more.
        if minor == 17 or (minor in legacy and machine in ("x86_64", "i686")):
            tags.append(f"{legacy[minor]}_{machine}")
    return tuple(tags)


def wheels_root() -> str:
    """``$XDG_CACHE_HOME/mainsdk/wheels``, else ``~/.cache/mainsdk/wheels``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mainsdk", "wheels")


def wheels_key(python: BoxInterpreter, pins: Sequence[str]) -> str:
    """The sha256 naming a set: the box's interpreter (every field) and the sorted, normalised pins."""
    identity = {"format": FORMAT, "python": attrs.asdict(python), "packages": sorted(str(parse_pin(p)) for p in pins)}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


class Wheelhouse:
    """Wheel sets downloaded on demand and kept by key; one per driver, safe across threads and processes."""

    def __init__(self, root: str | None = None) -> None:
        self._root = root
        self._lock = threading.Lock()  # flock is per open file: threads of one process take this first
        self.downloads = 0  # sets this wheelhouse downloaded (a cached set downloads nothing)

    @property
    def root(self) -> str:
        """Where the sets are kept (read each time, so a test or an app may set XDG_CACHE_HOME late)."""
        return self._root or wheels_root()

    def ensure(self, python: BoxInterpreter, pins: Sequence[str]) -> WheelSet:
        """The wheels of ``pins`` (dependencies included) for ``python``, downloaded first unless cached.

        Raises ``MAIN-SANDBOX-0001`` naming the package and quoting pip when the set cannot be resolved
        for that interpreter, and ``MAIN-SANDBOX-0006`` (retryable) when pip cannot start or takes too long.
        """
        key = wheels_key(python, pins)
        final = Path(self.root) / key
        if not (final / MANIFEST).is_file():
            final.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with self._lock, open(f"{final}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # another process fetching the same set: wait for it, then reuse
                if not (final / MANIFEST).is_file():
                    why = f"the first use of this set downloads its wheels with pip into {self.root} (once: cached)"
                    with long_wait(f"fetching the python package set {', '.join(pins)} for the box", why):
                        self._download(python, pins, final)
        names = tuple(sorted(n for n in os.listdir(final) if n.endswith(".whl")))
        return WheelSet(key, final, names, tuple(pins))

    def _download(self, python: BoxInterpreter, pins: Sequence[str], final: Path) -> None:
        temp = Path(tempfile.mkdtemp(prefix=".download-", dir=final.parent))
        try:
            started = time.monotonic()
            requirements = [str(parse_pin(pin)) for pin in pins]
            command = [
                sys.executable, "-I", "-m", "pip", "download", "--only-binary=:all:", "--dest", str(temp),
                "--disable-pip-version-check", "--no-input", "--progress-bar", "off", *python.pip_target(),
                "--", *requirements,
            ]  # fmt: skip
            _run_pip(command, pins, python)
            wheels = sorted(p for p in temp.iterdir() if p.name.endswith(".whl"))
            manifest = {
                "python": attrs.asdict(python),
                "packages": sorted(requirements),
                # What pip resolved, dependencies included: frozen with the set for as long as it is cached.
                "wheels": [{"name": w.name, "sha256": _sha256(w), "size": w.stat().st_size} for w in wheels],
                "seconds": round(time.monotonic() - started, 3),
            }
            (temp / MANIFEST).write_text(json.dumps(manifest, indent=2))
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(final)  # a folder left without a manifest: an interrupted download, never used
            temp.rename(final)
            self.downloads += 1
        finally:
            shutil.rmtree(temp, ignore_errors=True)


def failure_message(pins: Sequence[str], output: str, where: str) -> str:
    """One message naming the package pip names (else the whole set), where it failed, and pip's own words."""
    errors = [line.strip() for line in output.splitlines() if line.strip().startswith("ERROR")]
    text = " ".join(errors or [line.strip() for line in output.splitlines() if line.strip()][-5:])
    said = canonical_name(text)
    named = [pin for pin in pins if _names(pin, said)]
    culprit = ", ".join(named) if named else ", ".join(pins)
    if len(text) > _MESSAGE_CHARS:
        text = text[:_MESSAGE_CHARS] + " ..."
    return (
        f"packages: cannot install {culprit} from sandbox.packages.python {where}; pip said: "
        f"{text or '(nothing)'} -- fix or remove the pin in main.yaml (a package with no wheel for the box's "
        "platform cannot be installed offline); nothing ran"
    )


def kernel_failure(error: SandboxError | str, where: str) -> SandboxError:
    """The 0001 of the cell kernel's own set (``mainsdk.driver.KERNEL_PACKAGES``) failing ``where``: no pin of the
    user's, so nothing in main.yaml to fix. ``error``: ``ensure``'s 0001, or pip's output in the box."""
    said = error.message.partition("pip said: ")[2].rpartition(" -- fix")[0] if isinstance(error, SandboxError) else ""
    if not isinstance(error, SandboxError):
        lines = [line.strip() for line in error.splitlines() if line.strip()]
        said = " ".join([line for line in lines if line.startswith("ERROR")] or lines[-5:])
    if len(said) > _MESSAGE_CHARS:
        said = said[:_MESSAGE_CHARS] + " ..."
    return SandboxError(
        INVALID_OPTION,
        f"cells: the kernel's own packages (IPython and its dependencies, mainsdk.driver.KERNEL_PACKAGES) could not "
        f"be installed {where}; pip said: {said or '(nothing)'} -- the box's python must take CPython wheels of "
        "them (3.11 or later, glibc): choose an image or template that has one; nothing ran",
        ran=False,
    )


def _names(pin: str, said: str) -> bool:
    """Whether the canonical text ``said`` names ``pin``'s package as a whole word (six, not six-extras)."""
    return re.search(rf"(?<![a-z0-9-]){re.escape(parse_pin(pin).key)}(?![a-z0-9]|-[a-z])", said) is not None


def _run_pip(command: list[str], pins: Sequence[str], python: BoxInterpreter) -> None:
    env = tool_environment()
    try:
        with private_folder() as cwd:  # never the app's folder, where box output lands
            done = subprocess.run(
                command, capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL,
                timeout=DOWNLOAD_TIMEOUT, check=False, cwd=cwd, env=env,
            )  # fmt: skip
    except OSError as exc:
        raise SandboxError(
            DRIVER_UNAVAILABLE, f"packages: the app's pip did not start ({exc.strerror})", ran=False
        ) from None
    except subprocess.TimeoutExpired:
        raise SandboxError(
            DRIVER_UNAVAILABLE,
            f"packages: downloading {', '.join(pins)} took more than {DOWNLOAD_TIMEOUT:.0f}s and was stopped; "
            "check the package index is reachable from the app, then retry",
            ran=False,
        ) from None
    if done.returncode == 0:
        return
    if "No module named pip" in done.stderr:
        raise SandboxError(
            DRIVER_UNAVAILABLE,
            f"packages: the app's Python ({sys.executable}) has no pip, which downloads the box's wheels; the E2B "
            "and Vercel drivers depend on it: install pip into that environment (uv pip install pip)",
            ran=False,
        )
    where = f"as wheels for {python.describe()}"
    raise SandboxError(INVALID_OPTION, failure_message(pins, done.stdout + done.stderr, where), ran=False)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
