"""Packages on Vercel: wheels fetched on the app's side, uploaded in the box's one write, installed offline.

Each test replays its cassette (``tests/cassettes/packages/``) with the real driver and a real httpx client;
the upload must match the authored one member by member (large wheels by sha256). The requests each run
costs are counted from what the replay server received: the figures README.md states.

The wheels of the small sets are made by this module (``made_wheel``: deterministic bytes, stored, with a
console script and a dependency), so those tests need no index, no network and no pip in the test
environment (``MadeWheels`` stands for the app-side download, which core's own tests cover). The chart's
pandas and matplotlib are 14 real wheels (50 MB) that no test can make: those two tests download them from
the package index with the app's pip (``mainsdk_driverkit.wheelhouse``) and say so when it cannot be reached.

Authored: ``python mainsdk_vercel/tests/conformance/author.py --packages`` runs this module against the
stand-in (``simulator.py``): pypa's installer (shipped by the driver as a zip), the box's python and the code
really ran there (the PNGs are matplotlib's own output on this machine). Recorded live as the conformance
suite's cassettes are (``--conformance-record``, ``recording.py``), which re-checks every one of them.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import hashlib
import importlib.util
import io
import os
import platform
import shutil
import socket
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from mainsdk import AsyncSandbox, Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config_text
from mainsdk.driver import KERNEL_PACKAGES
from mainsdk.errors import INVALID_OPTION
from mainsdk.rich import CHART_MIME, DATAFRAME_MIME
from mainsdk_conformance.plugin import seeded_cell_tokens
from mainsdk_driverkit.wheelhouse import Wheelhouse, WheelSet, failure_message, wheels_key
from mainsdk_vercel.driver import VercelBox
from mainsdk_vercel.packages import (
    INSTALL,
    INSTALL_WHEELS,
    INSTALLER_ZIP,
    KERNEL,
    PROBE,
    BoxPython,
    installer_zip,
    kernel_python_problem,
)
from recording import AUTHOR_ENV, OwnCassette

from mainsdk_vercel import VercelDriver

CASSETTES = Path(__file__).parent / "cassettes" / "packages"
# Set by author.py --packages to the stand-in's URL: the tests then record their cassettes through it
# (recording.py; ``--conformance-record`` records them live, as the conformance suite's).
AUTHORED_HOW = (
    "recorded with tests/test_packages.py against tests/conformance/simulator.py (written from vercel-sandbox "
    "0.10.0 and @vercel/sandbox); the box's python and pypa's installer (shipped as a zip) really ran "
    "on this machine, so outputs (and PNGs) are their own; wheel uploads are stored by sha256 and size"
)
DEMO = "mainsdk-demo==1.0"  # made here, with its dependency mainsdk-demo-dep 2.0 and a console script
TAMPERED = "mainsdk-tampered==1.0"  # made here, with a file that does not match its RECORD
# pandas and matplotlib with every dependency pinned, so the app's download (and the upload the cassette
# holds) is the same on every run: an unpinned dependency would follow the index's newest release.
CHART_PINS = [
    "pandas==2.2.3",
    "matplotlib==3.9.2",
    "numpy==2.1.3",
    "python-dateutil==2.9.0.post0",
    "pytz==2024.2",
    "tzdata==2024.2",
    "six==1.16.0",
    "contourpy==1.3.1",
    "cycler==0.12.1",
    "fonttools==4.55.0",
    "kiwisolver==1.4.7",
    "packaging==24.2",
    "pillow==11.0.0",
    "pyparsing==3.2.0",
]
CHART = """
import pandas as pd
import matplotlib.pyplot as plt

