"""Finding the real interpreter behind a program name, once, and what of the host it needs to see.

A program on PATH may be a shim (pyenv's costs ~100 ms a start) or a venv
link; the sandbox runs the real binary and binds its installation read-only,
hiding its site-packages so the code sees the standard library, not the app's
installed packages.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading

import attrs
from mainsdk.driver import INVALID_OPTION, SandboxError
from mainsdk_driverkit.host_tools import absolute_path, private_folder

# Paths every box sees read-only already; an interpreter under one needs no extra bind.
SYSTEM_PREFIXES = ("/usr/", "/bin/", "/lib/", "/lib64/", "/sbin/")

_PYTHON_PROBE = (
    "import json, os, site, sys, sysconfig;"
    "print(json.dumps({'executable': os.path.realpath(sys.executable), 'prefix': sys.prefix,"
    " 'exec_prefix': sys.exec_prefix, 'base_prefix': sys.base_prefix, 'base_exec_prefix': sys.base_exec_prefix,"
    " 'site': site.getsitepackages(), 'version': sys.version, 'platform': sysconfig.get_platform()}))"
)
_NODE_PROBE = "process.stdout.write(require('fs').realpathSync(process.execPath))"


@attrs.frozen
class Program:
    """A resolved interpreter: the binary to exec, what to bind read-only, what to hide."""

    name: str
    executable: str
    readonly_paths: tuple[str, ...] = ()
    hidden_paths: tuple[str, ...] = ()
    version: str = ""  # python: sys.version, part of a package env's key
    platform: str = ""  # python: sysconfig.get_platform()


def _outside_system(paths: list[str]) -> tuple[str, ...]:
    kept: list[str] = []
    for path in sorted({os.path.realpath(p) for p in paths if p}):
        if path.startswith(SYSTEM_PREFIXES) or path == "/usr":
            continue
        if not any(path.startswith(k + "/") for k in kept):
            kept.append(path)
    return tuple(kept)


def _probe(argv: list[str], name: str) -> str:
    try:
        with private_folder() as cwd:  # never the app's folder, where box output lands (mainsdk_driverkit.host_tools)
            done = subprocess.run(
                argv, check=False, capture_output=True, text=True, timeout=30, cwd=cwd,
                env={"PATH": os.environ.get("PATH", "")},
            )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxError(INVALID_OPTION, f"sandbox.local: {name!r} did not start: {exc}") from None
    if done.returncode != 0:
        raise SandboxError(INVALID_OPTION, f"sandbox.local: {name!r} failed to start: {done.stderr.strip()[:300]}")
    return done.stdout


def resolve_program(language: str, name: str) -> Program:
    """Resolve ``name`` (as ``sandbox.local`` gives it) for ``language`` to the real binary."""
    found = shutil.which(name, path=absolute_path())  # PATH's relative entries would name the app's folder
    if found is None:
        raise SandboxError(
            INVALID_OPTION, f"sandbox.local.{language}: {name!r} is not on PATH; install it or give its full path"
        )
    if language == "python":
        # -I: the probe imports json and sysconfig; from a folder on sys.path, a planted json.py would run.
        first = json.loads(_probe([found, "-I", "-c", _PYTHON_PROBE], name))
        # Probe the real binary itself: run from a venv link, site-packages would be the venv's.
        real = json.loads(_probe([first["executable"], "-I", "-c", _PYTHON_PROBE], name))
        prefixes = [real["prefix"], real["exec_prefix"], real["base_prefix"], real["base_exec_prefix"]]
        hidden = tuple(p for p in real["site"] if os.path.isdir(p))
        return Program(
            name, real["executable"], _outside_system(prefixes), hidden, str(real["version"]), str(real["platform"])
        )
    if language == "node":
        executable = _probe([found, "-e", _NODE_PROBE], name).strip()
        return Program(name, executable, _outside_system([os.path.dirname(os.path.dirname(executable))]))
    executable = os.path.realpath(found)
    return Program(name, executable, _outside_system([os.path.dirname(executable)]))


class ProgramCache:
    """Resolves each program once per driver; later runs reuse the answer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._resolved: dict[tuple[str, str], Program] = {}

    def cached(self, language: str, name: str) -> Program | None:
        """The program for ``language`` named ``name`` if it was resolved already (no lookup, no blocking)."""
        return self._resolved.get((language, name))

    def get(self, language: str, name: str) -> Program:
        """The resolved program for ``language`` named ``name``."""
        key = (language, name)
        with self._lock:
            if key not in self._resolved:
                self._resolved[key] = resolve_program(language, name)
            return self._resolved[key]
