"""Packages on E2B: wheels fetched on the app side for the box's python, uploaded once, installed offline.

Each scenario below runs the real driver through the real e2b SDK. The tests replay it from cassettes in
``cassettes/packages/``; ``authoring/packages.py`` records the very same scenarios against ``fake_e2b.py``,
where the probe, pip's offline install and the code really ran. The wheels themselves come from the app's
package index at test time (pip download, cached in pytest's cache folder), as they would on a live account:
a cassette keeps each uploaded wheel as its sha256, so a wheel that is not byte for byte the one recorded
fails the replay.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from e2b_replay import KEY, key, provider
from mainsdk import AsyncSandbox, Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config_text
from mainsdk.driver import KERNEL_PACKAGES
from mainsdk.errors import INVALID_OPTION
from mainsdk.rich import CHART_MIME, DATAFRAME_MIME, Display
from mainsdk_conformance.replay import ReplayServer
from mainsdk_driverkit.wheelhouse import Wheelhouse
from mainsdk_e2b.driver import E2BBox
from mainsdk_e2b.packages import KERNEL, BoxPython, kernel_python_problem

from mainsdk_e2b import e2b_sandbox_driver

HERE = Path(__file__).parent
CASSETTES = HERE / "cassettes" / "packages"
# A tiny pure-Python wheel this module makes (``made_wheel``) and serves from a find-links folder
# (``offline_index``); the kernel's set that a session's first cell installs comes from the index (its cache).
MADE = "mainsdk-e2b-made==1.0"
# The tutorial's chart needs pandas and matplotlib; every dependency is pinned too, so the set pip resolves (and
# the wheels a cassette holds the digests of) stays the same when a dependency makes a new release.
CHART_PINS = (
    "pandas==2.2.3", "matplotlib==3.9.2", "numpy==2.2.6", "python-dateutil==4.0.0", "pytz==2026.6",
    "tzdata==2026.6", "contourpy==1.3.2", "cycler==0.12.1", "fonttools==4.68.0", "kiwisolver==1.5.1",
    "packaging==26.4", "pillow==12.2.0", "pyparsing==3.3.3",
)  # fmt: skip
CHART = """
import pandas as pd
import matplotlib.pyplot as plt

df = pd.read_csv("data.csv")
df.plot.bar(x="item", y="count")
plt.savefig("../out/chart.png")
print(len(df))
"""
CSV = "item,count\na,1\nb,2\nc,3\n"
PNG = b"\x89PNG\r\n\x1a\n"


def made_wheel(folder: Path) -> Path:
    """``mainsdk_e2b_made-1.0-py3-none-any.whl`` in ``folder``: the same bytes every time (stored, fixed times).

    A cassette keeps the uploaded wheel's bytes, so the wheel must not change between authoring and replay.
    """
    dist = "mainsdk_e2b_made-1.0.dist-info"
    files = {
        "mainsdk_e2b_made/__init__.py": b'NAME = "Made"\n',
        f"{dist}/METADATA": b"Metadata-Version: 2.1\nName: mainsdk-e2b-made\nVersion: 1.0\n",
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for name, data in files.items()
    )
    files[f"{dist}/RECORD"] = (record + f"{dist}/RECORD,,\n").encode()
    path = folder / "mainsdk_e2b_made-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return path


def offline_index(folder: Path) -> dict[str, str]:
    """Make ``made_wheel`` in ``folder``; the pip settings that take wheels from there as well as the index.

    These are the app's explicit index settings (environment variables), which the wheelhouse's pip honours.
    The index stays on: a session's first cell installs the kernel's set (IPython), whose wheels come from it.
    """
    folder.mkdir(parents=True, exist_ok=True)
    made_wheel(folder)
    return {"PIP_FIND_LINKS": str(folder)}


def sandbox_on(server: ReplayServer, pins: Sequence[str], wheels: Path, key: str = KEY) -> Sandbox:
    """A ``Sandbox`` whose e2b driver talks to ``server`` and keeps its wheels in ``wheels``."""
    listed = ", ".join(pins)
    config = load_config_text(f"sandbox: {{driver: e2b, limits: {{timeout: 60s}}, packages: {{python: [{listed}]}}}}\n")
    driver = e2b_sandbox_driver(
        api_key=key, api_url=server.url("api"), sandbox_url=server.url("sandbox"), wheelhouse=Wheelhouse(str(wheels))
    )
    return Sandbox(SandboxDeps(config=config, driver=driver))


def requests_of(server: ReplayServer, action: Any) -> tuple[Any, int]:
    """What ``action()`` returned, and how many requests it sent."""
    before = len(server.received)
    result = action()
    return result, len(server.received) - before


def runs_and_a_session(server: ReplayServer, wheels: Path, key: str = KEY) -> dict[str, Any]:
    """A fresh driver: two runs with the made wheel, one without, then a session's command and two cells, counted."""
    sandbox = sandbox_on(server, [MADE], wheels, key)
    seen: dict[str, Any] = {}
    try:
        code = "import mainsdk_e2b_made\nprint(mainsdk_e2b_made.NAME)"
        seen["first"] = requests_of(server, lambda: sandbox.run(code))
        seen["second"] = requests_of(server, lambda: sandbox.run(code))
        seen["without"] = requests_of(server, lambda: sandbox.run("import mainsdk_e2b_made", packages=[]))
        session, seen["session_open"] = requests_of(server, sandbox.create)
        with session:
            args = ["-c", "import mainsdk_e2b_made; print(mainsdk_e2b_made.NAME)"]
            seen["session_command"] = requests_of(server, lambda: session.run("python3", args))
            seen["first_cell"] = requests_of(server, lambda: session.run_code("import mainsdk_e2b_made"))
            seen["second_cell"] = requests_of(server, lambda: session.run_code("mainsdk_e2b_made.NAME"))
    finally:
        sandbox.close()
    return seen


