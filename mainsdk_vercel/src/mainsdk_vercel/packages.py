"""Python packages for a Vercel sandbox, without widening its network: wheels fetched on the app side.

The sandbox's network stays what the run was given (often nothing). Instead:

1. The box's Python is asked once per driver and image (``PROBE``: version, ABI, machine, glibc).
2. ``pip download --only-binary=:all:`` fetches the pinned set and its dependencies, for that platform and
   Python, with the app's own network and index, into a content-addressed wheelhouse on the app's side
   (``mainsdk.wheelhouse``, shared with the E2B driver: ``$XDG_CACHE_HOME/mainsdk/wheels/<sha256>``), reused
   by every later box of the same set.
3. The wheels go up in the one ``fs/write`` the box's files already use, and are unpacked offline into the
   box's Python with its standard library alone (``INSTALL``, ``UNPACK``: the image's Python may have no
   pip), once per box: a session's later commands and cells find them installed.

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

# Unpacks the uploaded wheels into the box's ``python3``, with nothing but its standard library: the image's
# Python may have no pip. Vercel's default image (``vercel/sandbox/universal``, github vercel/sandbox
# ``images/universal/Dockerfile``: Ubuntu with python3.14 and python3-pip) has one, but the legacy runtimes are
# Amazon Linux 2023 (docs "System Specifications"), whose system python3 ships without pip, and an image named by
# ``sandbox.vercel.runtime`` may have none. The set is exactly what pip resolved on the app's side for this
# Python and platform (dependencies included), so installing is unpacking (the wheel format, PEP 427 and the
# binary distribution format spec): each file checked against the wheel's RECORD (sha256), ``.data/`` trees to
# their sysconfig paths, ``#!python`` scripts pointed at this Python, console scripts from ``entry_points.txt``,
# and an INSTALLER file. Names must be plain relative paths. Errors are ``ERROR:`` lines, as pip's, for the
# 0001 that quotes them. Written for Python 3.8 and later (Amazon Linux 2023's python3 is 3.9).
#   argv: the wheel folder, then the pins (each must have its wheel in the folder)
UNPACK = r"""
import base64, configparser, hashlib, os, re, sys, sysconfig, zipfile

def fail(message):
    print("ERROR: " + message, file=sys.stderr)
    sys.exit(1)

def key(name):
    return re.sub(r"[-_.]+", "_", name).lower()

folder, pins = sys.argv[1], sys.argv[2:]
paths = sysconfig.get_paths()
wheels = sorted(n for n in os.listdir(folder) if n.endswith(".whl"))
have = {(key(n.split("-")[0]), n.split("-")[1]) for n in wheels}
for pin in pins:
    name, _, version = pin.partition("==")
    if (key(name), version) not in have:
        fail("no wheel for %s among the wheels fetched for this sandbox" % pin)
for wheel in wheels:
    with zipfile.ZipFile(os.path.join(folder, wheel)) as archive:
        infos = [i for i in archive.infolist() if not i.filename.endswith("/")]
        info_dirs = {i.filename.split("/")[0] for i in infos if re.match(r"[^/]+\.dist-info/WHEEL$", i.filename)}
        if len(info_dirs) != 1:
            fail("%s: not a wheel (no one .dist-info/WHEEL)" % wheel)
        dist_info = info_dirs.pop()
        meta = archive.read(dist_info + "/WHEEL").decode("utf-8")
        pure = re.search(r"(?im)^Root-Is-Purelib:\s*true\s*$", meta) is not None
        root = paths["purelib"] if pure else paths["platlib"]
        record = {}
        for line in archive.read(dist_info + "/RECORD").decode("utf-8").splitlines():
            parts = line.rsplit(",", 2)
            if len(parts) == 3 and parts[1].startswith("sha256="):
                record[parts[0]] = parts[1][len("sha256="):]
        data_dir = dist_info[: -len(".dist-info")] + ".data/"
        for info in infos:
            name = info.filename
            parts = name.split("/")
            if name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts):
                fail("%s: %r is not a plain relative name" % (wheel, name))
            data = archive.read(info)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if name != dist_info + "/RECORD" and record.get(name) != digest:
                fail("%s: %s does not match the wheel's RECORD" % (wheel, name))
            base, rest, script = root, name, False
            if name.startswith(data_dir):
                kind, _, rest = name[len(data_dir):].partition("/")
                if kind == "headers":
                    base = os.path.join(paths["include"], dist_info.split("-")[0])
                elif kind in ("purelib", "platlib", "scripts", "data"):
                    base = paths[kind]
                else:
                    fail("%s: unknown data folder %r" % (wheel, kind))
                script = kind == "scripts"
            target = os.path.join(base, rest)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if script and data.startswith(b"#!python"):
                data = b"#!" + sys.executable.encode() + data[len(b"#!python"):]
            with open(target, "wb") as out:
                out.write(data)
            mode = (info.external_attr >> 16) & 0o777
            os.chmod(target, 0o755 if script or mode & 0o111 else 0o644)
        with open(os.path.join(root, dist_info, "INSTALLER"), "w") as out:
            out.write("mainsdk\n")
        if dist_info + "/entry_points.txt" in archive.namelist():
            points = configparser.ConfigParser(interpolation=None, delimiters=("=",))
            points.optionxform = str
            points.read_string(archive.read(dist_info + "/entry_points.txt").decode("utf-8"))
            for section in ("console_scripts", "gui_scripts"):
                for command, target_spec in (points.items(section) if points.has_section(section) else []):
                    module, _, attr = target_spec.strip().partition(":")
                    attr = attr.split("[")[0].strip()
                    head = attr.split(".")[0] if attr else None
                    call = ("%s()" % attr) if attr else "None"
                    body = "#!%s\nimport sys\n%s\nsys.exit(%s)\n" % (
                        sys.executable,
                        ("from %s import %s" % (module.strip(), head)) if head else "import %s" % module.strip(),
                        call,
                    )
                    script_path = os.path.join(paths["scripts"], command.strip())
                    os.makedirs(paths["scripts"], exist_ok=True)
                    with open(script_path, "w") as out:
                        out.write(body)
                    os.chmod(script_path, 0o755)
"""

# Installs the uploaded wheels offline, as the box's own ``python3`` sees them (``-E -s`` runs included):
# into its site-packages, with ``sudo -n`` where the sandbox user cannot write there (Vercel's images run
# code with passwordless sudo: docs "System Specifications"; vercel/sandbox ``images/ubuntu/Dockerfile``).
# No index, no network, no pip. Nothing a caller gives is spliced in: $0 is the wheel folder, $1 the
# unpacker (``UNPACK``), the rest are the pins.
INSTALL = (
    "dir=$0 unpack=$1; shift; "
    'py=$(command -v python3) || { echo "mainsdk: no python3 in the sandbox" >&2; exit 127; }\n'
    'if "$py" -I -c "import os, sys, sysconfig; sys.exit(0 if all(os.access(sysconfig.get_path(k), os.W_OK) '
    "for k in ('purelib', 'platlib', 'scripts')) else 1)\"; then as=; else as=\"command -p sudo -n\"; fi\n"
    '$as "$py" -I -c "$unpack" "$dir" "$@" || exit $?\n'
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