df = pd.read_csv("data.csv")
df.plot.bar(x="item", y="count")
plt.savefig("../out/chart.png")
print(len(df))
"""
DATA = "item,count\na,1\nb,2\nc,3\n"
PNG = b"\x89PNG\r\n\x1a\n"


def config(pins: list[str], timeout: str = "30s") -> str:
    listed = ", ".join(pins)
    return f"sandbox: {{driver: vercel-sandbox, limits: {{timeout: {timeout}}}, packages: {{python: [{listed}]}}}}\n"


def made_wheel(name: str, version: str, files: dict[str, str], requires: Sequence[str] = (), **extra: str) -> bytes:
    """A wheel built here, byte for byte the same on every machine (stored, fixed times and modes).

    ``extra``: ``entry_points`` (the text of entry_points.txt), ``tamper`` (a file whose RECORD hash is wrong).
    """
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    members = dict(files)
    members[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    members[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: mainsdk-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    if "entry_points" in extra:
        members[f"{info}/entry_points.txt"] = extra["entry_points"]
    record = []
    for member, text in members.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        if member == extra.get("tamper"):
            digest = base64.urlsafe_b64encode(hashlib.sha256(b"other").digest()).rstrip(b"=").decode()
        record.append(f"{member},sha256={digest},{len(text.encode())}")
    members[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_STORED) as archive:
        for member, text in members.items():
            entry = zipfile.ZipInfo(member, date_time=(2020, 1, 1, 0, 0, 0))
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, text)
    return raw.getvalue()


# The sets the made wheelhouse resolves, as pip would: a pin, then every wheel of it and its dependencies.
MADE: dict[str, dict[str, bytes]] = {
    DEMO: {
        "mainsdk_demo-1.0-py3-none-any.whl": made_wheel(
            "mainsdk-demo",
            "1.0",
            {
                "mainsdk_demo/__init__.py": "from mainsdk_demo_dep import WORD\n__version__ = '1.0'\n"
                "def main():\n    print('demo says', WORD)\n"
            },
            requires=["mainsdk-demo-dep==2.0"],
            entry_points="[console_scripts]\nmainsdk-demo = mainsdk_demo:main\n",
        ),
        "mainsdk_demo_dep-2.0-py3-none-any.whl": made_wheel(
            "mainsdk-demo-dep", "2.0", {"mainsdk_demo_dep.py": "WORD = 'hello'\n"}
        ),
    },
    TAMPERED: {
        "mainsdk_tampered-1.0-py3-none-any.whl": made_wheel(
            "mainsdk-tampered", "1.0", {"mainsdk_tampered.py": "X = 1\n"}, tamper="mainsdk_tampered.py"
        ),
    },
}


class MadeWheels:
    """The app-side wheelhouse for made wheels: ``ensure`` as ``mainsdk_driverkit.wheelhouse.Wheelhouse``'s, no pip.

    A set is written once per key into ``root`` and reused (``downloads`` counts the sets written). A pin it
    has no wheel for is the 0001 the real wheelhouse raises when pip cannot resolve it.
    """

    def __init__(self, root: Path, kernel: Wheelhouse | None = None) -> None:
        self.root = root
        self.downloads = 0
        self.kernel = kernel  # the real wheelhouse the cell kernel's set (IPython) comes from, if any

    def ensure(self, python: BoxPython, pins: Sequence[str], *, find_links: Path | None = None) -> WheelSet:
        if self.kernel is not None and tuple(pins) == KERNEL_PACKAGES["python"]:
            # A session's first cell: the real wheels, made from this environment's installed set.
            return self.kernel.ensure(python, pins, find_links=find_links)
        key = wheels_key(python, pins)
        folder = self.root / key
        wheels: dict[str, bytes] = {}
        for pin in pins:
            if pin not in MADE:
                said = f"ERROR: No matching distribution found for {pin}"
                where = f"as wheels for {python.describe()}"
                raise SandboxError(INVALID_OPTION, failure_message(pins, said, where), ran=False)
            wheels.update(MADE[pin])
        if not folder.is_dir():
            folder.mkdir(parents=True)
            for name, data in wheels.items():
                (folder / name).write_bytes(data)
            self.downloads += 1
        return WheelSet(key, folder, tuple(sorted(wheels)), tuple(pins))


class Harness:
    """A replay server on one cassette (a recorder through the stand-in, or to Vercel, when recording: ``recording``)
    and a sandbox on it."""

    def __init__(self, cassette: OwnCassette, text: str, wheelhouse: Any) -> None:
        self.cassette = cassette
        self.server = cassette.server
        self.wheelhouse = wheelhouse
        self.driver = VercelDriver(
            token=cassette.token,
            project=cassette.project,
            team=cassette.team,
            base_url=self.server.url("api"),
            wheelhouse=self.wheelhouse,
        )
        self.sandbox = Sandbox(SandboxDeps(config=load_config_text(text), driver=self.driver, load_entrypoints=False))

    def steps(self, start: int = 0) -> list[str]:
        """The requests received since ``start``: method and last path segment (``cmd`` starts a command);
        ``GET sandbox`` reads a sandbox by its name (while it is pending)."""
        return [
            "GET sandbox" if r.method == "GET" and r.path.count("/") == 3 else f"{r.method} {r.path.rsplit('/', 1)[-1]}"
            for r in self.server.received[start:]
        ]

    def close(self) -> list[str]:
        self.sandbox.close()
        return self.cassette.stop()


def _index_reachable() -> str | None:
    """Why the chart's wheels cannot be downloaded here (no pip beside the tests, no index), or None."""
    if importlib.util.find_spec("pip") is None and shutil.which("uv") is None:
        return "the test environment has no pip (nor uv) to download the chart's wheels with"
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError:
        return "the package index (pypi.org) is not reachable from here"
    return None


