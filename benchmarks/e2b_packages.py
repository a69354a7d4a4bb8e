"""Packages on the E2B driver, the parts that can be timed here: the app-side wheel fetch and the offline install.

- the first fetch of a set into an empty wheelhouse (the app's pip, for the box's python: ``Wheelhouse.ensure``),
  then the same set asked again (what every later run pays: a manifest read, no pip);
- the box's offline install (``packages.install_line``: a venv, ``pip install --no-index --no-deps``), run on
  this host's ``python3`` as the stand-in box, once per round into a fresh folder: what each box with packages
  spends before the code runs (a live box's own speed is unverified; see the driver's README).

The requests a run costs are counted by ``mainsdk_e2b/tests/test_packages.py``, not here.

    python benchmarks/e2b_packages.py [--pins iniconfig==2.0.0] [--rounds 3]

``--pins`` with the tutorial's chart set (pandas, matplotlib and their pinned dependencies) measures its 55 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from mainsdk_driverkit.wheelhouse import Wheelhouse
from mainsdk_e2b.packages import ENV, PROBE, WHEELS, BoxPython, install_line

BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def probe_here() -> BoxPython:
    """This host's ``python3`` as the driver's probe reads a box's."""
    out = subprocess.run(
        ["python3", "-E", "-s", "-c", PROBE], capture_output=True, text=True, check=True, env={"PATH": BASE_PATH}
    )
    return BoxPython.from_probe(out.stdout)


def install_once(wheels: list[Path], root: Path) -> float:
    """The box's install line, with its /tmp paths moved under ``root``; seconds it took."""
    (root / "wheels").mkdir(parents=True)
    for wheel in wheels:
        shutil.copy(wheel, root / "wheels" / wheel.name)
    line = install_line([w.name for w in wheels]).replace(WHEELS, str(root / "wheels")).replace(ENV, str(root / "env"))
    started = time.perf_counter()
    subprocess.run(["bash", "-c", line], check=True, env={"PATH": BASE_PATH})
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pins", nargs="+", default=["iniconfig==2.0.0"])
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    python = probe_here()
    with tempfile.TemporaryDirectory(prefix="e2b-packages-") as temp:
        house = Wheelhouse(os.path.join(temp, "wheelhouses"))
        started = time.perf_counter()
        wheels = house.ensure(python, options.pins).paths
        first = time.perf_counter() - started
        cached = []
        for _ in range(max(options.rounds, 1) * 10):
            started = time.perf_counter()
            house.ensure(python, options.pins)
            cached.append(time.perf_counter() - started)
        size = sum(w.stat().st_size for w in wheels)
        installs = [install_once(wheels, Path(temp) / f"box-{n}") for n in range(options.rounds)]
    print(
        json.dumps(
            {
                "box_python": python.describe(),
                "pins": options.pins,
                "wheels": len(wheels),
                "wheel_mb": round(size / 1e6, 1),
                "first_fetch_s": round(first, 2),
                "cached_fetch_ms": round(statistics.median(cached) * 1000, 3),
                "install_s_median": round(statistics.median(installs), 2),
                "install_s_each": [round(t, 2) for t in installs],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
