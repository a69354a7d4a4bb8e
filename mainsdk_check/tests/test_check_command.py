"""``mainsdk check`` as a command: arguments, output formats, exit statuses, and the project's own code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from mainsdk.config import CONFIG_ENV_VAR
from mainsdk.errors import NETWORK_NOT_ALLOWED, UNSAFE_EVAL
from mainsdk_check.config_checks import CONFIG_FILE_NAME
from packaging.requirements import Requirement
from ruamel.yaml import YAML

from mainsdk_check import main, run_check

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project directory as the working directory."""
    monkeypatch.delenv(CONFIG_ENV_VAR, raising=False)
    monkeypatch.delenv("MAINSDK_ENV", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_clean_code_exits_0(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(project / "app.py", 'print(eval("1 + 1"))\n')
    assert main([]) == 0
    assert capsys.readouterr().out == "No findings in 1 Python file.\n"


def test_findings_exit_1_and_print_file_line_col_code_message(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(project / "pkg" / "calc.py", "def f(x):\n    return eval(x)\n")
    assert main([]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(
        "pkg/calc.py:2:12: MAIN-SANDBOX-0010 `eval(...)` runs a value that is not a string literal"
    )
    assert out[1] == "    fix: run it with sandbox.run instead, outside this process, or pass a string literal"
    assert out[-1] == "1 finding in 1 Python file."


def test_human_paths_are_relative_to_the_working_directory(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / ".git").mkdir()
    write(project / "pkg" / "calc.py", "eval(x)\n")
    monkeypatch.chdir(project / "pkg")
    assert main(["."]) == 1
    assert capsys.readouterr().out.startswith("calc.py:1:1: ")
    assert main(["--format", "json", "."]) == 1
    assert json.loads(capsys.readouterr().out)["findings"][0]["path"] == "pkg/calc.py"  # JSON: from the root


def test_silenced_findings_pass_and_are_counted(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(
        project / "a.py", "eval(x)  # mainsdk: allow MAIN-SANDBOX-0010\neval(y)  # mainsdk: allow MAIN-SANDBOX-0010\n"
    )
    assert main([]) == 0
    assert capsys.readouterr().out == "No findings in 1 Python file (2 silenced by # mainsdk: allow).\n"


def test_json_lists_every_finding_with_silenced_ones_marked(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(project / "a.py", "eval(x)  # mainsdk: allow MAIN-SANDBOX-0010\nexec(y)\n")
    write(project / "main.yaml", "sandbox:\n  driver: e2b\n  network: [pypi.org]\n")
    assert main(["--format", "json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert [(f["code"], f["path"], f["line"], f["silenced"]) for f in document["findings"]] == [
        (UNSAFE_EVAL, "a.py", 1, True),
        (UNSAFE_EVAL, "a.py", 2, False),
        (NETWORK_NOT_ALLOWED, "main.yaml", 3, False),
    ]
    assert set(document["findings"][0]) == {"code", "path", "line", "column", "message", "fix", "silenced"}
    assert document["summary"] == {"files": 1, "findings": 2, "silenced": 1, "errors": [], "skipped": [], "notes": []}
    assert document["config"] == "main.yaml"
    assert document["exit_status"] == 1


def test_env_is_passed_to_the_config_check(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(project / "main.yaml", "sandbox:\n  driver: local\n")
    assert main([]) == 0
    assert main(["--env", "prod"]) == 1
    assert "main.yaml:2:3: MAIN-SANDBOX-0011" in capsys.readouterr().out


def test_env_defaults_to_mainsdk_env(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write(project / "main.yaml", "sandbox:\n  driver: local\n")
    monkeypatch.setenv("MAINSDK_ENV", "production")
    assert main([]) == 1
    assert main(["--env", "development"]) == 0


def test_paths_and_excludes(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(project / "a" / "bad.py", "eval(x)\n")
    write(project / "b" / "bad.py", "eval(x)\n")
    assert main(["b"]) == 1
    capsys.readouterr()
    assert main(["--exclude", "b/", "b"]) == 0
    assert capsys.readouterr().out == (
        "No findings in 0 Python files; 1 named path skipped by .gitignore, .mainsdkignore or --exclude.\n"
    )
    assert main(["--exclude", "bad.py"]) == 0
    write(project / ".gitignore", "a/\n")
    capsys.readouterr()
    assert main(["--format", "json"]) == 1
    assert [f["path"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["b/bad.py"]


def test_a_missing_path_exits_2_with_one_line(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["missing.py"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "mainsdk check: missing.py: no such file or directory\n"


def test_a_missing_config_exits_2(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", "nope.yaml"]) == 2
    assert capsys.readouterr().err == "mainsdk check: --config names nope.yaml, which is not a file\n"


def test_a_bad_option_exits_2_with_one_line(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--format", "xml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("mainsdk check: argument --format: invalid choice: 'xml'")


def test_help_exits_0(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "usage: mainsdk check" in capsys.readouterr().out


def test_a_file_that_does_not_parse_exits_2_and_the_rest_is_still_checked(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(project / "broken.py", "def f(:\n")
    write(project / "bad.py", "eval(x)\n")
    (project / "latin.py").write_bytes(b"x = '\xe9'\n")  # not UTF-8 and no coding line
    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.out.startswith("bad.py:1:1: MAIN-SANDBOX-0010")
    assert "2 files could not be checked" in captured.out
    errors = captured.err.splitlines()
    assert errors[0].startswith("mainsdk check: cannot parse broken.py line 1: ")
    assert errors[1].startswith("mainsdk check: cannot read latin.py: ")
    assert "Traceback" not in captured.err


def test_a_file_too_deep_to_analyse_is_an_error_not_a_crash(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(project / "deep.py", "x = " + " + ".join(['"a"'] * 5000) + "\n")
    assert main([]) == 2
    assert (
        capsys.readouterr().err
        == "mainsdk check: cannot check deep.py: an expression is nested too deeply to analyse\n"
    )


def test_a_coding_line_is_honoured(project: Path) -> None:
    (project / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\nx = '\xe9'; eval(x)\n")
    [finding] = run_check(cwd=project).findings
    assert (finding.line, finding.column) == (2, len("x = 'é'; ") + 1)


def test_the_module_runs_as_a_program(project: Path) -> None:
    write(project / "bad.py", "eval(x)\n")
    done = subprocess.run([sys.executable, "-m", "mainsdk_check"], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert done.stdout.startswith("bad.py:1:1: MAIN-SANDBOX-0010")


def test_the_project_s_own_code_has_no_unsilenced_findings() -> None:
    env = {key: value for key, value in os.environ.items() if key not in (CONFIG_ENV_VAR, "MAINSDK_ENV")}
    done = subprocess.run(
        [sys.executable, "-m", "mainsdk_check", "--format", "json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    document = json.loads(done.stdout)
    unsilenced = [f for f in document["findings"] if not f["silenced"]]
    assert unsilenced == []
    assert document["summary"]["errors"] == []
    assert done.returncode == 0
    assert document["summary"]["files"] > 10


# --- A main.yaml the loader refuses: exit 2, not 1 (issue 12) -------------------------------------------------------


def test_a_main_yaml_with_a_merge_key_is_checked_like_any_other(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(
        project / "main.yaml",
        "defaults: &defaults\n  timeout: 10s\nsandbox:\n  driver: e2b\n  limits:\n    <<: *defaults\n    memory: 1GB\n",
    )
    assert main([]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and captured.err == ""


def test_a_main_yaml_the_loader_refuses_exits_2_and_still_lists_its_problems(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(project / "main.yaml", "defaults: &d\n  timeout: 99999999999h\nsandbox:\n  limits:\n    <<: *d\n")
    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.out.startswith("main.yaml:2:3: MAIN-SANDBOX-0001 sandbox.limits.timeout: ")
    assert "too large" in captured.out
    assert captured.err == (
        "mainsdk check: main.yaml cannot be loaded: the app would refuse it at start (1 problem listed above)\n"
    )


@pytest.mark.parametrize(
    "text",
    [
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)),
        "sandbox:\n  network: " + "[" * 5000 + "\n",
        "sandbox:\n" + "".join(f"{'  ' * (depth + 1)}k{depth}:\n" for depth in range(500)),
        "sandbox:\n  limits:\n    timeout: " + "9" * 5000 + "\n",
        "sandbox: !!python/object/apply:os.system [echo pwned]\n",
        "- just\n- a list\n",
    ],
    ids=["alias-bomb", "deep-flow", "deep-block", "5000-digits", "python-tag", "list-root"],
)
def test_a_hostile_main_yaml_exits_2_with_a_coded_finding_and_no_traceback(
    project: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    write(project / "main.yaml", text)
    assert main([]) == 2
    captured = capsys.readouterr()
    assert "MAIN-SANDBOX-0001" in captured.out
    assert "Traceback" not in captured.err and "cannot be loaded" in captured.err


# --- The pre-commit hook runs on main*.yaml too (issue 12) ----------------------------------------------------------


def _hook_selects(hook: dict[str, object], filename: str, tags: set[str]) -> bool:
    """Whether pre-commit passes ``filename`` (with identify's ``tags``) to ``hook``.

    As pre-commit's ``Classifier`` decides (pre_commit/commands/run.py: ``filter_by_include_exclude``, then
    ``by_types``): ``files`` searched and ``exclude`` not, then all of ``types`` and one of ``types_or``.
    """
    files, exclude = str(hook.get("files", "")), str(hook.get("exclude", "^$"))
    types, types_or = set(hook.get("types", ["file"])), set(hook.get("types_or", []))  # type: ignore[call-overload]
    if not re.search(files, filename) or re.search(exclude, filename):
        return False
    return tags >= types and (not types_or or bool(tags & types_or))


@pytest.mark.parametrize(
    ("filename", "tags", "selected"),
    [
        ("main.yaml", {"file", "text", "yaml"}, True),
        ("main.prod.yaml", {"file", "text", "yaml"}, True),
        ("main.production.yml", {"file", "text", "yaml"}, True),
        ("services/api/main.yaml", {"file", "text", "yaml"}, True),
        ("app.py", {"file", "text", "python"}, True),
        ("bin/tool", {"file", "text", "executable", "python"}, True),  # a script with a python #! line
        (".github/workflows/ci.yaml", {"file", "text", "yaml"}, False),
        ("docker-compose.yml", {"file", "text", "yaml"}, False),
        ("config/domain.yaml", {"file", "text", "yaml"}, False),
        ("README.md", {"file", "text", "markdown"}, False),
    ],
)
def test_the_pre_commit_hook_runs_on_python_files_and_main_yaml_files(
    filename: str, tags: set[str], selected: bool
) -> None:
    [hook] = YAML(typ="safe").load((REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert hook["id"] == "mainsdk-check" and hook["entry"] == "mainsdk check"
    assert _hook_selects(hook, filename, tags) is selected
    if selected and "yaml" in tags:  # and the check reads every file the hook passes it as a config file
        assert CONFIG_FILE_NAME.fullmatch(filename.rsplit("/", 1)[-1])


def test_pre_commit_installs_core_the_command_and_the_linter_only() -> None:
    # pre-commit installs the repository's root for a `language: python` hook: no driver, no audit sinks;
    # the hook's entry, `mainsdk check`, is the command line's (mainsdk-cli) with the linter's plugin.
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = sorted(Requirement(text).name for text in project["dependencies"])
    assert names == ["mainsdk", "mainsdk-check", "mainsdk-cli"]
    assert "optional-dependencies" not in project


def test_a_main_yaml_passed_by_the_hook_is_checked_even_away_from_the_working_directory(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(project / "main.yaml", "sandbox:\n  driver: e2b\n")
    write(project / "services" / "api" / "main.yaml", "sandbox:\n  limits:\n    timeout: 597h\n")
    assert main(["services/api/main.yaml"]) == 2
    captured = capsys.readouterr()
    assert captured.out.startswith("services/api/main.yaml:3:5: MAIN-SANDBOX-0001 sandbox.limits.timeout: ")
    assert main(["main.yaml"]) == 0  # the config file itself is checked once, not twice


def test_a_main_yaml_too_large_to_be_one_exits_2(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with (project / "main.yaml").open("wb") as file:
        file.truncate(1024**3)  # sparse: no disk used, and never read whole
    assert main([]) == 2
    captured = capsys.readouterr()
    assert "MAIN-SANDBOX-0001" in captured.out and "may be at most" in captured.out
    assert "cannot be loaded" in captured.err


def test_a_value_the_terminal_cannot_show_is_escaped_not_a_crash(project: Path) -> None:
    write(project / "main.yaml", 'sandbox:\n  driver: "\\ud800\\e[2J"\n')
    env = {key: value for key, value in os.environ.items() if key not in (CONFIG_ENV_VAR, "MAINSDK_ENV")}
    done = subprocess.run(
        [sys.executable, "-m", "mainsdk_check"], capture_output=True, text=True, check=False, env=env, cwd=project
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert '"\\ud800\\x1b[2J" is not a driver id' in done.stdout and "\x1b" not in done.stdout


def test_a_driver_set_through_a_merge_key_is_placed_and_judged_for_production(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(project / "main.yaml", "base: &base\n  driver: local\nsandbox:\n  <<: *base\n  network: [pypi.org]\n")
    assert main(["--env", "prod"]) == 1
    out = capsys.readouterr().out
    assert "main.yaml:2:3: MAIN-SANDBOX-0011 sandbox.driver is local" in out  # where the merged mapping writes it
