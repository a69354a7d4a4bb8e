"""Packages in the box on the real local driver: pinned packages from the real index, built once on the host into
the cache, bound read-only over the interpreter's site-packages; the box's network unchanged.

The packages come from pip's configured index (small pure-Python wheels, so a build takes about a second).
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import shutil
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from conftest import CONFIG, Built
from mainsdk import SandboxError
from mainsdk.errors import INVALID_OPTION, ConfigError
from mainsdk_local.driver import LocalDriver
from mainsdk_local.programs import resolve_program

from mainsdk_local import local_sandbox_driver
from mainsdk_local import packages as P

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/ns/mnt"), reason="Linux only")

SIX = "six==1.16.0"


def _config(*pins: str) -> str:
    """CONFIG with ``sandbox.packages.python`` set to ``pins``."""
    packages = f"  packages:\n    python: [{', '.join(pins)}]\n"
    return CONFIG.replace("  secrets: [TEST_API_KEY]\n", "  secrets: [TEST_API_KEY]\n" + packages)


def _with_driver(make_sandbox: Callable[..., Built], text: str) -> tuple[Built, LocalDriver]:
    """A sandbox from ``text`` and its local driver, to read how many builds it ran."""
    driver = local_sandbox_driver(permissions={"processes": ["python3", "node", "bash"]})
    return make_sandbox(text, driver=driver), driver


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache for each test, so a build is really a first build."""
    home = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home / "mainsdk" / "envs"


def _envs(root: Path) -> list[str]:
    return sorted(name for name in os.listdir(root) if not name.endswith(".lock")) if root.exists() else []


def test_a_configured_package_is_importable_read_only_and_absent_when_not_asked(
    make_sandbox: Callable[..., Built], cache_home: Path
) -> None:
    sandbox = make_sandbox(_config(SIX)).sandbox
    code = (
        "import os, six\n"
        "print(six.__version__)\n"
        "try:\n"
        "    open(os.path.join(os.path.dirname(six.__file__), 'planted.py'), 'w')\n"
        "except OSError as exc:\n"
        "    print('read-only', exc.errno)\n"
    )
    result = sandbox.run(code)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.split()
    assert lines[0] == "1.16.0"
    assert lines[1] == "read-only"  # EROFS (30): the env is bound read-only
    (env,) = _envs(cache_home)
    assert not (cache_home / env / "site-packages" / "planted.py").exists()
    without = sandbox.run("import six", packages=[])
    assert without.exit_code == 1
    assert "No module named 'six'" in without.stderr


def test_the_cache_is_reused_a_second_run_and_a_new_driver_install_nothing(
    make_sandbox: Callable[..., Built], cache_home: Path
) -> None:
    first, driver = _with_driver(make_sandbox, _config(SIX))
    assert first.sandbox.run("import six").exit_code == 0
    assert first.sandbox.run("import six").exit_code == 0
    assert driver.envs.builds == 1
    (env,) = _envs(cache_home)
    manifest = json.loads((cache_home / env / P.MANIFEST).read_text())
    assert manifest["packages"] == [SIX]
    assert "six-1.16.0" in manifest["installed"]
    second, new_driver = _with_driver(make_sandbox, _config(SIX))
    assert second.sandbox.run("import six").exit_code == 0
    assert new_driver.envs.builds == 0
    assert _envs(cache_home) == [env]


