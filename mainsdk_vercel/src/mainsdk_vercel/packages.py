"""Python packages for a Vercel sandbox, without widening its network: wheels fetched on the app side.

The sandbox's network stays what the run was given (often nothing). Instead:

1. The box's Python is asked once per driver and image (``PROBE``: version, ABI, machine, glibc).
2. ``pip download --only-binary=:all:`` fetches the pinned set and its dependencies, for that platform and
   Python, with the app's own network and index, into a content-addressed wheelhouse on the app's side
   (``mainsdk_driverkit.wheelhouse``, shared with the E2B driver: ``$XDG_CACHE_HOME/mainsdk/wheels/<sha256>``), reused
   by every later box of the same set.
3. The wheels go up in the one ``fs/write`` the box's files already use, with pypa's ``installer`` as a zip
   (``installer_zip``), and are installed offline by the box's Python with installer and its standard library
   (``INSTALL``, ``INSTALL_WHEELS``: the image's Python may have no pip), once per box: a session's later
   commands and cells find them installed.

A set pip cannot resolve is one MAIN-SANDBOX-0001 naming the package and quoting pip, before any code runs.
"""

from __future__ import annotations

import functools
import importlib.metadata
import io
import json
import re
import zipfile
from pathlib import Path

import attrs
import installer
from mainsdk_driverkit.wheelhouse import manylinux_platforms

from mainsdk_vercel._images import NO_PYTHON_ADVICE

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

# The installer: pypa's ``installer`` (https://installer.pypa.io), the library that defines installing a wheel
# without pip, shipped to the box as a zip of the app's own copy (``installer_zip``, uploaded with the wheels)
# and imported from it by the box's ``python3``. The image's Python may have no pip: Vercel's default image
# (``vercel/sandbox/universal``, github vercel/sandbox ``images/universal/Dockerfile``: Ubuntu with python3.14
# and python3-pip) has one, but the legacy runtimes are Amazon Linux 2023 (docs "System Specifications"), whose
# system python3 (3.9) ships without pip, and an image named by ``sandbox.vercel.image`` may have none.
# installer 0.7 is pinned (pyproject.toml): 1.0 and later need Python 3.10.
INSTALLER_ZIP = "installer.zip"  # its name in the uploaded wheel folder, removed with it after the install

# Run as ``python3 -I -c INSTALL_WHEELS <wheel folder> <pins>``, with only the standard library and the zip.
# The set is exactly what pip resolved on the app's side for this Python and platform (dependencies included).
# Every wheel's RECORD is validated first (names, sizes and sha256, ``WheelFile.validate_record``; installer's
# ``install`` does not validate by itself), then each is installed into this Python's sysconfig scheme, as
# installer's own ``python -m installer`` does (its ``_get_scheme_dict``): ``.data/`` trees, ``#!python``
# scripts and console scripts pointed at this Python, an INSTALLER file. No bytecode is compiled (the first
# import does). installer 0.7 refuses any file that exists and writes a name wherever it points; ``Destination``
# does what installer 1.x does with ``overwrite_existing=True``: a file already there is replaced (as before,
# and as pip would), and no name is written outside its scheme's folder. Errors are ``ERROR:`` lines, as
# pip's, for the 0001 that quotes them. Written for Python 3.7 and later (installer 0.7's Requires-Python).
#   argv: the wheel folder (with installer.zip), then the pins (each must have its wheel in the folder)
INSTALL_WHEELS = r"""
import os, sys

def fail(*lines):
    for line in lines:
        print("ERROR: " + line, file=sys.stderr)
    sys.exit(1)

if sys.version_info < (3, 7):
    fail("installing wheels needs python 3.7 or later; this sandbox's python3 is %d.%d" % sys.version_info[:2])
folder, pins = os.path.abspath(sys.argv[1]), sys.argv[2:]
sys.path.insert(0, os.path.join(folder, "installer.zip"))
import sysconfig
import installer
from installer.destinations import SchemeDictionaryDestination
from installer.sources import WheelFile
from installer.utils import canonicalize_name, parse_wheel_filename

class Destination(SchemeDictionaryDestination):
    def write_to_fs(self, scheme, path, stream, is_executable):
        root = os.path.abspath(self.scheme_dict[scheme])
        target = os.path.abspath(os.path.join(root, path))
        if os.path.commonpath([root, target]) != root:
            raise ValueError("%s would be written outside %s" % (path, root))
        if os.path.lexists(target) and not os.path.isdir(target):
            os.unlink(target)
        return super().write_to_fs(scheme, path, stream, is_executable)

def failed(name, exc):
    issues = getattr(exc, "issues", None)  # a failed validation lists each, naming the wheel
    fail(*(issues or ["%s: %s" % (name, str(exc) or type(exc).__name__)]))

os.chdir(folder)  # installer's messages then name the wheel, not the folder it came in
names = sorted(n for n in os.listdir(".") if n.endswith(".whl"))
have = set()
for name in names:
    try:
        have.add(canonicalize_name(parse_wheel_filename(name).distribution))
    except ValueError as exc:
        failed(name, exc)
for pin in pins:
    if canonicalize_name(pin.split("==")[0].split("[")[0].strip()) not in have:
        fail("no wheel for %s among the wheels fetched for this sandbox" % pin)
for name in names:
    try:
        with WheelFile.open(name) as source:
            source.validate_record(validate_contents=True)
    except Exception as exc:
        failed(name, exc)
base = sysconfig.get_config_var("base") or sys.prefix
for name in names:
    try:
        with WheelFile.open(name) as source:
            scheme = sysconfig.get_paths()
            include = sysconfig.get_path("include", vars={"installed_base": base})
            scheme["headers"] = os.path.join(include, source.distribution)
            destination = Destination(scheme, interpreter=sys.executable, script_kind="posix")
            installer.install(source, destination, additional_metadata={"INSTALLER": b"mainsdk\n"})
    except Exception as exc:
        failed(name, exc)
"""