@pytest.fixture
def index_wheels(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Wheelhouse:
    """The app's real wheelhouse, downloading from the package index: only the chart needs it (50 MB of wheels
    no test can make). Kept in pytest's cache folder when there is one, as an app keeps ~/.cache/mainsdk/wheels."""
    why = _index_reachable()
    if why is not None and not os.environ.get(AUTHOR_ENV) and not request.config.getoption("conformance_record"):
        pytest.skip(f"{why}: this test installs 14 real wheels (pandas, matplotlib) fetched from it")
    cache = getattr(request.config, "cache", None)
    root = Path(cache.mkdir("mainsdk-vercel-wheels")) if cache is not None else tmp_path_factory.mktemp("wheels")
    return Wheelhouse(str(root))


@pytest.fixture
def kernel_wheels(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Wheelhouse:
    """The app's real wheelhouse for the cell kernel's set (IPython, its dependencies and pip), made from this
    environment's installed distributions (the driver depends on them): no index."""
    cache = getattr(request.config, "cache", None)
    root = Path(cache.mkdir("mainsdk-vercel-kernel-wheels")) if cache is not None else tmp_path_factory.mktemp("k")
    return Wheelhouse(str(root))


@pytest.fixture
def made_wheels(tmp_path: Path) -> MadeWheels:
    return MadeWheels(tmp_path / "wheels")


@pytest.fixture
def harness(request: pytest.FixtureRequest, own_cassette: Callable[..., OwnCassette]) -> Iterator[Any]:
    opened: list[Harness] = []

    def make(name: str, text: str, wheelhouse: Any) -> Harness:
        built = Harness(own_cassette(CASSETTES / f"{name}.json", how=AUTHORED_HOW), text, wheelhouse)
        opened.append(built)
        return built

    with seeded_cell_tokens(request.node.name):  # cells' tokens as when the cassette was authored
        yield make
    problems = [p for h in opened for p in h.close()]  # a recording is kept at the end if the test passed
    assert problems == [], "\n".join(problems)


def test_a_first_run_probes_uploads_and_installs_and_a_second_skips_the_probe_and_the_download(
    harness: Any, made_wheels: MadeWheels
) -> None:
    h = harness("one_shot_made", config([DEMO]), made_wheels)
    code = "import mainsdk_demo\nprint(mainsdk_demo.__version__)\nmainsdk_demo.main()"
    first = h.sandbox.run(code)
    # Installed by pypa's installer (the driver's zip of it) into a box Python with no pip: both packages.
    assert (first.exit_code, first.stdout) == (0, "1.0\ndemo says hello\n"), first.stderr
    # create (pending), its read until running, the image's python (once per driver), wheels up (the box's one
    # write), install, the code, out, stop
    assert h.steps() == [
        "POST sandboxes", "GET sandbox", "POST cmd", "POST write", "POST cmd", "POST cmd", "POST read", "POST stop",
    ]  # fmt: skip
    downloads = h.wheelhouse.downloads
    mark = len(h.server.received)
    second = h.sandbox.run("import subprocess\nsubprocess.run(['mainsdk-demo'], check=True)")
    assert (second.exit_code, second.stdout) == (0, "demo says hello\n"), second.stderr  # its console script
    assert h.steps(mark) == [
        "POST sandboxes", "GET sandbox", "POST write", "POST cmd", "POST cmd", "POST read", "POST stop",
    ]  # fmt: skip
    assert h.wheelhouse.downloads == downloads  # the app's wheelhouse had the set
    mark = len(h.server.received)
    without = h.sandbox.run("import mainsdk_demo", packages=[])
    assert without.exit_code == 1 and "No module named 'mainsdk_demo'" in without.stderr
    assert h.steps(mark) == ["POST sandboxes", "GET sandbox", "POST cmd", "POST read", "POST stop"]  # plain: 5
    assert h.server.commands_sent() == 6


def test_a_session_installs_once_and_its_later_commands_and_cells_cost_nothing_more(
    harness: Any, made_wheels: MadeWheels, kernel_wheels: Wheelhouse
) -> None:
    made_wheels.kernel = kernel_wheels  # its cell installs the kernel's IPython first
    h = harness("session_made", config([DEMO]), made_wheels)
    with h.sandbox.create() as session:
        opened = h.steps()
        # create, its read until running, probe, wheels, install
        assert opened == ["POST sandboxes", "GET sandbox", "POST cmd", "POST write", "POST cmd"]
        mark = len(h.server.received)
        for _ in range(2):
            assert (
                session.run("python3", ["-c", "import mainsdk_demo; print(mainsdk_demo.__version__)"]).stdout == "1.0\n"
            )
        assert h.steps(mark) == ["POST cmd", "POST cmd"]  # one request a command, as without packages
        cell = session.run_code("import mainsdk_demo_dep\nmainsdk_demo_dep.WORD")
        assert cell.text == "'hello'", cell.error


def test_a_set_the_app_cannot_fetch_is_one_0001_naming_the_package_before_any_code_runs(
    harness: Any, made_wheels: MadeWheels
) -> None:
    h = harness("unresolvable", config([DEMO, "doesnotexist-xyz==1.0"]), made_wheels)
    with pytest.raises(SandboxError) as caught:
        h.sandbox.run("print('ran')")
    error = caught.value
    assert (error.code, error.ran) == (INVALID_OPTION, False)
    assert "doesnotexist-xyz==1.0" in error.message
    assert "mainsdk-demo" not in error.message.split("pip said")[0]  # only the package named is blamed
    # The image's python was asked (the first box of this driver), then the sandbox stopped: no code ran.
    assert h.steps() == ["POST sandboxes", "GET sandbox", "POST cmd", "POST stop"]
    mark = len(h.server.received)
    with pytest.raises(SandboxError) as again:
        h.sandbox.run("print('ran')")
    assert again.value.code == INVALID_OPTION and "doesnotexist-xyz==1.0" in again.value.message
    assert h.steps(mark) == []  # the python is known now: refused before any sandbox is made


def test_a_wheel_that_fails_its_record_in_the_box_is_one_0001_quoting_the_installer_and_the_code_never_runs(
    harness: Any, made_wheels: MadeWheels
) -> None:
    h = harness("tampered", config([TAMPERED]), made_wheels)
    with pytest.raises(SandboxError) as caught:
        h.sandbox.run("print('ran')")
    error = caught.value
    assert (error.code, error.ran) == (INVALID_OPTION, False)
    assert "mainsdk-tampered==1.0" in error.message
    # installer's WheelFile.validate_record, run on every wheel before anything is written
    said = "ERROR: In mainsdk_tampered-1.0-py3-none-any.whl, hash / size of mainsdk_tampered.py didn't match RECORD"
    assert said in error.message
    # create, read, probe, wheels up, the install that failed, stop: the code never ran
    assert h.steps() == ["POST sandboxes", "GET sandbox", "POST cmd", "POST write", "POST cmd", "POST stop"]


def test_the_tutorial_chart_with_pandas_and_matplotlib_returns_a_png(harness: Any, index_wheels: Wheelhouse) -> None:
    h = harness("chart_run", config(CHART_PINS, "120s"), index_wheels)
    result = h.sandbox.run(CHART, files={"data.csv": DATA}, feature="chart")
    assert (result.exit_code, result.stdout) == (0, "3\n"), result.stderr
    files = {ref.name: ref for ref in result.files}
    assert h.sandbox.files.read(files["chart.png"]).startswith(PNG)
    # The figure the code left open comes back as the run's rich result too (core's figures wrapper in the box,
    # through the out folder's one archive): no change to the code, no extra request.
    pngs = [r.bytes() if r.file is None else h.sandbox.files.read(r.file) for r in result.results]
    assert [r.mime for r in result.results] == ["image/png"]
    assert pngs[0] is not None and pngs[0].startswith(PNG)
    assert h.steps() == [
        "POST sandboxes", "GET sandbox", "POST cmd", "POST write", "POST cmd", "POST cmd", "POST read", "POST stop",
    ]  # fmt: skip


def test_a_cell_drawing_with_pandas_and_matplotlib_returns_the_figure_as_a_png(
    harness: Any, index_wheels: Wheelhouse
) -> None:
    h = harness("chart_cell", config(CHART_PINS, "120s"), index_wheels)
    with h.sandbox.create() as session:
        session.write("data.csv", DATA)
        loaded = session.run_code("import pandas as pd\ndf = pd.read_csv('data.csv')\nlen(df)")
        assert loaded.ok and loaded.text == "3", loaded.error
        drawn = session.run_code("df.plot.bar(x='item', y='count');")
        assert drawn.ok, drawn.error
        # The tutorial's chart as a cell, and display(df): each display with all its forms (core's kernel).
        charted = session.run_code(TUTORIAL_CELL)
        framed = session.run_code("display(df)")
    pngs = [r for r in drawn.results if r.mime == "image/png"]
    assert len(pngs) == 1
    data = pngs[0].bytes() if pngs[0].file is None else h.sandbox.files.read(pngs[0].file)
    assert data is not None and data.startswith(PNG)
    assert charted.ok and charted.stderr == "", charted
    [figure] = charted.displays
    assert set(figure.mimes) == {"image/png", "text/plain", CHART_MIME}
    assert figure.text == "<Figure size 640x480 with 1 Axes>"
    png = figure.get("image/png")
    assert png is not None
    png_data = png.bytes() if png.file is None else h.sandbox.files.read(png.file)
    assert png_data is not None and png_data.startswith(PNG)
    chart = figure.chart
    assert (chart["type"], chart["title"], chart["x_label"], chart["y_label"]) == ("bar", "Counts", "item", None)
    assert chart["elements"] == [
        {"label": "a", "group": "count", "value": 1.0},
        {"label": "b", "group": "count", "value": 2.0},
        {"label": "c", "group": "count", "value": 3.0},
    ]
    assert framed.ok and framed.stderr == "", framed
    [frame] = framed.displays
    assert set(frame.mimes) == {"text/html", "text/plain", DATAFRAME_MIME}
    html = frame.get("text/html")
    assert html is not None and isinstance(html.data, str) and "<table" in html.data
    assert frame.text is not None and frame.text.split() == [
        "item", "count", "0", "a", "1", "1", "b", "2", "2", "c", "3",
    ]  # fmt: skip
    assert frame.data == {
        "columns": ["item", "count"],
        "index": [0, 1, 2],
        "data": {"item": ["a", "b", "c"], "count": [1, 2, 3]},
        "dtypes": {"item": "object", "count": "int64"},
        "shape": [3, 2],
        "truncated": False,
    }


# The tutorial's chart as a cell (mainsdk_local/tests/test_cell_forms.py asserts the same forms on local).
TUTORIAL_CELL = """
import pandas as pd
import matplotlib.pyplot as plt

df = pd.read_csv("data.csv")
df.plot.bar(x="item", y="count", title="Counts")
plt.show()
"""


def test_the_probe_run_by_a_real_python_says_what_pip_needs_and_odd_answers_are_refused() -> None:
    said = subprocess.run([sys.executable, "-I", "-c", PROBE], capture_output=True, text=True, check=True).stdout
    python = BoxPython.parse(said)
    assert python.version == f"{sys.version_info[0]}.{sys.version_info[1]}" and python.implementation == "cpython"
    assert python.machine == platform.machine()
    options = python.pip_target()
    assert options[:4] == ["--python-version", python.version, "--implementation", "cp"]
    if python.glibc:
        assert f"manylinux2014_{python.machine}" in python.platforms()
        assert python.platforms()[0] == f"manylinux_2_{python.glibc.split('.')[1]}_{python.machine}"
    for answer in (
        "[]",
        '{"version": "2.7"}',
        '{"version": "3.13", "machine": "x86_64 --index-url=http://evil"}',
        '{"version": "3.13", "glibc": "2.34; rm"}',
    ):
        with pytest.raises(ValueError):
            BoxPython.parse(answer)


def test_the_driver_depends_on_the_pip_its_wheelhouse_runs() -> None:
    # The app's own pip downloads the box's wheels (mainsdk_driverkit.wheelhouse); an environment made by uv has no pip
    # unless a distribution asks for it, and every run with packages was then a 0006 "install pip beside mainsdk".
    import importlib.metadata

    from packaging.requirements import Requirement

    required = {Requirement(text).name for text in importlib.metadata.requires("mainsdk-vercel") or []}
    assert "pip" in required


def _box(root: Path) -> tuple[Path, Path, dict[str, str]]:
    """A stand-in box: a fresh venv without pip (as the stand-in's sandboxes), its site-packages and PATH."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    said = subprocess.run(
        [str(venv / "bin" / "python3"), "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return venv, Path(said), {"PATH": f"{venv / 'bin'}:/usr/bin:/bin"}


def _upload(folder: Path, wheels: dict[str, bytes]) -> None:
    """The wheel folder as the driver's write leaves it in the box: the wheels and installer's zip."""
    folder.mkdir()
    for name, data in wheels.items():
        (folder / name).write_bytes(data)
    (folder / INSTALLER_ZIP).write_bytes(installer_zip())


def _install(folder: Path, pins: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The driver's install command (``INSTALL`` running ``INSTALL_WHEELS``), as the box runs it."""
    command = ["bash", "-c", INSTALL, str(folder), INSTALL_WHEELS, *pins]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=False)


def test_the_box_install_replaces_a_file_already_there_and_writes_nothing_outside_its_folder(tmp_path: Path) -> None:
    # The box's install (INSTALL running INSTALL_WHEELS with installer's zip) run by a real python without pip.
    venv, site, env = _box(tmp_path)
    (site / "mainsdk_demo_dep.py").write_text("WORD = 'old'\n")  # the image has an older copy of a file
    _upload(tmp_path / "wheels", MADE[DEMO])
    done = _install(tmp_path / "wheels", [DEMO], env)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "wheels").exists()  # the folder (and the zip) removed after
    script = venv / "bin" / "mainsdk-demo"  # the console script, pointed at this python
    assert script.read_text().startswith(f"#!{venv / 'bin' / 'python3'}\n")
    ran = subprocess.run([str(script)], env=env, capture_output=True, text=True, check=False)
    assert (ran.returncode, ran.stdout) == (0, "demo says hello\n"), ran.stderr  # the new file, not the old
    info = site / "mainsdk_demo-1.0.dist-info"
    assert (info / "INSTALLER").read_text() == "mainsdk\n"
    assert "mainsdk_demo/__init__.py,sha256=" in (info / "RECORD").read_text()  # what installer wrote
    assert oct((site / "mainsdk_demo" / "__init__.py").stat().st_mode & 0o777) == "0o644"

    escape = made_wheel("mainsdk-escape", "1.0", {"../../escaped.py": "X = 1\n"})  # its RECORD is right
    _upload(tmp_path / "escape", {"mainsdk_escape-1.0-py3-none-any.whl": escape})
    done = _install(tmp_path / "escape", ["mainsdk-escape==1.0"], env)
    assert done.returncode == 1
    assert f"ERROR: mainsdk_escape-1.0-py3-none-any.whl: ../../escaped.py would be written outside {site}" in (
        done.stderr
    )
    assert not (site.parent.parent / "escaped.py").exists()

    _upload(tmp_path / "missing", MADE[DEMO])  # a pin with no wheel uploaded (never so from the driver)
    done = _install(tmp_path / "missing", ["Other_Pkg[extra]==1.0"], env)
    assert done.returncode == 1
    assert done.stderr.strip() == "ERROR: no wheel for Other_Pkg[extra]==1.0 among the wheels fetched for this sandbox"


