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
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import attrs
from attrs import AttrsInstance
from mainsdk.driver import DRIVER_UNAVAILABLE, INVALID_OPTION, SandboxError, canonical_name, parse_pin

from mainsdk_driverkit.host_tools import private_folder, tool_environment
from mainsdk_driverkit.waits import long_wait

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


def wheels_key(python: BoxInterpreter, pins: Sequence[str], source: str = "index") -> str:
    """The sha256 naming a set: the box's interpreter (every field), the sorted, normalised pins, and where the
    wheels come from (``index``: the app's; else the digest of the find-links folder's wheels, ``find_links_key``)."""
    identity = {"format": FORMAT, "python": attrs.asdict(python), "packages": sorted(str(parse_pin(p)) for p in pins)}
    if source != "index":
        identity["source"] = source
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def find_links_key(folder: Path) -> str:
    """The digest of the wheels in ``folder`` (names and bytes): a set made from them is kept by their content."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.whl")):
        digest.update(path.name.encode() + b"\0" + _sha256(path).encode() + b"\0")
    return "find-links:" + digest.hexdigest()


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

    def ensure(self, python: BoxInterpreter, pins: Sequence[str], *, find_links: Path | None = None) -> WheelSet:
        """The wheels of ``pins`` (dependencies included) for ``python``, downloaded first unless cached.

        ``find_links``: take them from the wheels in that folder only (``--no-index``: the cell kernel's set,
        made from the app's installed distributions, ``mainsdk_driverkit.installed``), never from an index.
        Raises ``MAIN-SANDBOX-0001`` naming the package and quoting pip when the set cannot be resolved for
        that interpreter (or does not exist on the index), and ``MAIN-SANDBOX-0006`` (retryable) when pip cannot
        start, takes too long, or the index fails (an outage: it names the index).
        """
        key = wheels_key(python, pins, "index" if find_links is None else find_links_key(find_links))
        final = Path(self.root) / key
        if not (final / MANIFEST).is_file():
            final.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with self._lock, open(f"{final}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # another process fetching the same set: wait for it, then reuse
                if not (final / MANIFEST).is_file():
                    why = f"the first use of this set downloads its wheels with pip into {self.root} (once: cached)"
                    with long_wait(f"fetching the python package set {', '.join(pins)} for the box", why):
                        self._download(python, pins, final, find_links)
        names = tuple(sorted(n for n in os.listdir(final) if n.endswith(".whl")))
        return WheelSet(key, final, names, tuple(pins))

    def _download(self, python: BoxInterpreter, pins: Sequence[str], final: Path, find_links: Path | None) -> None:
        temp = Path(tempfile.mkdtemp(prefix=".download-", dir=final.parent))
        try:
            started = time.monotonic()
            requirements = [str(parse_pin(pin)) for pin in pins]
            offline = [] if find_links is None else ["--no-index", "--find-links", str(find_links)]
            command = [
                sys.executable, "-I", "-m", "pip", "download", "--only-binary=:all:", "--dest", str(temp),
                "--disable-pip-version-check", "--no-input", "--progress-bar", "off", *offline,
                *python.pip_target(), "--", *requirements,
            ]  # fmt: skip
            _run_pip(command, pins, python, offline=find_links is not None)
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


# What pip prints when the index itself failed (refused, reset, timed out, answered 5xx), never for a package
# the index does not have (a 404 for its page: "No matching distribution"): an outage, worth a retry.
_OUTAGE = re.compile(
    r"Retrying \(Retry\(|NewConnectionError|ConnectTimeoutError|ReadTimeoutError|Connection refused|"
    r"Connection reset|Max retries exceeded|Could not fetch URL .*: (?:connection|There was a problem)|"
    r"\b5\d\d (?:Server Error|Service Unavailable|Bad Gateway)|HTTP error 5\d\d"
)


def index_named(environ: Mapping[str, str] | None = None) -> str:
    """The index the app's pip asks (``PIP_INDEX_URL`` without its credentials, else PyPI), for messages."""
    url = (os.environ if environ is None else environ).get("PIP_INDEX_URL") or "https://pypi.org/simple"
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or url
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _index_fails(env: Mapping[str, str], output: str) -> bool:
    """Whether the index fails for a package pip found no version of: pip says nothing of a 5xx page below
    ``-vv``, and "No matching distribution" is what a 404 (no such package) gives too, so its page is asked once
    more here. An answer other than 5xx (a 404, a 401) is the package's problem: False."""
    names = re.findall(r"No matching distribution found for ([A-Za-z0-9._-]+)", output)
    if not names or env.get("PIP_NO_INDEX", "").lower() in ("1", "true", "yes", "on"):
        return False  # no index was asked (find-links only): nothing of an index's to fail
    base = env.get("PIP_INDEX_URL") or "https://pypi.org/simple"
    url = base.rstrip("/") + "/" + canonical_name(names[0]) + "/"
    context = ssl.create_default_context(cafile=env.get("PIP_CERT") or None)
    try:
        with urllib.request.urlopen(url, timeout=15, context=context) as answer:
            answer.read(1)
    except urllib.error.HTTPError as exc:
        return exc.code >= 500
    except (urllib.error.URLError, OSError):
        return True  # refused, reset, timed out, no such host
    except ValueError:
        return False  # a URL urllib cannot ask (credentials in it): pip's own answer stands
    return False


def _run_pip(command: list[str], pins: Sequence[str], python: BoxInterpreter, *, offline: bool = False) -> None:
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
    output = done.stdout + done.stderr
    if not offline and (_OUTAGE.search(output) or _index_fails(env, output)):
        said = " ".join(line.strip() for line in output.splitlines() if line.strip().startswith(("ERROR", "WARNING")))
        raise SandboxError(
            DRIVER_UNAVAILABLE,
            f"packages: the package index {index_named(env)} did not answer the app's pip while it fetched "
            f"{', '.join(pins)} (an outage, not a missing package); retry later, or point PIP_INDEX_URL at a "
            f"mirror; pip said: {said[:_MESSAGE_CHARS]}",
            ran=False,
            retryable=True,
        )
    where = f"as wheels for {python.describe()}"
    raise SandboxError(INVALID_OPTION, failure_message(pins, output, where), ran=False)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