def test_two_builders_at_once_build_the_set_once(cache_home: Path) -> None:
    program = resolve_program("python", "python3")
    builders = [P.EnvBuilder(), P.EnvBuilder()]  # each its own lock file handle, as two processes would have
    sites: list[str] = []
    gate = threading.Barrier(2)

    def build(builder: P.EnvBuilder) -> None:
        gate.wait()
        sites.append(builder.ensure(program, [SIX]))

    threads = [threading.Thread(target=build, args=(builder,)) for builder in builders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(builder.builds for builder in builders) == 1
    assert len(set(sites)) == 1
    assert not [name for name in os.listdir(cache_home) if name.startswith(".build-")]


def test_the_key_is_the_interpreter_and_the_sorted_set() -> None:
    program = resolve_program("python", "python3")
    other = attrs.evolve(program, version="3.99", platform="x")  # another interpreter at the same path
    assert P.env_key(program, [SIX, "attrs==23.1.0"]) == P.env_key(program, ["attrs==23.1.0", SIX])
    assert P.env_key(program, [SIX]) != P.env_key(program, ["six==1.15.0"])
    assert P.env_key(program, [SIX]) != P.env_key(other, [SIX])


def test_a_package_not_configured_is_refused_before_anything_is_built(
    make_sandbox: Callable[..., Built], cache_home: Path
) -> None:
    built = make_sandbox(_config(SIX))
    with pytest.raises(SandboxError) as caught:
        built.sandbox.run("print('ran')", packages=["requests"])
    assert caught.value.code == INVALID_OPTION
    assert "'requests' is not under sandbox.packages.python" in str(caught.value)
    assert built.events[-1].kind == "refused"
    assert _envs(cache_home) == []


def test_an_unpinned_entry_is_refused_at_load_with_its_line(make_sandbox: Callable[..., Built]) -> None:
    text = _config("six")
    with pytest.raises(ConfigError) as caught:
        make_sandbox(text)
    (problem,) = caught.value.problems
    line = text.splitlines().index("    python: [six]") + 1
    assert (problem.key, problem.line) == ("sandbox.packages.python[0]", line)
    assert "is not pinned" in problem.message


def test_a_set_that_cannot_be_built_is_one_error_naming_the_package_before_any_code_runs(
    make_sandbox: Callable[..., Built], cache_home: Path, tmp_path: Path
) -> None:
    built = make_sandbox(_config(SIX, "doesnotexist-xyz==1.0"))
    with pytest.raises(SandboxError) as caught:
        built.sandbox.run("print('ran')")
    error = caught.value
    assert error.code == INVALID_OPTION
    assert error.ran is False and not error.retryable
    message = str(error)
    assert "cannot install doesnotexist-xyz==1.0" in message
    assert "six" not in message.split("the installer said", maxsplit=1)[0]  # the package at fault, not the whole set
    said = message.split("the installer said", maxsplit=1)[1]
    # The installer's own words: pip's, or uv's where it is installed.
    assert "No matching distribution found for doesnotexist-xyz==1.0" in said or (
        "Because doesnotexist-xyz was not found" in said
    )
    assert _envs(cache_home) == []  # nothing half-built is left to be reused
    with pytest.raises(SandboxError, match="doesnotexist-xyz"):
        built.sandbox.create()  # a session too: refused before its box opens


def test_weak_mode_declares_no_packages_and_refuses_a_run_that_would_get_them(
    make_sandbox: Callable[..., Built], cache_home: Path
) -> None:
    driver = local_sandbox_driver(permissions={"processes": ["python3", "node", "bash"]}, force_weak=True)
    built = make_sandbox(_config(SIX), driver=driver)
    assert built.sandbox.capabilities().packages is False
    with pytest.raises(SandboxError, match=r"does not declare Capabilities.packages\); call with packages=") as caught:
        built.sandbox.run("print('ran')")
    assert caught.value.code == INVALID_OPTION
    assert built.events[-1].kind == "refused" and _envs(cache_home) == []


def test_the_box_still_has_no_network_with_packages(make_sandbox: Callable[..., Built]) -> None:
    sandbox = make_sandbox(_config(SIX)).sandbox
    code = (
        "import socket, six\n"
        "for target in (('pypi.org', 443), ('1.1.1.1', 53)):\n"
        "    try:\n"
        "        socket.create_connection(target, timeout=3).close()\n"
        "        print('reached', target[0])\n"
        "    except OSError as exc:\n"
        "        print('refused', target[0], type(exc).__name__)\n"
    )
    result = sandbox.run(code)
    assert result.exit_code == 0, result.stderr
    assert "reached" not in result.stdout
    assert result.stdout.count("refused") == 2


def test_a_session_gets_the_packages_in_commands_and_cells(make_sandbox: Callable[..., Built]) -> None:
    sandbox = make_sandbox(_config(SIX)).sandbox
    with sandbox.create() as session:
        command = session.run("python3", ["-c", "import six; print(six.__version__)"])
        assert (command.exit_code, command.stdout.strip()) == (0, "1.16.0")
        cell = session.run_code("import six\nsix.__version__")
        assert cell.ok, cell.error
        assert [(r.mime, r.data) for r in cell.results] == [("text/plain", "'1.16.0'")]


def test_the_first_build_shows_its_progress_on_a_terminal_only(
    monkeypatch: pytest.MonkeyPatch, cache_home: Path
) -> None:
    program = resolve_program("python", "python3")

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    P.EnvBuilder().ensure(program, [SIX])
    shown = terminal.getvalue()
    assert "building the box's python packages once (six==1.16.0)" in shown
    assert "six" in shown.split("\n", 1)[1]  # the installer's own lines follow
    quiet = io.StringIO()
    monkeypatch.setattr("sys.stderr", quiet)
    P.EnvBuilder().ensure(program, ["attrs==23.1.0"])
    assert quiet.getvalue() == ""


def test_failure_message_names_only_the_packages_the_resolver_names() -> None:
    output = "Collecting six==1.16.0\nERROR: No matching distribution found for Bad_Pkg==1.0\n"
    message = P.build_failure_message([SIX, "bad.pkg==1.0"], output)
    assert message.startswith("packages: cannot install bad.pkg==1.0 from")
    assert "No matching distribution found for Bad_Pkg==1.0" in message


CHART = """
import pandas as pd
import matplotlib.pyplot as plt

df = pd.read_csv("data.csv")
df.plot.bar(x="item", y="count")
plt.savefig("../out/chart.png")
print(len(df))
"""


def test_the_tutorial_chart_with_pandas_and_matplotlib_returns_a_png(
    make_sandbox: Callable[..., Built], request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first build downloads about 60 MB of wheels and installs 250 MB (about 20 s here); the env is kept in
    # pytest's cache folder, so later runs reuse it as an app's later runs reuse ~/.cache/mainsdk/envs.
    monkeypatch.setenv("XDG_CACHE_HOME", str(request.config.cache.mkdir("mainsdk-packages")))
    text = _config("pandas==2.2.3", "matplotlib==3.9.2")
    text = text.replace("timeout: 10s, memory: 256MB", "timeout: 60s, memory: 1GB")
    sandbox = make_sandbox(text).sandbox
    result = sandbox.run(CHART, files={"data.csv": "item,count\na,1\nb,2\nc,3\n"}, feature="chart")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "3\n"
    files = {ref.name: ref for ref in result.files}  # the figure left open comes back in result.results
    assert sandbox.files.read(files["chart.png"]).startswith(b"\x89PNG\r\n\x1a\n")


def test_a_cell_drawing_with_pandas_and_matplotlib_returns_the_figure_as_a_png(
    make_sandbox: Callable[..., Built], request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(request.config.cache.mkdir("mainsdk-packages")))  # as above
    text = _config("pandas==2.2.3", "matplotlib==3.9.2")
    text = text.replace("timeout: 10s, memory: 256MB", "timeout: 60s, memory: 1GB")
    sandbox = make_sandbox(text).sandbox
    with sandbox.create(packages=["pandas", "matplotlib"]) as session:
        session.write("data.csv", "item,count\na,1\nb,2\nc,3\n")
        loaded = session.run_code("import pandas as pd\ndf = pd.read_csv('data.csv')\nlen(df)")
        assert loaded.ok, loaded.error
        drawn = session.run_code("df.plot.bar(x='item', y='count');")
        assert drawn.ok, drawn.error
    pngs = [r for r in drawn.results if r.mime == "image/png"]
    assert len(pngs) == 1  # the figure left open, shown at the cell's end with its text form (the ; hides the value)
    assert [d.text for d in drawn.displays] == ["<Figure size 640x480 with 1 Axes>"]
    data = pngs[0].bytes() if pngs[0].data is not None else sandbox.files.read(pngs[0].file)  # type: ignore[arg-type]
    assert data is not None and data.startswith(b"\x89PNG\r\n\x1a\n")


def test_each_show_in_a_cell_returns_that_figure_then_closes_it_as_a_notebook_does(
    make_sandbox: Callable[..., Built], request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under Agg a cell's plt.show() did nothing: three shows in a loop drew into one figure, returned once at the
    # cell's end, and fig.show() printed "FigureCanvasAgg is non-interactive, and thus cannot be shown". Through
    # IPython's inline backend (matplotlib-inline, from the kernel's packages) each show displays that figure, as
    # its PNG and its text form, and closes it, as in a notebook.
    monkeypatch.setenv("XDG_CACHE_HOME", str(request.config.cache.mkdir("mainsdk-packages")))  # as above
    text = _config("pandas==2.2.3", "matplotlib==3.9.2")
    text = text.replace("timeout: 10s, memory: 256MB", "timeout: 60s, memory: 1GB")
    sandbox = make_sandbox(text).sandbox
    with sandbox.create(packages=["matplotlib"]) as session:
        inline = session.run_code("%matplotlib inline")  # IPython's magic, as a notebook's first cell often is
        loop = "import matplotlib.pyplot as plt\nfor i in range(3):\n    plt.plot([i, i + 1])\n    plt.show()\n"
        shown = session.run_code(loop + "len(plt.get_fignums())")
        method = session.run_code("fig = plt.figure()\nfig.gca().plot([3, 1])\nfig.show()")
        closed = session.run_code("len(plt.get_fignums())")
    assert inline.ok and inline.stderr == "", inline.error
    assert shown.ok and shown.stderr == "", shown
    # Each show as it came, all its forms together, then the value.
    figure = (
        "image/png",
        "application/vnd.mainsdk.chart+json",
        "text/plain",
    )  # the chart form: kernel/forms.py
    assert [d.mimes for d in shown.displays] == [figure] * 3 + [("text/plain",)]
    assert [d.text for d in shown.displays[:3]] == ["<Figure size 640x480 with 1 Axes>"] * 3
    assert shown.displays[-1].main and shown.text == "0"  # each show closed its figure
    assert len({d.get("image/png").data for d in shown.displays[:3]}) == 3  # type: ignore[union-attr]
    assert method.ok and method.stderr == "" and [d.mimes for d in method.displays] == [figure]
    assert [r.data for r in closed.results] == ["0"]


# uv 0.x's own words for an unknown package, captured from `uv pip install --target ... --no-progress` on this
# machine (stderr, not a terminal).
UV_OUTPUT = (
    "Using CPython 3.11.7 interpreter at: /usr/bin/python3.11\n"
    "error: No solution found when resolving dependencies\n"
    "  cause: Because doesnotexist-xyz was not found in the package registry and you require "
    "doesnotexist-xyz==1.0, we can conclude that your requirements are unsatisfiable.\n"
)


def test_failure_message_keeps_uvs_cause_and_names_the_package() -> None:
    message = P.build_failure_message([SIX, "doesnotexist-xyz==1.0"], UV_OUTPUT)
    assert message.startswith("packages: cannot install doesnotexist-xyz==1.0 from")
    assert "Because doesnotexist-xyz was not found in the package registry" in message


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not installed here; the builder uses pip then")
def test_uv_builds_the_env_when_it_is_installed(cache_home: Path) -> None:
    program = resolve_program("python", "python3")
    assert P.installer_command(program, [SIX], "/target")[1:3] == ["pip", "install"]
    site = P.EnvBuilder().ensure(program, [SIX])
    assert "six.py" in os.listdir(site) and ".lock" not in os.listdir(site)
    assert json.loads((Path(site).parent / P.MANIFEST).read_text())["installer"] == "uv"


# Files a box can leave where its output lands (`mainsdk sandbox run --out .` writes into the app's folder): each
# would steer or run on the host if an installer or probe read it. Each planted module and the sdist's in-tree
# build backend write a marker into MARKS when imported; uv.toml and pip.conf point at the planted sdist.
UV_TOML = '[pip]\nno-index = true\nfind-links = ["wh"]\nno-binary = ["six"]\n'
PIP_CONF = "[global]\nno-index = true\nfind-links = wh\nno-binary = six\n"
_MARKING = "import pathlib\npathlib.Path({marks!r}, {name!r}).write_text('ran')\n"
_BACKEND = """
def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    raise RuntimeError("planted backend")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise RuntimeError("planted backend")
"""
INSTALLERS = [
    "pip",
    pytest.param(
        "uv",
        marks=pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not on PATH (tox's local env installs it)"),
    ),
]


def _sdist(folder: Path, name: str, version: str, marks: Path) -> Path:
    """A source distribution of ``name`` whose in-tree build backend marks ``marks`` if it is ever imported."""
    import tarfile

    base = f"{name.replace('-', '_')}-{version}"
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "planted_backend"\nbackend-path = ["."]\n',
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        "planted_backend.py": _MARKING.format(marks=str(marks), name=f"backend-{name}") + _BACKEND,
    }
    path = folder / f"{base}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for member, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{base}/{member}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _plant(folder: Path, marks: Path) -> None:
    """What a box's output could leave in ``folder``: installer configuration, modules and an sdist of six."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "uv.toml").write_text(UV_TOML)
    (folder / "pip.conf").write_text(PIP_CONF)
    for module in ("pip", "sitecustomize", "json", "sysconfig"):
        (folder / f"{module}.py").write_text(_MARKING.format(marks=str(marks), name=f"{module}-{folder.name}"))
    _sdist(folder / "wh", "six", "1.16.0", marks)


@pytest.mark.parametrize("installer", INSTALLERS)
def test_nothing_a_box_can_leave_in_the_apps_folder_is_read_or_run_by_the_build(
    installer: P.Installer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_home: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    app = tmp_path / "app"
    _plant(app, marks)
    _plant(app / "out", marks)
    monkeypatch.chdir(app)
    # The app's own pip configuration names a file in its folder, which box output has overwritten.
    monkeypatch.setenv("PIP_CONFIG_FILE", "pip.conf")
    program = resolve_program("python", "python3")  # its probe too runs where nothing was planted
    site = Path(P.EnvBuilder(installer=installer).ensure(program, [SIX]))
    assert sorted(os.listdir(marks)) == []  # no planted module, no build backend ran
    assert "Utilities for writing code that runs on Python 2 and 3" in (site / "six.py").read_text()  # the real six
    manifest = json.loads((site.parent / P.MANIFEST).read_text())
    assert manifest["installed"] == ["six-1.16.0"] and manifest["installer"] == installer


@pytest.mark.parametrize("installer", INSTALLERS)
def test_a_pin_with_only_a_source_distribution_is_refused_naming_it_and_its_backend_never_runs(
    installer: P.Installer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_home: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    links = tmp_path / "links"
    _sdist(links, "mainsdk-sdist-only", "1.0", marks)
    for name, value in (("FIND_LINKS", str(links)), ("NO_INDEX", "1")):  # the app's explicit index settings
        monkeypatch.setenv(f"PIP_{name}", value)
        monkeypatch.setenv(f"UV_{name}", value)
    program = resolve_program("python", "python3")
    with pytest.raises(SandboxError) as caught:
        P.EnvBuilder(installer=installer).ensure(program, ["mainsdk-sdist-only==1.0"])
    assert sorted(os.listdir(marks)) == []  # the sdist's backend never ran
    error = caught.value
    assert error.code == INVALID_OPTION and error.ran is False and not error.retryable
    assert "cannot install mainsdk-sdist-only==1.0 from sandbox.packages.python" in error.message
    assert "only wheels are installed: a package with no wheel for python 3." in error.message
    assert _envs(cache_home) == []


def test_a_run_with_an_sdist_only_pin_is_refused_before_its_code_runs(
    make_sandbox: Callable[..., Built], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_home: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    links = tmp_path / "links"
    _sdist(links, "mainsdk-sdist-only", "1.0", marks)
    for name, value in (("FIND_LINKS", str(links)), ("NO_INDEX", "1")):
        monkeypatch.setenv(f"PIP_{name}", value)
        monkeypatch.setenv(f"UV_{name}", value)
    built = make_sandbox(_config("mainsdk-sdist-only==1.0"))
    with pytest.raises(SandboxError) as caught:
        built.sandbox.run(f"open({str(marks / 'code')!r}, 'w')")
    assert sorted(os.listdir(marks)) == []  # neither the backend nor the run's code ran
    assert caught.value.code == INVALID_OPTION and caught.value.ran is False
    assert re.search(r"cannot install mainsdk-sdist-only==1\.0 .*only wheels", caught.value.message)


def test_a_relative_find_links_entry_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, cache_home: Path
) -> None:
    # The installer runs in an empty private folder; a relative entry would mean the app's folder, where box
    # output lands, so it is refused rather than resolved there.
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels wh")
    program = resolve_program("python", "python3")
    with pytest.raises(SandboxError) as caught:
        P.EnvBuilder().ensure(program, [SIX])
    assert caught.value.code == INVALID_OPTION
    assert "PIP_FIND_LINKS names the relative path 'wh'" in caught.value.message
    assert _envs(cache_home) == []


@pytest.mark.skipif(importlib.util.find_spec("pip") is None, reason="the app's Python has no pip to fall back on")
def test_a_box_python_without_pip_gets_the_apps_pip_run_as_isolated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_home: Path
) -> None:
    # The third installer: the box's interpreter has no pip, so the app's pip installs for it (--python).
    import venv

    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)
    program = attrs.evolve(resolve_program("python", "python3"), executable=str(bare / "bin" / "python"))
    marks = tmp_path / "marks"
    marks.mkdir()
    app = tmp_path / "app"
    _plant(app, marks)
    monkeypatch.chdir(app)
    command = P.installer_command(program, [SIX], "/target", "pip")
    assert command[:4] == [sys.executable, "-I", "-m", "pip"] and command[4:6] == ["--python", program.executable]
    site = Path(P.EnvBuilder(installer="pip").ensure(program, [SIX]))
    assert sorted(os.listdir(marks)) == []
    assert "Utilities for writing code that runs on Python 2 and 3" in (site / "six.py").read_text()


def test_an_installer_or_interpreter_in_the_apps_folder_is_never_found_through_a_relative_path_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_home: Path
) -> None:
    # PATH's ".", "bin" or empty entries mean the current folder's, where box output lands: a uv or python3
    # planted there (executable) would run on the host.
    marks = tmp_path / "marks"
    marks.mkdir()
    app = tmp_path / "app"
    (app / "bin").mkdir(parents=True)
    for name in ("uv", "python3"):
        for folder in (app, app / "bin"):
            planted = folder / name
            planted.write_text(f"#!/bin/sh\ntouch {marks}/{name}-{folder.name}\nexit 1\n")
            planted.chmod(0o755)
    monkeypatch.chdir(app)
    monkeypatch.setenv("PATH", os.pathsep.join([".", "bin", "", os.environ.get("PATH", "")]))
    program = resolve_program("python", "python3")
    site = Path(P.EnvBuilder().ensure(program, [SIX]))
    assert sorted(os.listdir(marks)) == []
    assert (site / "six.py").is_file()
