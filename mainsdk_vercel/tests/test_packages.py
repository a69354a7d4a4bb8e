"""Packages on Vercel: wheels fetched on the app's side, uploaded in the box's one write, installed offline.

Each test replays its cassette (``tests/cassettes/packages/``) with the real driver and a real httpx client;
the wheels are really downloaded from the app's package index (PyPI here and in CI) into a wheelhouse, and
the upload must match the authored one member by member (large wheels by sha256). The requests each run
costs are counted from what the replay server received: the figures README.md states.

Authored, never recorded: ``python mainsdk_vercel/tests/conformance/author.py --packages`` runs this module
against the stand-in (``simulator.py``), where the box's pip and python really ran (the PNGs are
matplotlib's own output on this machine).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mainsdk import Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config_text
from mainsdk.errors import INVALID_OPTION
from mainsdk.wheelhouse import Wheelhouse
from mainsdk_conformance.plugin import seeded_cell_tokens
from mainsdk_conformance.profiles import VERCEL
from mainsdk_conformance.replay import ReplayServer
from mainsdk_vercel.packages import PROBE, BoxPython

from mainsdk_vercel import VercelDriver

CASSETTES = Path(__file__).parent / "cassettes" / "packages"
PROJECT = "prj_conformance"
TEAM = "team_conformance"
TOKEN = "replay-token-not-a-secret"
# Set by author.py --packages to the stand-in's URL: the tests then record their cassettes through it.
AUTHOR_ENV = "MAINSDK_VERCEL_AUTHOR_PACKAGES"
AUTHORED_HOW = (
    "recorded with tests/test_packages.py against tests/conformance/simulator.py (written from vercel-sandbox "
    "0.10.0 and @vercel/sandbox); the box's python and pip really ran on this machine, so outputs (and PNGs) "
    "are their own; wheel uploads are stored by sha256 and size"
)
SIX = "six==1.16.0"
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


class Harness:
    """A replay server on one cassette (a recorder through the stand-in when authoring) and a sandbox on it."""

    def __init__(self, name: str, text: str, wheels: Path) -> None:
        path = CASSETTES / f"{name}.json"
        upstream = os.environ.get(AUTHOR_ENV)
        if upstream:
            self.server = ReplayServer.recorder(VERCEL, path, upstreams={"api": upstream})
        else:
            self.server = ReplayServer.replayer(VERCEL, path)
        self.server.start()
        self.wheelhouse = Wheelhouse(str(wheels))
        self.driver = VercelDriver(
            token=TOKEN, project=PROJECT, team=TEAM, base_url=self.server.url("api"), wheelhouse=self.wheelhouse
        )
        self.sandbox = Sandbox(SandboxDeps(config=load_config_text(text), driver=self.driver, load_entrypoints=False))

    def steps(self, start: int = 0) -> list[str]:
        """The requests received since ``start``: method and last path segment (``cmd`` starts a command)."""
        return [f"{r.method} {r.path.rsplit('/', 1)[-1]}" for r in self.server.received[start:]]

    def close(self, passed: bool) -> list[str]:
        self.sandbox.close()
        self.server.stop()
        if self.server.recording:
            if passed:
                self.server.cassette.meta["how"] = AUTHORED_HOW
                self.server.save()
            return []
        return self.server.problems(final=True)


@pytest.fixture
def wheels(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The app's wheelhouse: pytest's cache folder when there is one (about 40 MB for the chart), so a
    checkout downloads each set once, as an app reuses ``~/.cache/mainsdk/wheels``."""
    cache = getattr(request.config, "cache", None)
    return Path(cache.mkdir("mainsdk-vercel-wheels")) if cache is not None else tmp_path_factory.mktemp("wheels")


@pytest.fixture
def harness(request: pytest.FixtureRequest, wheels: Path) -> Iterator[Any]:
    opened: list[Harness] = []

    def make(name: str, text: str) -> Harness:
        built = Harness(name, text, wheels)
        opened.append(built)
        return built

    failed_before = request.session.testsfailed
    with seeded_cell_tokens(request.node.name):  # cells' tokens as when the cassette was authored
        yield make
    passed = request.session.testsfailed == failed_before  # the call's report is counted before teardown
    problems = [p for h in opened for p in h.close(passed)]
    assert problems == [], "\n".join(problems)


