"""Python packages for an E2B box without widening its network: wheels fetched on the app side, installed offline.

The box's interpreter is probed once per template (its version, ABI, glibc and machine: ``PROBE``). The
app's own pip then downloads binary wheels for exactly that interpreter (``pip download --only-binary=:all:
--platform ... --python-version ... --abi ...``), with the app's network and index configuration, into a
content-addressed wheelhouse (``$XDG_CACHE_HOME/mainsdk/wheelhouses/<sha256>``), built once under a file
lock and renamed into place when complete. The driver uploads the wheels with the box's work files in one
request and installs them in the box with ``--no-index --no-deps`` (``install_line``): the set was resolved
on the app side, so nothing in the box asks any index, and the sandbox keeps exactly the egress policy the
run named.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import attrs
from mainsdk.errors import DRIVER_UNAVAILABLE, INVALID_OPTION, SandboxError
from mainsdk.packages import canonical_name, parse_pin

FORMAT = 1  # bumped when the layout of a wheelhouse changes
MANIFEST = "mainsdk-wheels.json"
DOWNLOAD_TIMEOUT = 900.0  # seconds: pandas and matplotlib are about 55 MB of wheels
OLDEST_GLIBC_MINOR = 5  # manylinux1 is glibc 2.5: nothing older is on PyPI
_MESSAGE_CHARS = 1500
# In the box: where the wheels land (removed after the install) and the environment they are installed into.
WHEELS = "/tmp/mainsdk-wheels"
ENV = "/tmp/mainsdk-env"
ENV_PYTHON = f"{ENV}/bin/python3"

# Run in the box by ``python3 -E -s -c``: what pip needs to pick wheels for this interpreter.
PROBE = (
    "import json, os, platform, sys, sysconfig\n"
    "libc = os.confstr('CS_GNU_LIBC_VERSION') if 'CS_GNU_LIBC_VERSION' in os.confstr_names else None\n"
    "print(json.dumps({'implementation': sys.implementation.name, 'version': list(sys.version_info[:2]),"
    " 'free_threaded': bool(sysconfig.get_config_var('Py_GIL_DISABLED')), 'libc': libc,"
    " 'machine': platform.machine()}))\n"
)


@attrs.frozen
class BoxPython:
    """The box's interpreter as pip's ``--python-version``, ``--abi`` and ``--platform`` options name it."""

    version: str  # "3.11"
    abi: str  # "cp311"
    platforms: tuple[str, ...]  # most specific first: manylinux_2_36_x86_64 ... manylinux1_x86_64

    @classmethod
    def from_probe(cls, output: str) -> BoxPython:
        """Read ``PROBE``'s answer; a ``ValueError`` says why packages cannot be installed in that box."""
        try:
            found = json.loads(output.strip().splitlines()[-1])
            major, minor = (int(part) for part in found["version"])
            implementation, machine, libc = found["implementation"], str(found["machine"]), found.get("libc")
        except (ValueError, KeyError, TypeError, IndexError):
            raise ValueError(f"the probe of the box's python3 answered {output[:200]!r}") from None
        if implementation != "cpython":
            raise ValueError(f"the box's python3 is {implementation}, and wheels are picked for CPython only")
        glibc = re.fullmatch(r"glibc (\d+)\.(\d+)", str(libc or ""))
        if glibc is None or int(glibc.group(1)) != 2 or not re.fullmatch(r"[a-z0-9_]+", machine):
            raise ValueError(f"the box's python3 runs on {libc or 'no glibc'} ({machine}): no manylinux wheel fits")
        abi = f"cp{major}{minor}" + ("t" if found.get("free_threaded") else "")
        return cls(f"{major}.{minor}", abi, manylinux_platforms(int(glibc.group(2)), machine))

    def describe(self) -> str:
        """``python 3.11 (cp311, manylinux_2_36_x86_64)``, for messages."""
        return f"python {self.version} ({self.abi}, {self.platforms[0]})"


def manylinux_platforms(glibc_minor: int, machine: str) -> tuple[str, ...]:
    """Every manylinux tag a glibc 2.``glibc_minor`` box on ``machine`` runs, with the legacy aliases (PEP 600)."""
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags: list[str] = []
    for minor in range(glibc_minor, OLDEST_GLIBC_MINOR - 1, -1):
        tags.append(f"manylinux_2_{minor}_{machine}")
        # manylinux2010 and manylinux1 were defined for x86 only (PEP 571, PEP 513); manylinux2014 for more.
        if minor == 17 or (minor in legacy and machine in ("x86_64", "i686")):
            tags.append(f"{legacy[minor]}_{machine}")
    return tuple(tags)