def the_tutorial_chart(server: ReplayServer, wheels: Path, key: str = KEY) -> dict[str, Any]:
    """The tutorial's chart with pandas and matplotlib, as a one-shot run and as cells; the PNGs' bytes."""
    sandbox = sandbox_on(server, CHART_PINS, wheels, key)
    seen: dict[str, Any] = {}
    try:
        result, seen["run_requests"] = requests_of(server, lambda: sandbox.run(CHART, files={"data.csv": CSV}))
        seen["run"] = (result.exit_code, result.stdout, result.stderr)
        seen["run_files"] = {ref.name: sandbox.files.read(ref) for ref in result.files}
        # The figure the code left open comes back as a rich result too (core's figures wrapper, no code change).
        seen["run_pngs"] = [
            r.bytes() if r.file is None else sandbox.files.read(r.file) for r in result.results if r.mime == "image/png"
        ]
        with sandbox.create() as session:
            session.write("data.csv", CSV)
            loaded = session.run_code("import pandas as pd\ndf = pd.read_csv('data.csv')\nlen(df)")
            drawn = session.run_code("df.plot.bar(x='item', y='count');")
            # The tutorial's chart as a cell, and display(df): every display with all its forms (core's kernel).
            charted = session.run_code(TUTORIAL_CELL)
            framed = session.run_code("display(df)")
            seen["chart_cell"] = [forms_of(sandbox, d) for d in charted.displays], charted.error, charted.stderr
            seen["frame_cell"] = [forms_of(sandbox, d) for d in framed.displays], framed.error, framed.stderr
        seen["cells"] = (loaded.text, loaded.error, drawn.error)
        seen["cell_pngs"] = [
            r.bytes() if r.file is None else sandbox.files.read(r.file) for r in drawn.results if r.mime == "image/png"
        ]
    finally:
        sandbox.close()
    return seen


# The tutorial's chart as a cell (mainsdk_local/tests/test_cell_forms.py asserts the same forms on local).
TUTORIAL_CELL = """
import pandas as pd
import matplotlib.pyplot as plt

df = pd.read_csv("data.csv")
df.plot.bar(x="item", y="count", title="Counts")
plt.show()
"""


def forms_of(sandbox: Sandbox, display: Display) -> dict[str, Any]:
    """Each form of ``display`` by its MIME type, as bytes or text (a form kept as a file is read back)."""
    return {form.mime: form.data if form.file is None else sandbox.files.read(form.file) for form in display.forms}