# Installs the uploaded wheels offline, as the box's own ``python3`` sees them (``-E -s`` runs included):
# into its site-packages, with ``sudo -n`` where the sandbox user cannot write there (Vercel's images run
# code with passwordless sudo: docs "System Specifications"; vercel/sandbox ``images/ubuntu/Dockerfile``),
# files readable by all (``umask 022``: installer writes with the process's umask, and the code runs as the
# sandbox user). No index, no network, no pip. Nothing a caller gives is spliced in: $0 is the wheel folder,
# $1 the installing script (``INSTALL_WHEELS``), the rest are the pins.
INSTALL = (
    "dir=$0 script=$1; shift; umask 022\n"
    'py=$(command -v python3) || { echo "mainsdk: no python3 in the sandbox" >&2; exit 127; }\n'
    'if "$py" -I -c "import os, sys, sysconfig; sys.exit(0 if all(os.access(sysconfig.get_path(k), os.W_OK) '
    "for k in ('purelib', 'platlib', 'scripts')) else 1)\"; then as=; else as=\"command -p sudo -n\"; fi\n"
    '$as "$py" -I -c "$script" "$dir" "$@" || exit $?\n'
    'command -p rm -rf -- "$dir"\n'
)


@functools.cache
def installer_zip() -> bytes:
    """The app's ``installer`` package as a zip the box's Python imports it from, the same bytes every time.

    Its source files (no bytecode, which is per Python; no Windows launchers, which a posix install never
    reads) and its licence, in sorted order, stored, with fixed times and modes: a cassette's upload is stable.
    """
    package = Path(installer.__file__).parent
    members = {
        f"installer/{path.relative_to(package).as_posix()}": path.read_bytes()
        for path in package.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".exe")
    }
    distribution = importlib.metadata.distribution("installer")
    for file in distribution.files or ():
        if "LICENSE" in file.name.upper() or "COPYING" in file.name.upper():
            members[f"installer-LICENSES/{file.name}"] = Path(str(file.locate())).read_bytes()
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_STORED) as archive:
        for name in sorted(members):
            entry = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, members[name])
    return raw.getvalue()


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