def wheelhouse_root() -> str:
    """``$XDG_CACHE_HOME/mainsdk/wheelhouses``, else ``~/.cache/mainsdk/wheelhouses``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mainsdk", "wheelhouses")


def wheelhouse_key(python: BoxPython, pins: Sequence[str]) -> str:
    """The sha256 naming the wheels of ``pins`` for ``python``: its tags and the sorted pins."""
    identity = {
        "format": FORMAT,
        "version": python.version,
        "abi": python.abi,
        "platforms": list(python.platforms),
        "packages": sorted(str(parse_pin(pin)) for pin in pins),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


class Wheelhouse:
    """Wheel sets downloaded on demand, kept by content key; one per driver, safe across threads and processes."""

    def __init__(self, root: str | None = None) -> None:
        self._root = root
        self._lock = threading.Lock()  # flock is per open file: threads of one process take this first
        self.downloads = 0  # sets this wheelhouse downloaded (a cached set downloads nothing)

    @property
    def root(self) -> str:
        """Where the sets are kept (read each time, so a test or an app may set XDG_CACHE_HOME late)."""
        return self._root or wheelhouse_root()

    def ensure(self, python: BoxPython, pins: Sequence[str]) -> list[Path]:
        """The wheels of ``pins`` (dependencies included) for ``python``, downloaded first if not cached.

        Raises ``MAIN-SANDBOX-0001`` naming the package and pip's message when the set cannot be resolved
        for that interpreter, and ``MAIN-SANDBOX-0006`` (retryable) when pip cannot start or times out.
        """
        final = Path(self.root) / wheelhouse_key(python, pins)
        if (final / MANIFEST).is_file():
            return _wheels_of(final)
        final.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, open(f"{final}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process fetching the same set: wait for it, then reuse
            if not (final / MANIFEST).is_file():
                self._download(python, pins, final)
        return _wheels_of(final)

    def _download(self, python: BoxPython, pins: Sequence[str], final: Path) -> None:
        temp = Path(tempfile.mkdtemp(prefix=".download-", dir=final.parent))
        try:
            _run_pip(download_command(python, pins, temp), pins, python)
            wheels = sorted(p for p in temp.iterdir() if p.name.endswith(".whl"))
            manifest = {
                "python": attrs.asdict(python),
                "packages": sorted(pins),
                # What pip resolved, dependencies included: frozen with the set for as long as it is cached.
                "wheels": [{"name": w.name, "sha256": _sha256(w), "size": w.stat().st_size} for w in wheels],
            }
            (temp / MANIFEST).write_text(json.dumps(manifest, indent=2))
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(final)  # a folder left without a manifest: an interrupted copy, never used
            temp.rename(final)
            self.downloads += 1
        finally:
            shutil.rmtree(temp, ignore_errors=True)


def download_command(python: BoxPython, pins: Sequence[str], dest: Path) -> list[str]:
    """The app's pip downloading binary wheels of ``pins`` for ``python`` (not for the app's interpreter)."""
    platforms = [arg for tag in python.platforms for arg in ("--platform", tag)]
    return [
        sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--implementation", "cp",
        "--python-version", python.version, "--abi", python.abi, *platforms, "--dest", str(dest),
        "--disable-pip-version-check", "--no-input", "--progress-bar", "off", "--",
        *(str(parse_pin(pin)) for pin in pins),
    ]  # fmt: skip


def install_line(wheels: Sequence[str]) -> str:
    """The box's command: a fresh environment, the uploaded wheels installed into it offline, the wheels removed.

    ``--no-index --no-deps``: the set was resolved on the app side, so pip asks no index (and the sandbox
    may reach none); ``PIP_CONFIG_FILE=/dev/null``: no config file of the template adds one. The
    environment has no pip and sees no system site-packages: a run gets its configured packages only.
    """
    paths = " ".join(shlex.quote(f"{WHEELS}/{name}") for name in wheels)
    return "\n".join(
        [
            "export PIP_CONFIG_FILE=/dev/null PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1",
            f"python3 -E -s -m venv --without-pip {ENV} && "
            f"python3 -E -s -m pip --python {ENV_PYTHON} install --no-index --no-deps --no-compile -q {paths}",
            f"r=$?; rm -rf -- {WHEELS}; exit $r",
        ]
    )


def failure_message(pins: Sequence[str], output: str, where: str) -> str:
    """One message naming the package at fault (the one pip names, else the set) and pip's own words."""
    errors = [line.strip() for line in output.splitlines() if line.strip().startswith("ERROR")]
    text = " ".join(errors or [line.strip() for line in output.splitlines() if line.strip()][-5:])
    said = canonical_name(text)
    named = [pin for pin in pins if _names(pin, said)]
    culprit = ", ".join(named) if named else ", ".join(pins)
    if len(text) > _MESSAGE_CHARS:
        text = text[:_MESSAGE_CHARS] + " ..."
    return (
        f"packages: cannot install {culprit} from sandbox.packages.python {where}; pip said: "
        f"{text or '(nothing)'} -- fix or remove the pin in main.yaml; nothing ran"
    )


def _names(pin: str, said: str) -> bool:
    """Whether the canonical text ``said`` names ``pin``'s package as a whole word (six, not six-extras)."""
    return re.search(rf"(?<![a-z0-9-]){re.escape(parse_pin(pin).key)}(?![a-z0-9]|-[a-z])", said) is not None


def _run_pip(command: list[str], pins: Sequence[str], python: BoxPython) -> None:
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            errors="replace",
            stdin=subprocess.DEVNULL,
            timeout=DOWNLOAD_TIMEOUT,
            check=False,
        )
    except OSError as exc:
        raise SandboxError(
            DRIVER_UNAVAILABLE, f"packages: the app's pip did not start ({exc.strerror})", ran=False
        ) from None
    except subprocess.TimeoutExpired:
        raise SandboxError(
            DRIVER_UNAVAILABLE,
            f"packages: downloading {', '.join(pins)} took more than {DOWNLOAD_TIMEOUT:.0f}s and was stopped; "
            "check the package index is reachable, then retry",
            ran=False,
        ) from None
    if done.returncode != 0:
        where = f"for the E2B box's {python.describe()}"
        raise SandboxError(INVALID_OPTION, failure_message(pins, done.stdout + done.stderr, where), ran=False)


def _wheels_of(folder: Path) -> list[Path]:
    manifest = json.loads((folder / MANIFEST).read_text())
    return [folder / entry["name"] for entry in manifest["wheels"]]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
