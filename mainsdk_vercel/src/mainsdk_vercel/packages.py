"""Python packages for a Vercel sandbox, without widening its network: wheels fetched on the app side.

The sandbox's network stays what the run was given (often nothing). Instead:

1. The box's Python is asked once per driver and image (``PROBE``: version, ABI, machine, glibc).
2. ``pip download --only-binary=:all:`` fetches the pinned set and its dependencies, for that platform and
   Python, with the app's own network and index, into a content-addressed wheelhouse on the app's side
   (``$XDG_CACHE_HOME/mainsdk/wheels/<sha256>``), reused by every later box of the same set.
3. The wheels go up in the one ``fs/write`` the box's files already use, and ``pip install --no-index
   --find-links`` installs them offline in the box (``INSTALL``), once per box: a session's later commands
   and cells find them installed.

A set pip cannot resolve is one MAIN-SANDBOX-0001 naming the package and quoting pip, before any code runs.
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
from collections.abc import Mapping, Sequence

import attrs
from mainsdk.errors import DRIVER_UNAVAILABLE, INVALID_OPTION, SandboxError
from mainsdk.packages import canonical_name, parse_pin

FORMAT = 1  # bumped when the layout of a wheelhouse folder changes
MANIFEST = "mainsdk-wheels.json"
DOWNLOAD_TIMEOUT = 900.0  # seconds; pandas and matplotlib are about 40 MB of wheels
_MESSAGE_CHARS = 1500
OLDEST_GLIBC_MINOR = 17  # manylinux2014, the oldest tag wheels of current packages carry

# Run in the box as ``python3 -I -c PROBE``: what pip needs to pick wheels for it (PEP 425 tags' parts).
PROBE = (
    "import json, os, platform, sys, sysconfig\n"
    "libc = os.confstr('CS_GNU_LIBC_VERSION') if hasattr(os, 'confstr') else None\n"
    "print(json.dumps({'version': '%d.%d' % sys.version_info[:2], "
    "'implementation': sys.implementation.name, 'abiflags': getattr(sys, 'abiflags', ''), "
    "'machine': platform.machine(), 'glibc': (libc or '').partition(' ')[2], "
    "'soabi': sysconfig.get_config_var('SOABI') or ''}))"
)

# Installs the uploaded wheels offline, as the box's own ``python3`` sees them (``-E -s`` runs included):
# into its site-packages, with ``sudo -n`` where the sandbox user cannot write there (Vercel's images run
# code as ``vercel-sandbox`` with passwordless sudo: docs "System Specifications"). No index, no network.
# Nothing a caller gives is spliced in: $0 is the wheel folder, the rest are the pins.
INSTALL = (
    'dir=$0; py=$(command -v python3) || { echo "mainsdk: no python3 in the sandbox" >&2; exit 127; }\n'
    'if "$py" -I -c "import os, sys, sysconfig; sys.exit(0 if all(os.access(sysconfig.get_path(k), os.W_OK) '
    "for k in ('purelib', 'platlib')) else 1)\"; then as=; else as=\"command -p sudo -n\"; fi\n"
    '$as "$py" -I -m pip install --no-index --find-links "$dir" --no-cache-dir --disable-pip-version-check '
    '--no-input --no-warn-script-location --quiet -- "$@" || exit $?\n'
    'command -p rm -rf -- "$dir"\n'
)


@attrs.frozen
class BoxPython:
    """The box's ``python3`` as pip sees a platform: version, implementation, ABI, machine and glibc."""

    version: str  # "3.13"
    implementation: str = "cpython"
    abiflags: str = ""
    machine: str = "x86_64"
    glibc: str = ""  # "2.34"; empty on a libc that is not glibc

    @classmethod
    def parse(cls, text: str) -> BoxPython:
        """The probe's answer; ``ValueError`` when it is not one."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"not a probe answer: {text[:200]!r}")
        found = cls(
            version=str(data.get("version", "")),
            implementation=str(data.get("implementation") or "cpython"),
            abiflags=str(data.get("abiflags") or ""),
            machine=str(data.get("machine") or "x86_64"),
            glibc=str(data.get("glibc") or ""),
        )
        # Each part becomes a pip option on the app's side: only the forms a Python can say are taken.
        shapes = {
            "version": r"3\.\d{1,2}",
            "implementation": r"[a-z]{1,20}",
            "abiflags": r"[a-z]{0,4}",
            "machine": r"[A-Za-z0-9_]{1,20}",
            "glibc": r"(2\.\d{1,3})?",
        }
        for name, shape in shapes.items():
            if not re.fullmatch(shape, getattr(found, name)):
                raise ValueError(f"not a probe answer ({name}): {text[:200]!r}")
        return found

    @property
    def nodot(self) -> str:
        """``313`` for 3.13."""
        return self.version.replace(".", "")

    def pip_target(self) -> list[str]:
        """``pip download`` options selecting wheels for this Python and platform (and pure-Python ones)."""
        implementation = "cp" if self.implementation == "cpython" else self.implementation[:2]
        options = [
            "--python-version", self.version, "--implementation", implementation,
            "--abi", f"{implementation}{self.nodot}{self.abiflags}", "--abi", "abi3", "--abi", "none",
        ]  # fmt: skip
        for tag in self.platforms():
            options += ["--platform", tag]
        return options

    def platforms(self) -> list[str]:
        """The platform tags this box runs, newest first: ``manylinux_2_X`` down to 2_17, then ``linux_<machine>``."""
        tags = []
        match = re.fullmatch(r"2\.(\d+)", self.glibc)
        if match:
            for minor in range(int(match.group(1)), OLDEST_GLIBC_MINOR - 1, -1):
                tags.append(f"manylinux_2_{minor}_{self.machine}")
            tags.append(f"manylinux2014_{self.machine}")
        tags.append(f"linux_{self.machine}")
        return tags


@attrs.frozen
class Wheels:
    """A downloaded set: its key, the wheels by file name (paths on the app side), and the pins it was asked."""

    key: str
    files: Mapping[str, str]
    pins: tuple[str, ...]

    def read(self) -> dict[str, bytes]:
        """Each wheel's bytes, by file name."""
        result = {}
        for name, path in sorted(self.files.items()):
            with open(path, "rb") as fh:
                result[name] = fh.read()
        return result