def test_installer_ships_as_the_same_zip_of_the_apps_own_copy() -> None:
    import importlib.metadata

    import installer
    from packaging.requirements import Requirement

    # The driver depends on installer; the zip holds its package as installed here, and the same bytes every time.
    required = {
        Requirement(text).name: Requirement(text) for text in importlib.metadata.requires("mainsdk-vercel") or []
    }
    assert "installer" in required and required["installer"].specifier.contains(importlib.metadata.version("installer"))
    data = installer_zip()
    installer_zip.cache_clear()
    assert installer_zip() == data
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        infos = archive.infolist()
        names = [info.filename for info in infos]
        assert names == sorted(names) and "installer/__init__.py" in names
        assert not [n for n in names if n.endswith((".pyc", ".exe")) or "__pycache__" in n]
        assert {info.date_time for info in infos} == {(1980, 1, 1, 0, 0, 0)}
        assert {info.compress_type for info in infos} == {zipfile.ZIP_STORED}
        assert any(n.startswith("installer-LICENSES/") for n in names)  # MIT: its notice travels with it
        package = Path(installer.__file__).parent
        assert archive.read("installer/_core.py") == (package / "_core.py").read_bytes()
        # The box's python3 may be Amazon Linux 2023's 3.9: the script and the zip's sources are Python 3.7
        # grammar (installer 0.7's Requires-Python; only the grammar is checked here, no 3.7 being on this host).
        sources = {n: archive.read(n).decode() for n in names if n.endswith(".py")}
    for name, text in {"INSTALL_WHEELS": INSTALL_WHEELS, **sources}.items():
        ast.parse(text, filename=name, feature_version=(3, 7))


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


