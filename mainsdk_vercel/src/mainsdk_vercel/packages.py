"""Python packages for a Vercel sandbox, without widening its network: wheels fetched on the app side.

The sandbox's network stays what the run was given (often nothing). Instead:

1. The box's Python is asked once per driver and image (``PROBE``: version, ABI, machine, glibc).
2. ``pip download --only-binary=:all:`` fetches the pinned set and its dependencies, for that platform and
   Python, with the app's own network and index, into a content-addressed wheelhouse on the app's side
   (``mainsdk.wheelhouse``, shared with the E2B driver: ``$XDG_CACHE_HOME/mainsdk/wheels/<sha256>``), reused
   by every later box of the same set.
3. The wheels go up in the one ``fs/write`` the box's files already use, and ``pip install --no-index
   --find-links`` installs them offline in the box (``INSTALL``), once per box: a session's later commands
   and cells find them installed.

A set pip cannot resolve is one MAIN-SANDBOX-0001 naming the package and quoting pip, before any code runs.
"""

from __future__ import annotations

import json
import re

import attrs
from mainsdk.wheelhouse import manylinux_platforms

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
        match = re.fullmatch(r"2\.(\d+)", self.glibc)
        tags = list(manylinux_platforms(int(match.group(1)), self.machine, OLDEST_GLIBC_MINOR)) if match else []
        return [*tags, f"linux_{self.machine}"]

    def describe(self) -> str:
        """``the Vercel sandbox's python 3.13 (cp313, x86_64, glibc 2.34)``, for messages."""
        libc = f"glibc {self.glibc}" if self.glibc else "no glibc"
        return f"the Vercel sandbox's python {self.version} (cp{self.nodot}{self.abiflags}, {self.machine}, {libc})"
