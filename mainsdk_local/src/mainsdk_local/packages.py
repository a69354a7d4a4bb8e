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

Nothing a box wrote steers the build (``mainsdk_driverkit.host_tools``): the installer
and its probe run in a fresh private folder, not the app's (where box output
lands), read no configuration file (uv ``--no-config``, pip with
``PIP_CONFIG_FILE=/dev/null``, interpreters ``-I``) and only the index
settings of ``host_tools.INDEX_VARIABLES`` from the app's environment. Only
wheels are installed (uv ``--no-build``, pip ``--only-binary=:all:``): a
package with no wheel for the box's interpreter is a 0001 naming it, and no
package's build backend ever runs on the host.
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
from typing import IO, Literal

from mainsdk.driver import DRIVER_UNAVAILABLE, INVALID_OPTION, SandboxError, canonical_name, parse_pin
from mainsdk_driverkit.host_tools import absolute_path, private_folder, tool_environment
from mainsdk_driverkit.waits import long_wait

from mainsdk_local.programs import Program

# Bumped when the layout of an env folder changes, or what may go into one: 2 since only wheels are installed, so an
# env built before from a source distribution (its backend run on the host) is never reused.
FORMAT = 2
SITE = "site-packages"
MANIFEST = "mainsdk-env.json"
BUILD_TIMEOUT = 900.0  # seconds; pandas and matplotlib take about a minute on a slow link
_MESSAGE_CHARS = 1500

Installer = Literal["auto", "uv", "pip"]  # auto: uv when it is on PATH, else pip


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

    def __init__(self, root: str | None = None, installer: Installer = "auto") -> None:
        self._root = root
        self.installer: Installer = installer
        self._lock = threading.Lock()  # flock is per open file: threads of one process take this first
        self.builds = 0  # installs this builder ran (a cached set runs none)

    @property
    def root(self) -> str:
        """Where the envs are kept (read each time, so a test or an app may set XDG_CACHE_HOME late)."""
        return self._root or cache_root()

    def ensure(self, program: Program, pins: Sequence[str], purpose: str = "sandbox.packages") -> str:
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
            what = f"building the python package set {', '.join(pins)} for {purpose}"
            why = (
                f"the first use of this set on this machine installs it with {self.installer_name()} for "
                f"{program.executable} into {self.root} (once: later runs reuse it); this can take a minute"
            )
            with long_wait(what, why):
                self._build(program, pins, final)
        return site

    def installer_name(self) -> str:
        """The installer a build runs: uv when chosen or on PATH, else pip."""
        if self.installer == "auto":
            return "uv" if shutil.which("uv", path=absolute_path()) else "pip"
        return str(self.installer)

    def _build(self, program: Program, pins: Sequence[str], final: str) -> None:
        temp = tempfile.mkdtemp(prefix=".build-", dir=os.path.dirname(final))
        try:
            os.chmod(temp, 0o755)  # the box's user reads it through the bind
            started = time.monotonic()
            env = tool_environment()
            with private_folder() as cwd:  # never the app's folder, where box output lands
                command = installer_command(program, pins, os.path.join(temp, SITE), self.installer, cwd=cwd, env=env)
                _install(command, pins, program, cwd=cwd, env=env)
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
                "installer": "uv" if command[1] == "pip" else "pip",  # uv pip install / python -I -m pip
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


def installer_command(
    program: Program,
    pins: Sequence[str],
    target: str,
    installer: Installer = "auto",
    *,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
) -> list[str]:
    """The command that installs ``pins`` for ``program`` into ``target``, wheels only: uv if installed, else pip.

    ``cwd`` and ``env`` are where and how the pip probe runs (a private folder and ``tool_environment()``);
    the command is meant to run the same way.
    """
    uv = shutil.which("uv", path=absolute_path()) if installer != "pip" else None  # never one in the app's folder
    if installer == "uv" and uv is None:
        raise SandboxError(DRIVER_UNAVAILABLE, "packages: the installer uv is not on PATH", ran=False)
    requirements = [str(parse_pin(pin)) for pin in pins]
    if uv is not None:
        # --no-config: no uv.toml or pyproject.toml, wherever found; --no-build: a source distribution is
        # refused, never built (its build backend would run on the host).
        return [
            uv, "pip", "install", "--no-config", "--no-build", "--python", program.executable, "--target", target,
            "--compile-bytecode", "--no-progress", "--", *requirements,
        ]  # fmt: skip
    # -I: neither the current folder nor the user site on sys.path, no PYTHON* variable.
    own = _has_pip(program.executable, cwd=cwd, env=env)
    pip = [program.executable, "-I", "-m", "pip"] if own else [sys.executable, "-I", "-m", "pip"]
    if pip[0] != program.executable:
        pip += ["--python", program.executable]  # pip >= 22.3: resolve for the box's interpreter, not the app's
    # --only-binary: wheels only (see above); --no-user: a user site would leak into the target's resolution.
    return [
        *pip, "install", "--only-binary=:all:", "--target", target, "--no-user", "--disable-pip-version-check",
        "--no-input", "--no-warn-script-location", "--", *requirements,
    ]  # fmt: skip


def _has_pip(executable: str, *, cwd: str | None = None, env: dict[str, str] | None = None) -> bool:
    with contextlib.ExitStack() as stack:
        folder = cwd if cwd is not None else stack.enter_context(private_folder())
        try:
            done = subprocess.run(
                [executable, "-I", "-c", "import pip"], capture_output=True, timeout=30, check=False,
                stdin=subprocess.DEVNULL, cwd=folder, env=tool_environment() if env is None else env,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            return False
    return done.returncode == 0


def _install(command: list[str], pins: Sequence[str], program: Program, *, cwd: str, env: dict[str, str]) -> None:
    """Run the installer; its output goes to a terminal on stderr as it comes, and its message into the error."""
    show: IO[str] | None = sys.stderr if _is_tty(sys.stderr) else None
    if show is not None:
        show.write(f"mainsdk: building the box's python packages once ({', '.join(pins)}) ...\n")
        show.flush()
    try:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
            errors="replace", cwd=cwd, env=env,
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
    raise SandboxError(INVALID_OPTION, build_failure_message(pins, "".join(lines), _describe(program)), ran=False)


def _describe(program: Program) -> str:
    """``python 3.11 on linux-x86_64``: the box's interpreter as a message names it."""
    version = ".".join(program.version.split(" ", 1)[0].split(".")[:2])
    return f"python {version} on {program.platform}" if version else "the box's python"


def _names(pin: str, said: str) -> bool:
    """Whether the canonical text ``said`` names ``pin``'s package as a whole word (six, not six-extras)."""
    return re.search(rf"(?<![a-z0-9-]){re.escape(parse_pin(pin).key)}(?![a-z0-9]|-[a-z])", said) is not None


def build_failure_message(pins: Sequence[str], output: str, python: str = "the box's python") -> str:
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
        f" -- fix or remove the pin in main.yaml (only wheels are installed: a package with no wheel for {python}"
        " is refused, its source is never built on the host); nothing ran"
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