# The cell kernel's own packages (``mainsdk.driver.KERNEL_PACKAGES``): installed flat into a folder of their own,
# apart from the image's site-packages (where ``sandbox.packages`` go) and on no default sys.path; core puts it on
# the kernel's sys.path after the user's site-packages. Owned by root where the sandbox user cannot write /opt
# (Vercel's images: ``sudo -n``), so code in the box cannot change the kernel's IPython under later cells.
KERNEL = "/opt/mainsdk/kernel"
KERNEL_PYTHON = (3, 11)  # ipython 9's Requires-Python

# Run as ``python3 -I -c KERNEL_WHEELS <wheel folder> <target>``, with only the standard library and the zip:
# every wheel's RECORD validated, then installed by pypa's installer into one flat folder (``pip install --target``
# layout: packages at the top, scripts in bin/), no name outside it. Errors are ``ERROR:`` lines, as pip's.
KERNEL_WHEELS = r"""
import os, sys
folder, target = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
sys.path.insert(0, os.path.join(folder, "installer.zip"))
import installer
from installer.destinations import SchemeDictionaryDestination
from installer.sources import WheelFile

class Destination(SchemeDictionaryDestination):
    def write_to_fs(self, scheme, path, stream, is_executable):
        root = os.path.abspath(self.scheme_dict[scheme])
        if os.path.commonpath([root, os.path.abspath(os.path.join(root, path))]) != root:
            raise ValueError("%s would be written outside %s" % (path, root))
        return super().write_to_fs(scheme, path, stream, is_executable)

os.chdir(folder)
for name in sorted(n for n in os.listdir(".") if n.endswith(".whl")):
    try:
        with WheelFile.open(name) as source:
            source.validate_record(validate_contents=True)
            scheme = {"purelib": target, "platlib": target, "scripts": os.path.join(target, "bin"),
                      "data": os.path.join(target, "data"), "headers": os.path.join(target, "include")}
            destination = Destination(scheme, interpreter=sys.executable, script_kind="posix")
            installer.install(source, destination, additional_metadata={"INSTALLER": b"mainsdk\n"})
    except Exception as exc:
        for line in getattr(exc, "issues", None) or ["%s: %s" % (name, str(exc) or type(exc).__name__)]:
            print("ERROR: " + line, file=sys.stderr)
        sys.exit(1)
"""

# Installs the uploaded kernel wheels offline into ``KERNEL`` (``$2``) with the box's ``python3``, compiled for it
# on every CPU (the sandbox user imports from there at every kernel start, 0.3 s with bytecode and 0.7 s without
# on the authoring host, and cannot write bytecode next to it), readable by
# all; as root through ``sudo -n`` where the user cannot write the folder's parent. Into a fresh folder renamed
# into place: a failed install leaves no half set; a box that has the set (a session another worker opened) keeps
# it. $0 is the wheel folder (removed after), $1 the installing script (``KERNEL_WHEELS``); nothing else is given.
KERNEL_INSTALL = (
    "dir=$0 script=$1 target=$2; umask 022\n"
    'py=$(command -v python3) || { echo "mainsdk: no python3 in the sandbox" >&2; exit 127; }\n'
    'if [ -d "$target" ]; then command -p rm -rf -- "$dir"; exit 0; fi\n'
    'parent=${target%/*}; if mkdir -p "$parent" 2>/dev/null && [ -w "$parent" ]; then as=; else as="sudo -n"; fi\n'
    '$as mkdir -p -- "$parent" && $as rm -rf -- "$target.new" && $as "$py" -I -c "$script" "$dir" "$target.new" && '
    '$as "$py" -I -m compileall -q -j 0 "$target.new" >/dev/null && $as chmod -R a+rX,go-w "$target.new" && '
    '$as mv -T -- "$target.new" "$target"; r=$?\n'
    '$as rm -rf -- "$target.new"; command -p rm -rf -- "$dir"; exit $r\n'
)


def kernel_python_problem(box_python: BoxPython) -> str | None:
    """Why ``box_python`` cannot run the kernel's IPython, or None when it can."""
    major, minor = (int(part) for part in box_python.version.split("."))
    if (major, minor) >= KERNEL_PYTHON and box_python.implementation == "cpython":
        return None
    return (
        f"{box_python.describe()} cannot run the cells' IPython (ipython 9 needs CPython >= 3.11): choose an image "
        f"whose python3 is 3.11 or later ({NO_PYTHON_ADVICE})"
    )