def a_set_that_cannot_be_resolved(server: ReplayServer, wheels: Path, key: str = KEY) -> dict[str, Any]:
    """A fresh driver asked for a package no index has: the error, and the requests it cost."""
    sandbox = sandbox_on(server, [MADE, "doesnotexist-xyz==1.0"], wheels, key)
    try:
        with pytest.raises(SandboxError) as caught:
            sandbox.run("print('ran')")
    finally:
        sandbox.close()
    return {"error": caught.value, "requests": len(server.received)}


# What a session's own python finds of IPython: nothing, the kernel's set being in a folder of its own.
FIND_IPYTHON = "import importlib.util; print(importlib.util.find_spec('IPython'))"


def kernel_cell(site: str) -> str:
    """A cell that imports IPython from ``site`` and asks whether it runs in that IPython's shell (the kernel's).

    The cell runs inside the kernel's IPython already: a nested ``run_cell`` would display its own result."""
    return (
        f"import sys\nsys.path.append({site!r})\nimport IPython\n"
        "shell = IPython.get_ipython()\n"
        "(IPython.__version__, IPython.__file__, isinstance(shell, IPython.core.interactiveshell.InteractiveShell))"
    )


def the_cell_kernels_packages(server: ReplayServer, wheels: Path, key: str = KEY) -> dict[str, Any]:
    """Two sessions of one driver, no ``sandbox.packages``: each box gets the kernel's set, fetched once."""

    async def scenario() -> dict[str, Any]:
        config = load_config_text("sandbox: {driver: e2b, limits: {timeout: 60s}}\n")
        house = Wheelhouse(str(wheels))
        driver = e2b_sandbox_driver(
            api_key=key, api_url=server.url("api"), sandbox_url=server.url("sandbox"), wheelhouse=house
        )
        sandbox = AsyncSandbox(SandboxDeps(config=config, driver=driver))
        seen: dict[str, Any] = {"downloads_before": house.downloads}
        try:
            for name in ("first", "second"):
                async with await sandbox.create() as session:
                    box = session._runtime.opened.box
                    assert isinstance(box, E2BBox)
                    before = len(server.received)
                    site = await driver.mainsdk_driver_kernel_site(box=box, language="python")
                    sent = [(r.method, r.path) for r in server.received[before:]]
                    before = len(server.received)
                    again = await driver.mainsdk_driver_kernel_site(box=box, language="python")
                    bash = await driver.mainsdk_driver_kernel_site(box=box, language="bash")
                    seen[f"{name}_again"] = (again, bash, len(server.received) - before)
                    user = await session.run("python3", ["-c", FIND_IPYTHON])
                    cell = await session.run_code(kernel_cell(str(site)))
                    seen[name] = {"site": site, "sent": sent, "user": user.stdout, "cell": (cell.text, cell.error)}
                    seen[f"{name}_downloads"] = house.downloads
        finally:
            await sandbox.aclose()
        return seen

    return asyncio.run(scenario())


def index_answers(url: str) -> bool:
    """Whether the package index at ``url`` (a simple index) answers at all, within a few seconds."""
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except (OSError, ValueError):
        return False


