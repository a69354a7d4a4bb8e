"""The cell kernel's node package sets (TypeScript's compiler), built once on the host with npm into a cache.

A set is a ``node_modules`` folder the kernel's node executor loads its own packages from (the start line's
``site``: ``typescript`` for TypeScript cells where the box's node cannot strip types itself), kept apart from
the user's packages. It is built outside the box and made visible read-only in it by the driver.

Each set is pinned exactly, name, version and the registry's ``sha512`` integrity (:data:`NODE_KERNEL_SETS`), and
cached under ``<cache>/node-sets/<sha256 of the pins>``: content-addressed, since the integrity of every
package is in the key and checked against what npm installed (its ``package-lock.json``) before the set is kept.
The build goes into a temporary folder renamed into place when complete, under a file lock.

Nothing a box wrote steers the build (``host_tools``): npm runs in a fresh private folder, found through
``PATH``'s absolute entries, with no user or global configuration file (``--userconfig``/``--globalconfig``
empty files of that folder), every ``npm_config_*`` variable of the app dropped but the registry's, its own empty cache
folder, and ``--ignore-scripts``: no package's install script ever runs on the host.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence

from mainsdk.driver import DRIVER_UNAVAILABLE, INVALID_OPTION, SandboxError

from mainsdk_driverkit.host_tools import absolute_path, private_folder, tool_environment
from mainsdk_driverkit.waits import long_wait

# (name, version, the registry's dist.integrity) by kernel language. TypeScript has no dependencies: one package.
NODE_KERNEL_SETS: Mapping[str, tuple[tuple[str, str, str], ...]] = {
    "typescript": (
        (
            "typescript",
            "5.9.3",
            "sha512-jl1vZzPDinLr9eUt3J/t7V6FgNEw9QjvBPdysz9KfQDD41fQrC2Y4vKQdiaUpFT4bXlb1RHhLpp8wtm6M5TgSw==",
        ),
    ),
}
FORMAT = 1  # bumped when a set folder's layout changes
MANIFEST = "mainsdk-node-set.json"
BUILD_TIMEOUT = 600.0
_REGISTRY_VARIABLES = frozenset({"npm_config_registry", "NPM_CONFIG_REGISTRY"})
_lock = threading.Lock()


def cache_root() -> str:
    """``$XDG_CACHE_HOME/mainsdk/node-sets``, else ``~/.cache/mainsdk/node-sets``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mainsdk", "node-sets")


def set_key(pins: Sequence[tuple[str, str, str]]) -> str:
    """The cache key of a set: its format and every pin's name, version and integrity."""
    text = json.dumps({"format": FORMAT, "pins": sorted(pins)})
    return hashlib.sha256(text.encode()).hexdigest()


def npm_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``host_tools.tool_environment`` less every npm setting but the registry's."""
    env = tool_environment(environ)
    return {
        name: value
        for name, value in env.items()
        if name in _REGISTRY_VARIABLES or not name.lower().startswith("npm_config_")
    }


def ensure_node_set(pins: Sequence[tuple[str, str, str]], root: str | None = None) -> str:
    """The folder holding ``node_modules`` of ``pins``, built first if it is not in the cache.

    Raises ``MAIN-SANDBOX-0001`` when npm installs other than the pinned package (a version or integrity that
    differs), and ``MAIN-SANDBOX-0006`` (retryable) when npm is missing, fails or times out.
    """
    base = os.path.realpath(root or cache_root())
    final = os.path.join(base, set_key(pins))
    if os.path.isfile(os.path.join(final, MANIFEST)):
        return final
    os.makedirs(base, 0o755, exist_ok=True)
    with _lock, open(final + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process building the same set: wait for it, then reuse
        if not os.path.isfile(os.path.join(final, MANIFEST)):
            names = ", ".join(f"{name}@{version}" for name, version, _ in pins)
            why = f"the first TypeScript cell on this machine installs it with npm into {base} (once: cached)"
            with long_wait(f"building the kernel's node set {names}", why):
                _build(pins, final)
    return final


def _build(pins: Sequence[tuple[str, str, str]], final: str) -> None:
    npm = shutil.which("npm", path=absolute_path())
    if npm is None:
        raise SandboxError(DRIVER_UNAVAILABLE, "cells: the kernel's node packages need npm on PATH", ran=False)
    temp = tempfile.mkdtemp(prefix=".build-", dir=os.path.dirname(final))
    try:
        os.chmod(temp, 0o755)  # the box's user reads it through the bind
        with private_folder() as cwd:
            env = npm_environment()
            env["HOME"] = cwd  # npm's own files (logs, an .npmrc it looks for) in the private folder, nowhere else
            empty = [os.path.join(cwd, name) for name in ("user.npmrc", "global.npmrc")]  # npm takes no file twice
            for path in empty:
                open(path, "w").close()
            command = [
                npm, "install", "--prefix", temp, "--userconfig", empty[0], "--globalconfig", empty[1],
                "--cache", os.path.join(cwd, "cache"), "--ignore-scripts", "--no-audit", "--no-fund",
                "--no-update-notifier", "--omit", "dev", "--save-exact", "--loglevel", "error", "--",
                *(f"{name}@{version}" for name, version, _ in pins),
            ]  # fmt: skip
            try:
                done = subprocess.run(
                    command, cwd=cwd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False,
                    stdin=subprocess.DEVNULL,
                )  # fmt: skip
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise SandboxError(DRIVER_UNAVAILABLE, f"cells: npm did not finish: {exc}", ran=False) from exc
            if done.returncode != 0:
                raise SandboxError(
                    DRIVER_UNAVAILABLE,
                    f"cells: npm install of the kernel's node packages failed: {done.stderr[-1500:]}",
                )
        _check_installed(temp, pins)
        with open(os.path.join(temp, MANIFEST), "w") as fh:
            json.dump({"format": FORMAT, "packages": [list(pin) for pin in sorted(pins)]}, fh, indent=2)
        for folder, dirs, files in os.walk(temp):  # readable by the box's user, through the bind
            for name in dirs:
                os.chmod(os.path.join(folder, name), 0o755)
            for name in files:
                path = os.path.join(folder, name)
                if not os.path.islink(path):
                    os.chmod(path, 0o644 | (os.stat(path).st_mode & 0o111))
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(final)  # a folder left without a manifest: an interrupted copy, never used
        os.rename(temp, final)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _check_installed(folder: str, pins: Sequence[tuple[str, str, str]]) -> None:
    """Every pin installed at its version, with the integrity npm verified matching the pinned one; nothing else."""
    with open(os.path.join(folder, "package-lock.json")) as fh:
        packages = json.load(fh).get("packages", {})
    installed = {key.removeprefix("node_modules/"): value for key, value in packages.items() if key}
    for name, version, integrity in pins:
        got = installed.pop(name, None)
        if got is None or got.get("version") != version or got.get("integrity") != integrity:
            raise SandboxError(
                INVALID_OPTION,
                f"cells: npm installed {name} {got and got.get('version')!r} with integrity "
                f"{got and got.get('integrity')!r}, not the kernel's pin {version} {integrity}: check the registry "
                "(npm_config_registry) serves the real package",
                ran=False,
            )
    if installed:
        raise SandboxError(
            INVALID_OPTION, f"cells: npm installed packages beyond the kernel's pins: {sorted(installed)}"
        )