async def _two_kernel_sessions(h: Harness, text: str) -> dict[str, Any]:
    """Two sessions of one driver: the kernel's site asked twice and for bash in each, a command and a cell."""
    sandbox = AsyncSandbox(SandboxDeps(config=load_config_text(text), driver=h.driver, load_entrypoints=False))
    seen: dict[str, Any] = {}
    try:
        for name in ("first", "second"):
            async with await sandbox.create() as session:
                box = session._runtime.opened.box
                assert isinstance(box, VercelBox)
                mark = len(h.server.received)
                site = await h.driver.mainsdk_driver_kernel_site(box=box, language="python")
                sent = h.steps(mark)
                mark = len(h.server.received)
                again = await h.driver.mainsdk_driver_kernel_site(box=box, language="python")
                bash = await h.driver.mainsdk_driver_kernel_site(box=box, language="bash")
                seen[f"{name}_again"] = (again, bash, h.steps(mark))
                user = await session.run("python3", ["-c", FIND_IPYTHON])
                cell = await session.run_code(kernel_cell(str(site)))
                seen[name] = {"site": site, "sent": sent, "user": user.stdout, "cell": (cell.text, cell.error)}
                seen[f"{name}_downloads"] = h.wheelhouse.downloads
    finally:
        await sandbox.aclose()
    return seen


