"""The python packages of ``sandbox.packages``, built once on the host into a content-addressed cache.

A package set is installed outside the box, with the app's own network and
installer configuration, into ``<cache>/envs/<sha256>/site-packages``. The key
hashes the interpreter (its real path, version and platform) with the sorted
pins, so another interpreter or another set never reuses a folder. The build
goes into a temporary folder renamed into place when complete, under a file
lock, so two processes never build the same set twice and nobody sees half a
set. The box then gets the folder bound read-only over the interpreter's
site-packages (hidden, otherwise), where ``site`` already looks: no flag of
the interpreter is loosened and the box's network stays as the run named it.

The installer is ``uv`` when it is on PATH (fast, and its resolver's message
is short); otherwise pip, run by the box's own interpreter when it has pip, so
the wheels chosen match that interpreter's version, ABI and platform, not the
app's; else the app's pip with ``--python`` pointing at it.
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
from typing import IO

from mainsdk.errors import DRIVER_UNAVAILABLE, INVALID_OPTION, SandboxError
from mainsdk.packages import canonical_name, parse_pin

from mainsdk_local.programs import Program

FORMAT = 1  # bumped when the layout of an env folder changes
SITE = "site-packages"
MANIFEST = "mainsdk-env.json"
BUILD_TIMEOUT = 900.0  # seconds; pandas and matplotlib take about a minute on a slow link
_MESSAGE_CHARS = 1500


def cache_root() -> str:
    """``$XDG_CACHE_HOME/mainsdk/envs``, else ``~/.cache/mainsdk/envs``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mainsdk", "envs")