def test_a_first_run_probes_uploads_and_installs_and_a_second_skips_the_probe_and_the_download(harness: Any) -> None:
    h = harness("one_shot_six", config([SIX]))
    first = h.sandbox.run("import six\nprint(six.__version__)")
    assert (first.exit_code, first.stdout) == (0, "1.16.0\n"), first.stderr
    # create, the image's python (once per driver), wheels up (the box's one write), install, the code, out, stop
    assert h.steps() == ["POST sandboxes", "POST cmd", "POST write", "POST cmd", "POST cmd", "POST read", "POST stop"]
    downloads = h.wheelhouse.downloads
    mark = len(h.server.received)
    second = h.sandbox.run("import six\nprint(six.__version__)")
    assert (second.exit_code, second.stdout) == (0, "1.16.0\n"), second.stderr
    assert h.steps(mark) == ["POST sandboxes", "POST write", "POST cmd", "POST cmd", "POST read", "POST stop"]
    assert h.wheelhouse.downloads == downloads  # the app's wheelhouse had the set
    mark = len(h.server.received)
    without = h.sandbox.run("import six", packages=[])
    assert without.exit_code == 1 and "No module named 'six'" in without.stderr
    assert h.steps(mark) == ["POST sandboxes", "POST cmd", "POST read", "POST stop"]  # a plain run: 4
    assert h.server.commands_sent() == 6


def test_a_session_installs_once_and_its_later_commands_and_cells_cost_nothing_more(harness: Any) -> None:
    h = harness("session_six", config([SIX]))
    with h.sandbox.create() as session:
        opened = h.steps()
        assert opened == ["POST sandboxes", "POST cmd", "POST write", "POST cmd"]  # create, probe, wheels, install
        mark = len(h.server.received)
        for _ in range(2):
            assert session.run("python3", ["-c", "import six; print(six.__version__)"]).stdout == "1.16.0\n"
        assert h.steps(mark) == ["POST cmd", "POST cmd"]  # one request a command, as without packages
        cell = session.run_code("import six\nsix.__version__")
        assert cell.text == "'1.16.0'", cell.error


def test_a_set_pip_cannot_resolve_is_one_0001_naming_the_package_before_any_code_runs(harness: Any) -> None:
    h = harness("unresolvable", config([SIX, "doesnotexist-xyz==1.0"]))
    with pytest.raises(SandboxError) as caught:
        h.sandbox.run("print('ran')")
    error = caught.value
    assert (error.code, error.ran) == (INVALID_OPTION, False)
    assert "doesnotexist-xyz==1.0" in error.message and "pip said: ERROR:" in error.message
    assert "six" not in error.message.split("pip said")[0]  # only the package pip named is blamed
    # The image's python was asked (the first box of this driver), then the sandbox stopped: no code ran.
    assert h.steps() == ["POST sandboxes", "POST cmd", "POST stop"]
    mark = len(h.server.received)
    with pytest.raises(SandboxError) as again:
        h.sandbox.run("print('ran')")
    assert again.value.code == INVALID_OPTION and "doesnotexist-xyz==1.0" in again.value.message
    assert h.steps(mark) == []  # the python is known now: refused before any sandbox is made


def test_the_tutorial_chart_with_pandas_and_matplotlib_returns_a_png(harness: Any) -> None:
    h = harness("chart_run", config(CHART_PINS, "120s"))
    result = h.sandbox.run(CHART, files={"data.csv": DATA}, feature="chart")
    assert (result.exit_code, result.stdout) == (0, "3\n"), result.stderr
    files = {ref.name: ref for ref in result.files}
    assert h.sandbox.files.read(files["chart.png"]).startswith(PNG)
    # The figure the code left open comes back as the run's rich result too (core's figures wrapper in the box,
    # through the out folder's one archive): no change to the code, no extra request.
    pngs = [r.bytes() if r.file is None else h.sandbox.files.read(r.file) for r in result.results]
    assert [r.mime for r in result.results] == ["image/png"]
    assert pngs[0] is not None and pngs[0].startswith(PNG)
    assert h.steps() == ["POST sandboxes", "POST cmd", "POST write", "POST cmd", "POST cmd", "POST read", "POST stop"]


def test_a_cell_drawing_with_pandas_and_matplotlib_returns_the_figure_as_a_png(harness: Any) -> None:
    h = harness("chart_cell", config(CHART_PINS, "120s"))
    with h.sandbox.create() as session:
        session.write("data.csv", DATA)
        loaded = session.run_code("import pandas as pd\ndf = pd.read_csv('data.csv')\nlen(df)")
        assert loaded.ok and loaded.text == "3", loaded.error
        drawn = session.run_code("df.plot.bar(x='item', y='count');")
        assert drawn.ok, drawn.error
    pngs = [r for r in drawn.results if r.mime == "image/png"]
    assert len(pngs) == 1
    data = pngs[0].bytes() if pngs[0].file is None else h.sandbox.files.read(pngs[0].file)
    assert data is not None and data.startswith(PNG)


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
    # The app's own pip downloads the box's wheels (mainsdk.wheelhouse); an environment made by uv has no pip
    # unless a distribution asks for it, and every run with packages was then a 0006 "install pip beside mainsdk".
    import importlib.metadata

    from packaging.requirements import Requirement

    required = {Requirement(text).name for text in importlib.metadata.requires("mainsdk-vercel") or []}
    assert "pip" in required