def cache_root() -> str:
    """``$XDG_CACHE_HOME/mainsdk/wheels``, else ``~/.cache/mainsdk/wheels``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mainsdk", "wheels")


def wheels_key(python: BoxPython, pins: Sequence[str]) -> str:
    """The sha256 naming a wheelhouse: the box's Python and platform, and the sorted pins."""
    identity = {"format": FORMAT, "python": attrs.asdict(python), "packages": sorted(str(parse_pin(p)) for p in pins)}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


class Wheelhouse:
    """Downloads wheel sets on the app side and keeps them by key; safe across threads and processes."""

    def __init__(self, root: str | None = None) -> None:
        self._root = root
        self._lock = threading.Lock()  # flock is per open file: threads of one process take this first
        self.downloads = 0  # sets this wheelhouse downloaded (a cached set downloads none)

    @property
    def root(self) -> str:
        """Where the sets are kept (read each time, so a test or an app may set XDG_CACHE_HOME late)."""
        return self._root or cache_root()

    def ensure(self, python: BoxPython, pins: Sequence[str]) -> Wheels:
        """The wheels of ``pins`` for ``python``, downloaded first unless cached.

        Raises MAIN-SANDBOX-0001 naming the package and quoting pip when the set cannot be resolved for the
        box, and MAIN-SANDBOX-0006 (retryable) when pip cannot be started or takes too long.
        """
        key = wheels_key(python, pins)
        final = os.path.join(self.root, key)
        if not os.path.isfile(os.path.join(final, MANIFEST)):
            os.makedirs(self.root, 0o700, exist_ok=True)
            with self._lock, open(final + ".lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # another process downloading the same set: wait, then reuse
                if not os.path.isfile(os.path.join(final, MANIFEST)):
                    self._download(python, pins, final)
        names = sorted(n for n in os.listdir(final) if n.endswith(".whl"))
        return Wheels(key, {n: os.path.join(final, n) for n in names}, tuple(pins))

    def _download(self, python: BoxPython, pins: Sequence[str], final: str) -> None:
        temp = tempfile.mkdtemp(prefix=".download-", dir=self.root)
        try:
            started = time.monotonic()
            requirements = [str(parse_pin(pin)) for pin in pins]
            command = [
                sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--dest", temp,
                "--disable-pip-version-check", "--no-input", "--progress-bar", "off", *python.pip_target(),
                "--", *requirements,
            ]  # fmt: skip
            _pip(command, requirements)
            manifest = {
                "python": attrs.asdict(python),
                "packages": sorted(requirements),
                "wheels": sorted(n for n in os.listdir(temp) if n.endswith(".whl")),
                "seconds": round(time.monotonic() - started, 3),
            }
            with open(os.path.join(temp, MANIFEST), "w") as fh:
                json.dump(manifest, fh, indent=2)
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(final)  # a folder left without a manifest: an interrupted download, never used
            os.rename(temp, final)
            self.downloads += 1
        finally:
            shutil.rmtree(temp, ignore_errors=True)


def _pip(command: list[str], pins: Sequence[str]) -> None:
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, errors="replace", timeout=DOWNLOAD_TIMEOUT,
            stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    except OSError as exc:
        raise SandboxError(
            DRIVER_UNAVAILABLE, f"packages: pip did not start on the app's side ({exc.strerror})", ran=False
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
            "packages: the app's Python has no pip, which downloads the box's wheels; install pip beside mainsdk",
            ran=False,
        )
    raise SandboxError(INVALID_OPTION, failure_message(pins, done.stdout + done.stderr), ran=False)


def failure_message(pins: Sequence[str], output: str) -> str:
    """One message naming the package pip names (else the whole set) and quoting pip's ERROR lines."""
    errors = [line.strip() for line in output.splitlines() if line.strip().startswith("ERROR")]
    text = " ".join(errors or [line.strip() for line in output.splitlines() if line.strip()][-5:])
    said = canonical_name(text)
    named = [
        pin for pin in pins if re.search(rf"(?<![a-z0-9-]){re.escape(parse_pin(pin).key)}(?![a-z0-9]|-[a-z])", said)
    ]
    culprit = ", ".join(named) if named else ", ".join(pins)
    if len(text) > _MESSAGE_CHARS:
        text = text[:_MESSAGE_CHARS] + " ..."
    return (
        f"packages: cannot get {culprit} (sandbox.packages.python) as wheels for the Vercel sandbox's Python; "
        f"pip said: {text or '(nothing)'} -- fix or remove the pin in main.yaml (a package with no wheel for the "
        "box's platform cannot be installed offline); nothing ran"
    )