def env_key(program: Program, pins: Sequence[str]) -> str:
    """The sha256 naming the env of ``pins`` for ``program``: interpreter path, version, platform and sorted pins."""
    identity = {
        "format": FORMAT,
        "interpreter": program.executable,
        "version": program.version,
        "platform": program.platform,
        "packages": sorted(str(parse_pin(pin)) for pin in pins),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


class EnvBuilder:
    """Builds package envs on demand and says where each one is; one per driver, safe across threads and processes."""

    def __init__(self, root: str | None = None) -> None:
        self._root = root
        self._lock = threading.Lock()  # flock is per open file: threads of one process take this first
        self.builds = 0  # installs this builder ran (a cached set runs none)

    @property
    def root(self) -> str:
        """Where the envs are kept (read each time, so a test or an app may set XDG_CACHE_HOME late)."""
        return self._root or cache_root()

    def ensure(self, program: Program, pins: Sequence[str]) -> str:
        """The ``site-packages`` folder of ``pins`` for ``program``, built first if it is not in the cache.

        Raises ``MAIN-SANDBOX-0001`` naming the package and the installer's message when the set cannot be
        built, and ``MAIN-SANDBOX-0006`` (retryable) when the installer cannot be started or times out.
        """
        key = env_key(program, pins)
        final = os.path.join(os.path.realpath(self.root), key)  # canonical: the launcher binds it by this path
        site = os.path.join(final, SITE)
        if os.path.isfile(os.path.join(final, MANIFEST)):
            return site
        os.makedirs(self.root, 0o755, exist_ok=True)
        final = os.path.join(os.path.realpath(self.root), key)
        site = os.path.join(final, SITE)
        with self._lock, open(os.path.join(final + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process building the same set: wait for it, then reuse
            if os.path.isfile(os.path.join(final, MANIFEST)):
                return site
            self._build(program, pins, final)
        return site

    def _build(self, program: Program, pins: Sequence[str], final: str) -> None:
        temp = tempfile.mkdtemp(prefix=".build-", dir=os.path.dirname(final))
        try:
            os.chmod(temp, 0o755)  # the box's user reads it through the bind
            started = time.monotonic()
            command = installer_command(program, pins, os.path.join(temp, SITE))
            _install(command, pins)
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(temp, SITE, ".lock"))  # uv's lock of the target, of no use in the box
            manifest = {
                "interpreter": program.executable,
                "version": program.version,
                "platform": program.platform,
                "packages": sorted(pins),
                # What the resolver chose, dependencies included: frozen with the env for as long as it is cached.
                "installed": sorted(
                    name.removesuffix(".dist-info")
                    for name in os.listdir(os.path.join(temp, SITE))
                    if name.endswith(".dist-info")
                ),
                "installer": os.path.basename(command[0]) if "uv" in command[0] else "pip",
                "seconds": round(time.monotonic() - started, 3),
            }
            with open(os.path.join(temp, MANIFEST), "w") as fh:
                json.dump(manifest, fh, indent=2)
            _readable(temp)
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(final)  # a folder left without a manifest: an interrupted copy, never used
            os.rename(temp, final)
            self.builds += 1
        finally:
            shutil.rmtree(temp, ignore_errors=True)


def installer_command(program: Program, pins: Sequence[str], target: str) -> list[str]:
    """The command that installs ``pins`` for ``program`` into ``target``: uv if installed, else pip."""
    uv = shutil.which("uv")
    requirements = [str(parse_pin(pin)) for pin in pins]
    if uv is not None:
        return [
            uv, "pip", "install", "--python", program.executable, "--target", target,
            "--compile-bytecode", "--no-progress", "--", *requirements,
        ]  # fmt: skip
    pip = [program.executable, "-m", "pip"] if _has_pip(program.executable) else [sys.executable, "-m", "pip"]
    if pip[0] != program.executable:
        pip += ["--python", program.executable]  # pip >= 22.3: resolve for the box's interpreter, not the app's
    # --no-user: a user site would leak into the target's resolution; compiled .pyc: the folder is read-only later.
    return [
        *pip, "install", "--target", target, "--no-user", "--disable-pip-version-check", "--no-input",
        "--no-warn-script-location", "--", *requirements,
    ]  # fmt: skip


def _has_pip(executable: str) -> bool:
    try:
        done = subprocess.run(
            [executable, "-c", "import pip"], capture_output=True, timeout=30, check=False, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _install(command: list[str], pins: Sequence[str]) -> None:
    """Run the installer; its output goes to a terminal on stderr as it comes, and its message into the error."""
    show: IO[str] | None = sys.stderr if _is_tty(sys.stderr) else None
    if show is not None:
        show.write(f"mainsdk: building the box's python packages once ({', '.join(pins)}) ...\n")
        show.flush()
    try:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
            errors="replace",
        )  # fmt: skip
    except OSError as exc:
        raise SandboxError(
            DRIVER_UNAVAILABLE, f"packages: the installer {command[0]} did not start ({exc.strerror})", ran=False
        ) from None
    lines: list[str] = []
    timer = threading.Timer(BUILD_TIMEOUT, process.kill)
    timer.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            del lines[:-200]
            if show is not None:
                show.write(line)
                show.flush()
        code = process.wait()
    finally:
        timer.cancel()
    if code == 0:
        return
    if code < 0:
        raise SandboxError(
            DRIVER_UNAVAILABLE,
            f"packages: building {', '.join(pins)} took more than {BUILD_TIMEOUT:.0f}s and was stopped; "
            "check the package index is reachable, then retry",
            ran=False,
        )
    raise SandboxError(INVALID_OPTION, build_failure_message(pins, "".join(lines)), ran=False)


def _names(pin: str, said: str) -> bool:
    """Whether the canonical text ``said`` names ``pin``'s package as a whole word (six, not six-extras)."""
    return re.search(rf"(?<![a-z0-9-]){re.escape(parse_pin(pin).key)}(?![a-z0-9]|-[a-z])", said) is not None


def build_failure_message(pins: Sequence[str], output: str) -> str:
    """One message naming the package at fault (the one the resolver names, else the set) and its words."""
    errors = [line.strip() for line in output.splitlines() if _is_error_line(line)]
    text = " ".join(errors or [line.strip() for line in output.splitlines() if line.strip()][-5:])
    said = canonical_name(text)  # Bad_Pkg, bad.pkg and bad-pkg are one package
    named = [pin for pin in pins if _names(pin, said)]
    culprit = ", ".join(named) if named else ", ".join(pins)
    if len(text) > _MESSAGE_CHARS:
        text = text[:_MESSAGE_CHARS] + " ..."
    return (
        f"packages: cannot install {culprit} from sandbox.packages.python; the installer said: {text or '(nothing)'}"
        " -- fix or remove the pin in main.yaml; nothing ran"
    )


def _is_error_line(line: str) -> bool:
    stripped = line.strip()
    # pip: "ERROR: ..."; uv: "error: ..." then "cause: Because ..." (plain) or "× ..." / "╰─▶ ..." (on a terminal).
    return stripped.startswith(("ERROR", "error:", "cause:", "×", "╰─▶", "Because")) or "No solution found" in stripped


def _is_tty(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (OSError, ValueError):
        return False


def _readable(path: str) -> None:
    """Make every file readable and every folder enterable by the box's user (an installer keeps the umask)."""
    for folder, _dirs, files in os.walk(path):
        os.chmod(folder, 0o755)
        for name in files:
            full = os.path.join(folder, name)
            if not os.path.islink(full):
                os.chmod(full, os.stat(full).st_mode & 0o755 | 0o444)