@pytest.fixture
def chart_wheels(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The chart's wheelhouse: pandas and matplotlib, the one set whose wheels cannot be made here (55 MB)."""
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple/")
    if not index_answers(index.rstrip("/") + "/pandas/"):
        host = urllib.parse.urlsplit(index).hostname or index.split(":", 1)[0]  # never a token the URL may hold
        pytest.skip(f"the package index on {host} does not answer here: the chart's 13 wheels (55 MB) come from it")
    cache = getattr(request.config, "cache", None)  # downloaded once per checkout, as an app keeps its cache
    return Path(cache.mkdir("mainsdk-e2b-wheelhouses")) if cache is not None else tmp_path


@pytest.fixture
def kernel_wheels(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The kernel's wheelhouse: IPython, its dependencies and pip, made from this environment's installed
    distributions (the driver depends on them), never from an index."""
    cache = getattr(request.config, "cache", None)  # downloaded once per checkout, as an app keeps its cache
    return Path(cache.mkdir("mainsdk-e2b-kernel-wheelhouses")) if cache is not None else tmp_path


@pytest.fixture
def made(kernel_wheels: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The kernel's wheelhouse (a session's first cell installs IPython), whose pip also finds the made wheel in a
    folder of this test. The made set may be cached there too: its bytes are the same on every run."""
    for name, value in offline_index(tmp_path / "find-links").items():
        monkeypatch.setenv(name, value)
    return kernel_wheels


def test_a_run_gets_its_packages_and_what_it_costs_in_requests(made: Path) -> None:
    wheels = made
    with provider("runs_and_a_session") as server:
        seen = runs_and_a_session(server, wheels, key())
    assert server.problems(final=True) == []
    first, second, without = (seen[k][0] for k in ("first", "second", "without"))
    assert [(r.exit_code, r.stdout) for r in (first, second)] == [(0, "Made\n")] * 2
    assert without.exit_code == 1 and "No module named 'mainsdk_e2b_made'" in without.stderr  # none asked, none
    # create, probe (once per template), upload, install, start, out/'s archive, kill; then the probe is known.
    assert (seen["first"][1], seen["second"][1], seen["without"][1]) == (7, 6, 4)
    # A session installs once (create, upload, install); its commands and cells then cost what they cost without.
    assert seen["session_open"] == 3
    assert seen["session_command"][0].stdout == "Made\n" and seen["session_command"][1] == 1
    # The kernel's set (upload, install: the box's first cell only), the kernel's input, its start, the cell.
    assert seen["first_cell"][0].ok and seen["first_cell"][1] == 5
    assert seen["second_cell"][0].text == "'Made'" and seen["second_cell"][1] == 1
    uploads = [r for r in server.received if r.method == "POST" and r.path == "/files"]
    assert uploads  # the wheels went up with the work files: counted above as one request per box


def test_the_tutorial_chart_with_pandas_and_matplotlib_returns_a_png(chart_wheels: Path) -> None:
    with provider("the_tutorial_chart") as server:
        seen = the_tutorial_chart(server, chart_wheels, key())
    assert server.problems(final=True) == []
    assert seen["run"][:2] == (0, "3\n"), seen["run"][2]
    assert seen["run_files"]["chart.png"].startswith(PNG)
    assert len(seen["run_pngs"]) == 1 and seen["run_pngs"][0].startswith(PNG)  # RunResult.results, one-shot
    # create, probe, a refresh (the 55 MB upload's deadline outlasts the run's sandbox: transfer.py), upload
    # (data.csv and 13 wheels), install, start, out/, kill
    assert seen["run_requests"] == 8
    assert seen["cells"] == ("3", None, None)
    assert len(seen["cell_pngs"]) == 1 and seen["cell_pngs"][0].startswith(PNG)
    [figure], error, stderr = seen["chart_cell"]
    assert error is None and stderr == "", (error, stderr)
    assert set(figure) == {"image/png", "text/plain", CHART_MIME}
    assert figure["image/png"].startswith(PNG) and figure["text/plain"] == "<Figure size 640x480 with 1 Axes>"
    chart = json.loads(figure[CHART_MIME])
    assert (chart["type"], chart["title"], chart["x_label"], chart["y_label"]) == ("bar", "Counts", "item", None)
    assert chart["elements"] == [
        {"label": "a", "group": "count", "value": 1.0},
        {"label": "b", "group": "count", "value": 2.0},
        {"label": "c", "group": "count", "value": 3.0},
    ]
    [frame], error, stderr = seen["frame_cell"]
    assert error is None and stderr == "", (error, stderr)
    assert set(frame) == {"text/html", "text/plain", DATAFRAME_MIME}
    assert "<table" in frame["text/html"] and frame["text/plain"].split() == [
        "item", "count", "0", "a", "1", "1", "b", "2", "2", "c", "3",
    ]  # fmt: skip
    assert json.loads(frame[DATAFRAME_MIME]) == {
        "columns": ["item", "count"],
        "index": [0, 1, 2],
        "data": {"item": ["a", "b", "c"], "count": [1, 2, 3]},
        "dtypes": {"item": "object", "count": "int64"},
        "shape": [3, 2],
        "truncated": False,
    }


def test_a_set_that_cannot_be_resolved_is_one_0001_naming_the_package_before_any_code_runs(made: Path) -> None:
    with provider("a_set_that_cannot_be_resolved") as server:
        seen = a_set_that_cannot_be_resolved(server, made, key())
    assert server.problems(final=True) == []
    error = seen["error"]
    assert error.code == INVALID_OPTION and error.ran is False
    assert "doesnotexist-xyz==1.0" in error.message and MADE not in error.message
    assert "pip said: ERROR" in error.message
    assert seen["requests"] == 3  # create, the probe, the kill: the code never started


def test_each_session_gets_the_kernels_ipython_in_a_folder_of_its_own_from_wheels_fetched_once(
    kernel_wheels: Path,
) -> None:
    with provider("the_cell_kernels_packages") as server:
        seen = the_cell_kernels_packages(server, kernel_wheels, key())
    assert server.problems(final=True) == []
    for name in ("first", "second"):
        box = seen[name]
        assert box["site"] == KERNEL
        # One box, one set: the probe (the template's python, first box only), the wheels' upload, the install.
        probe = [("POST", "/process.Process/Start")] if name == "first" else []
        assert box["sent"] == [*probe, ("POST", "/files"), ("POST", "/process.Process/Start")], box["sent"]
        assert seen[f"{name}_again"] == (KERNEL, None, 0)  # a restart's call: the box's answer, no request
        assert box["user"] == "None\n"  # the session's own python has no IPython: the set is apart from it
        text, error = box["cell"]
        assert error is None, error
        assert text == repr(("9.18.1", f"{KERNEL}/IPython/__init__.py", True))
    # The wheels were fetched at most once (none when this checkout's cache had them), uploaded to each box.
    assert seen["second_downloads"] == seen["first_downloads"] <= seen["downloads_before"] + 1
    # Both uploads are the same wheels (the cassette keeps each by its sha256; replay matched them part by part).
    data = json.loads((CASSETTES / "the_cell_kernels_packages.json").read_text())
    uploads = [i["request"]["body"] for i in data["interactions"] if i["request"]["path"] == "/files"]
    assert len(uploads) == 2 and uploads[0] == uploads[1]


def test_a_box_python_older_than_3_11_cannot_take_the_kernels_set() -> None:
    old = BoxPython.from_probe(
        '{"implementation": "cpython", "version": [3, 10], "free_threaded": false, "libc": "glibc 2.36",'
        ' "machine": "x86_64"}'
    )
    problem = kernel_python_problem(old)
    assert problem is not None and "python 3.10" in problem and "3.11" in problem and "sandbox.e2b.template" in problem
    assert kernel_python_problem(attrs.evolve(old, version="3.11", abi="cp311")) is None


def test_the_box_python_is_read_from_the_probe_and_odd_boxes_are_refused() -> None:
    probe = '{"implementation": "cpython", "version": [3, 11], "free_threaded": false, "libc": "glibc 2.36",'
    found = BoxPython.from_probe(probe + ' "machine": "x86_64"}\n')
    assert (found.version, found.abi) == ("3.11", "cp311")
    assert found.platforms[:2] == ("manylinux_2_36_x86_64", "manylinux_2_35_x86_64")
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"} <= set(found.platforms)
    for odd in (
        '{"implementation": "pypy", "version": [3, 10], "libc": "glibc 2.36", "machine": "x86_64"}',
        '{"implementation": "cpython", "version": [3, 12], "libc": null, "machine": "x86_64"}',  # musl: no glibc
        "python3: command not found",
    ):
        with pytest.raises(ValueError):
            BoxPython.from_probe(odd)


def test_the_driver_depends_on_the_pip_its_wheelhouse_runs() -> None:
    # The app's own pip downloads the box's wheels (mainsdk_driverkit.wheelhouse); an environment made by uv has no pip
    # unless a distribution asks for it, and every run with packages was then a 0006 "install pip beside mainsdk".
    import importlib.metadata

    from packaging.requirements import Requirement

    required = {Requirement(text).name for text in importlib.metadata.requires("mainsdk-e2b") or []}
    assert "pip" in required


def test_the_driver_depends_on_the_kernels_set_exactly() -> None:
    # The kernel's IPython set comes from the app's environment (mainsdk_driverkit.installed), never an index at run
    # time: installing the driver must install exactly those versions.
    import importlib.metadata

    required = set(importlib.metadata.requires("mainsdk-e2b") or [])
    assert set(KERNEL_PACKAGES["python"]) <= required
