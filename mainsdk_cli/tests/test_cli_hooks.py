"""Commands other distributions add to ``mainsdk`` through the ``mainsdk_cli_commands`` hook.

The plugins here are real installed distributions as far as ``importlib.metadata`` is concerned: a
``*.dist-info`` folder with its ``mainsdk.cli`` entry point on ``sys.path``. Where a distribution must be
missing (``mainsdk check`` without mainsdk-check), the command runs in a child interpreter whose path holds
core, the command line and their own dependencies only, whatever else this environment has installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path

import mainsdk
import pytest
from mainsdk_cli.cli import main

import mainsdk_cli

CORE_SRC = Path(mainsdk.__file__).resolve().parent.parent
CLI_SRC = Path(mainsdk_cli.__file__).resolve().parent.parent

PLUGIN_SOURCE = """
import sys

from mainsdk.hookspecs import hookimpl

CALLS = []


def hello(argv):
    CALLS.append(("hello", argv))
    print("hello", *argv)
    return 7


def sandbox_hello(argv):
    CALLS.append(("sandbox hello", argv))
    return 0


@hookimpl
def mainsdk_cli_commands(commands):
    for name, main in NAMES:
        commands.add(name, help=f"{name}: a third party's command", main=main)


NAMES = [("hello", hello), ("sandbox hello", sandbox_hello)]
"""


@pytest.fixture
def install_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Path]]:
    """Install a ``mainsdk.cli`` plugin module (distribution ``hello-cli``); call it with the module's source."""
    modules: list[str] = []

    def install(source: str = PLUGIN_SOURCE, module: str = "hello_cli") -> Path:
        (tmp_path / f"{module}.py").write_text(source)
        info = tmp_path / f"{module.replace('_', '-')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[mainsdk.cli]\n{module} = {module}\n")
        modules.append(module)
        sys.modules.pop(module, None)
        return tmp_path

    monkeypatch.syspath_prepend(str(tmp_path))
    yield install
    for module in modules:
        sys.modules.pop(module, None)


def test_a_plugins_command_gets_its_arguments_and_gives_the_exit_status(
    install_plugin: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugin()
    # Options after the command's name are the plugin's, never parsed by the mainsdk command line.
    assert main(["hello", "--loud", "world", "-x"]) == 7
    assert capsys.readouterr().out == "hello --loud world -x\n"
    assert main(["sandbox", "hello", "--help"]) == 0
    assert sys.modules["hello_cli"].CALLS == [("hello", ["--loud", "world", "-x"]), ("sandbox hello", ["--help"])]


def test_mainsdk_help_lists_the_plugins_commands(
    install_plugin: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugin()
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "hello: a third party's command" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["sandbox", "--help"])
    listed = capsys.readouterr().out
    assert "sandbox hello: a third party's command" in listed and "list the installed drivers" in listed


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ('[("sandbox run", hello)]', "'mainsdk sandbox run' is already a command"),
        ('[("hello", hello), ("hello", hello)]', "'mainsdk hello' is already a command"),
        ('[("sandbox", hello)]', "'mainsdk sandbox' is already a command"),
        ('[("deep sub command", hello)]', "adds the command 'deep sub command'; a command is one word"),
        ('[("--version", hello)]', "adds the command '--version'; a command is one word"),
        ("[None]", "failed to add its commands: TypeError("),
    ],
    ids=["core-command", "twice", "a-group", "too-deep", "an-option", "raises"],
)
def test_a_command_a_plugin_may_not_add_is_one_line_with_its_code(
    install_plugin: Callable[..., Path], capsys: pytest.CaptureFixture[str], names: str, expected: str
) -> None:
    install_plugin(
        PLUGIN_SOURCE.replace('NAMES = [("hello", hello), ("sandbox hello", sandbox_hello)]', f"NAMES = {names}")
    )
    assert main(["sandbox", "drivers"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mainsdk: MAIN-SANDBOX-0001: the command-line plugin 'hello_cli'")
    assert expected in err and err.count("\n") == 1


def test_a_plugin_that_fails_to_import_is_named(
    install_plugin: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    install_plugin("import no_such_module_here\n", module="broken_cli")
    assert main(["sandbox", "drivers"]) == 2
    err = capsys.readouterr().err
    assert "the command-line plugin 'broken_cli' (broken_cli) failed to import" in err and "Traceback" not in err


def _core_only(tmp_path: Path) -> list[str]:
    """A child interpreter's command that sees core, the command line and the modules they import, and no other
    distribution.

    ``-S``: no site-packages; the third-party packages core imports are linked into a folder of their own,
    without their ``*.dist-info`` folders, so no entry point of this environment (mainsdk-check's,
    mainsdk-mcp's, a driver's) is found.
    """
    probe = "import json, sys, mainsdk_cli.cli; print(json.dumps([m for m in sys.modules if '.' not in m]))"
    names = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout)
    site = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
    deps = tmp_path / "deps"
    deps.mkdir()
    for name in names:
        module = sys.modules.get(name) or __import__(name)
        where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", [])), None)
        if where is None:
            continue
        path = Path(where).resolve()
        for root in site:
            if root in path.parents:
                top = root / path.relative_to(root).parts[0]
                if not (deps / top.name).exists():
                    (deps / top.name).symlink_to(top)
    paths = [str(CORE_SRC), str(CLI_SRC), str(deps)]
    boot = f"import sys; sys.path[:0] = {paths!r}; from mainsdk_cli.cli import main; sys.exit(main())"
    return [sys.executable, "-S", "-c", boot]


@pytest.mark.parametrize(
    ("argv", "distribution", "folder"),
    [
        (["check", "--format", "json", "src"], "mainsdk-check", "./mainsdk_check"),
        (["sandbox", "mcp", "--session"], "mainsdk-mcp", "./mainsdk_mcp"),
    ],
)
def test_an_app_not_installed_says_which_distribution_to_install(
    tmp_path: Path, argv: list[str], distribution: str, folder: str
) -> None:
    core_only = _core_only(tmp_path)
    done = subprocess.run([*core_only, *argv], capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"mainsdk: 'mainsdk {' '.join(argv[: 2 if argv[0] == 'sandbox' else 1])}' is in the {distribution} "
        f"distribution, which is not installed; install it: pip install {distribution} "
        f"(from a checkout of this repository: pip install {folder})\n"
    )
    listed = subprocess.run([*core_only, "--help"], capture_output=True, text=True, check=False)
    assert "find unsafe code and config (install mainsdk-check)" in listed.stdout


def test_importing_the_command_line_imports_no_app() -> None:
    # The apps' plugins are loaded when a command runs (``load_cli_commands``), never by the import: nor mcp.
    probe = "import json, sys, mainsdk_cli, mainsdk_cli.cli; print(json.dumps(sorted(sys.modules)))"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONSTARTUP"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)
    loaded = json.loads(done.stdout)
    assert "mainsdk_cli.cli" in loaded
    assert [m for m in loaded if m.split(".")[0] in ("mainsdk_check", "mainsdk_mcp", "mcp", "mcp_types")] == []
