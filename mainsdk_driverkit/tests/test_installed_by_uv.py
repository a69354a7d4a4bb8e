"""A made wheel does not depend on the installer: the same distribution installed by pip and by uv makes the
same bytes, so the kernel's set (and a cassette's digest of its upload) is the same in an app set up either way.

Both installers are real (uv is a test dependency of this env), each installing the env's own attrs from the
index into a folder of its own.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from mainsdk_driverkit.installed import make_wheel

PIN = f"attrs=={metadata.version('attrs')}"


def installed_by(install: list[str], target: Path) -> tuple[str, tuple[str, bytes]]:
    """What ``install`` wrote as its INSTALLER, and the wheel made from ``PIN`` as it put it into ``target``."""
    subprocess.run([*install, "--no-deps", "--target", str(target), PIN], check=True, capture_output=True)
    [info] = target.glob("attrs-*.dist-info")
    return (info / "INSTALLER").read_text().strip(), make_wheel(metadata.Distribution.at(info))


def test_pip_and_uv_installs_make_the_same_wheel(tmp_path: Path) -> None:
    uv = shutil.which("uv", path=str(Path(sys.executable).parent))
    assert uv is not None, "uv is a test dependency of this env (tox.ini's driverkit env installs it)"
    pip, by_pip = installed_by([sys.executable, "-m", "pip", "install", "--quiet"], tmp_path / "pip")
    uv_said, by_uv = installed_by([uv, "pip", "install", "--quiet", "--python", sys.executable], tmp_path / "uv")
    assert (pip, uv_said) == ("pip", "uv")  # each installer really installed it, and said so
    assert by_pip == by_uv
