"""Python packages for an E2B box without widening its network: wheels fetched on the app side, installed offline.

The box's interpreter is probed once per template (its version, ABI, glibc and machine: ``PROBE``). The
app's own pip then downloads binary wheels for exactly that interpreter into the app's wheelhouse
(``mainsdk_driverkit.wheelhouse``, shared with the other remote drivers). The driver uploads the wheels with the
box's work files in one request and installs them in the box with ``--no-index --no-deps``
(``install_line``): the set was resolved on the app side, so nothing in the box asks any index, and the
sandbox keeps exactly the egress policy the run named.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence

import attrs
from mainsdk_driverkit.wheelhouse import manylinux_platforms

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
        """``the E2B box's python 3.11 (cp311, manylinux_2_36_x86_64)``, for messages."""
        return f"the E2B box's python {self.version} ({self.abi}, {self.platforms[0]})"

    def pip_target(self) -> list[str]:
        """``pip download`` options selecting wheels for this interpreter (pip adds its abi3, none and any tags)."""
        platforms = [arg for tag in self.platforms for arg in ("--platform", tag)]
        return ["--implementation", "cp", "--python-version", self.version, "--abi", self.abi, *platforms]


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


# The cell kernel's own packages (``mainsdk.driver.KERNEL_PACKAGES``): installed flat (``pip install --target``)
# into a folder of their own, apart from the user's environment (``ENV``) and never on any default sys.path;
# core puts it on the kernel's sys.path after the user's site-packages. Installed as root and left read-only to
# the box's user ("user"): that keeps a stray write (a ``pip install --target``, a file of the same name) out of
# it, and no more. It does not keep the box's own code out: every E2B template gives "user" passwordless sudo and
# makes /usr/local world-writable (e2b-dev/infra packages/orchestrator/pkg/template/build/phases/finalize/
# configure.sh: ``user ALL=(ALL:ALL) NOPASSWD: ALL``, ``chmod -R 777 /usr/local``), so code in a session can
# rewrite this IPython, or the python3 the kernel runs on, for the later cells of that session. What holds is the
# VM's wall: nothing the code changes reaches the app, another session or another box.
KERNEL = "/opt/mainsdk/kernel"
KERNEL_WHEELS = "/tmp/mainsdk-kernel-wheels"
KERNEL_PYTHON = (3, 11)  # ipython 9's Requires-Python


def kernel_python_problem(box_python: BoxPython) -> str | None:
    """Why ``box_python`` cannot run the kernel's IPython, or None when it can."""
    major, minor = (int(part) for part in box_python.version.split("."))
    if (major, minor) >= KERNEL_PYTHON:
        return None
    return (
        f"{box_python.describe()} cannot run the cells' IPython (ipython 9 needs Python >= 3.11): use an E2B "
        "template whose python3 is 3.11 or later (sandbox.e2b.template)"
    )


def kernel_install_line(wheels: Sequence[str]) -> str:
    """The box's command (as root): the kernel's wheels installed offline into ``KERNEL``, the wheels removed.

    ``--no-index --no-deps``: the set is closed and was fetched on the app side. Compiled (pip's default), so the
    box's user, who cannot write there without sudo, imports IPython from bytecode at every kernel start; readable by
    all (what that protects, and what it does not: ``KERNEL``'s comment).
    Installed into a fresh folder renamed into place, so a failed install leaves no half set; a box that has the
    set already (a session another worker opened) keeps it.
    """
    paths = " ".join(shlex.quote(f"{KERNEL_WHEELS}/{name}") for name in wheels)
    return "\n".join(
        [
            "export PIP_CONFIG_FILE=/dev/null PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "
            "PIP_ROOT_USER_ACTION=ignore",
            "umask 022",
            f"if [ -d {KERNEL} ]; then r=0; else rm -rf -- {KERNEL}.new && mkdir -p {KERNEL}.new && "
            f"python3 -E -s -m pip install --no-index --no-deps -q --target {KERNEL}.new {paths} && "
            f"chmod -R a+rX,go-w {KERNEL}.new && mv -T -- {KERNEL}.new {KERNEL}; r=$?; fi",
            f"rm -rf -- {KERNEL_WHEELS} {KERNEL}.new; exit $r",
        ]
    )