def test_each_session_gets_the_kernels_ipython_in_a_folder_of_its_own_from_wheels_fetched_once(
    harness: Any, kernel_wheels: Wheelhouse
) -> None:
    text = "sandbox: {driver: vercel-sandbox, limits: {timeout: 30s}}\n"  # no sandbox.packages: the kernel's own
    h = harness("cell_kernel", text, kernel_wheels)
    downloads = kernel_wheels.downloads
    seen = asyncio.run(_two_kernel_sessions(h, text))
    for name in ("first", "second"):
        box = seen[name]
        assert box["site"] == KERNEL
        # One box, one set: the image's python (first box of the driver only), the wheels' write, the install.
        probe = ["POST cmd"] if name == "first" else []
        assert box["sent"] == [*probe, "POST write", "POST cmd"], box["sent"]
        assert seen[f"{name}_again"] == (KERNEL, None, [])  # a restart's call: the box's answer, no request
        assert box["user"] == "None\n"  # the session's own python has no IPython: the set is apart from it
        text_, error = box["cell"]
        assert error is None, error
        assert text_ == repr(("9.18.1", f"{KERNEL}/IPython/__init__.py", True))
    # Fetched at most once (none when this checkout's cache had them), uploaded to each box.
    assert seen["second_downloads"] == seen["first_downloads"] <= downloads + 1


def test_an_image_python_older_than_3_11_cannot_take_the_kernels_set() -> None:
    old = BoxPython(version="3.9", glibc="2.34")  # Amazon Linux 2023's python3 (the legacy runtimes)
    problem = kernel_python_problem(old)
    assert (
        problem is not None
        and "python 3.9" in problem
        and "sandbox.vercel.image: vercel/sandbox/python:3.14" in problem
    )
    assert kernel_python_problem(BoxPython(version="3.13", glibc="2.34")) is None


def test_the_driver_depends_on_the_kernels_set_exactly() -> None:
    # The kernel's IPython set comes from the app's environment (mainsdk_driverkit.installed), never an index at run
    # time: installing the driver must install exactly those versions.
    import importlib.metadata

    required = set(importlib.metadata.requires("mainsdk-vercel") or [])
    assert set(KERNEL_PACKAGES["python"]) <= required
