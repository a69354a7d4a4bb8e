"""Packages on the Vercel driver, the parts that can be timed here: app-side fetch, the upload's tar, the install.

- the first fetch of a set into an empty wheelhouse (the app's pip for the box's Python: ``Wheelhouse.ensure``),
  then the same set asked again (what every later box pays: a manifest read, no pip);
- the one ``fs/write`` body the wheels ride in (``driver._targz`` at gzip level 1): its size and build time;
- the box's offline install (``packages.INSTALL`` running ``INSTALL_WHEELS``: pypa's installer, shipped as
  ``installer_zip``), run by this host's python in a fresh venv without pip (as the stand-in's sandboxes), once
  per round: what each box with packages spends before the code runs. A live Vercel box's own speed is
  unverified (see the driver's README).

The requests a run costs are counted by ``mainsdk_vercel/tests/test_packages.py``, not here.

    python benchmarks/vercel_packages.py [--pins six==1.16.0] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mainsdk_driverkit.wheelhouse import Wheelhouse, WheelSet
from mainsdk_vercel.driver import _targz
from mainsdk_vercel.packages import INSTALL, INSTALL_WHEELS, INSTALLER_ZIP, PROBE, BoxPython, installer_zip


def box_python(root: Path) -> Path:
    """A fresh venv standing for the box's python3: no packages, no pip (as the stand-in's sandboxes)."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    return venv / "bin"


def install_once(wheels: WheelSet, root: Path) -> float:
    """``INSTALL`` into a fresh stand-in box under ``root``; seconds it took."""
    bin_dir = box_python(root)
    folder = root / "wheels"
    folder.mkdir()
    for name, data in wheels.read().items():
        (folder / name).write_bytes(data)
    (folder / INSTALLER_ZIP).write_bytes(installer_zip())  # uploaded with the wheels, as the driver does
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    started = time.perf_counter()
    subprocess.run(["bash", "-c", INSTALL, str(folder), INSTALL_WHEELS, *wheels.pins], check=True, env=env)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pins", nargs="+", default=["six==1.16.0"])
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    said = subprocess.run([sys.executable, "-I", "-c", PROBE], capture_output=True, text=True, check=True).stdout
    python = BoxPython.parse(said)
    with tempfile.TemporaryDirectory(prefix="vercel-packages-") as temp:
        house = Wheelhouse(os.path.join(temp, "wheels"))
        started = time.perf_counter()
        wheels = house.ensure(python, options.pins)
        first = time.perf_counter() - started
        cached = []
        for _ in range(100):
            started = time.perf_counter()
            house.ensure(python, options.pins)
            cached.append(time.perf_counter() - started)
        data = wheels.read()
        started = time.perf_counter()
        upload = {f".mainsdk/wheels-x/{name}": blob for name, blob in data.items()}
        upload[f".mainsdk/wheels-x/{INSTALLER_ZIP}"] = installer_zip()
        body = _targz(upload, (), 1)
        tar_seconds = time.perf_counter() - started
        installs = [install_once(wheels, Path(temp) / f"box-{n}") for n in range(options.rounds)]
    print(
        json.dumps(
            {
                "pins": options.pins,
                "python": f"{python.version} {python.machine} glibc {python.glibc}",
                "wheels": len(data),
                "wheel_bytes": sum(len(blob) for blob in data.values()),
                "upload_bytes": len(body),
                "first_fetch_s": round(first, 2),
                "cached_ensure_ms_median": round(statistics.median(cached) * 1000, 3),
                "upload_tar_s": round(tar_seconds, 3),
                "install_s_median": round(statistics.median(installs), 2),
                "install_s_all": [round(s, 2) for s in installs],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
