"""The README's examples, run as written: its command lines in a shell, its Python blocks in a fresh interpreter.

The examples run one after another in one app folder holding the README's tutorial ``main.yaml``, in the
README's order, as a reader following it would run them: with real files, the real CLI and the real local
driver, so a README that drifts from the code, or an example that breaks a later one, fails here. In a
Python block, a line ending in a comment that is a Python value (``# '2\\n'``) is checked to give that value
(``...`` stands for anything), and a line whose comment starts with an error code (``# MAIN-SANDBOX-0005
...``) is checked to raise it.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```(?P<lang>\w+)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"MAIN-[A-Z]+-\d{4}")


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _blocks(title: str, lang: str) -> list[str]:
    return [m["body"] for m in BLOCK.finditer(_section(title)) if m["lang"] == lang]


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAINSDK_")}
    # A fresh shell: not the test runner's PATH to its venv (pytest run as .venv/bin/pytest has none), so a
    # bare `mainsdk` or `python` works only because the README's set-up activated the venv (_shell).
    bin_dir = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != bin_dir)
    env.pop("VIRTUAL_ENV", None)
    return env


def _activation() -> str:
    """The README set-up's activation step, for the venv running these tests (the one the set-up made here)."""
    block = BLOCK.search(_section("Two commands"))
    assert block is not None
    setup = next(line for line in block["body"].splitlines() if "mainsdk sandbox run" in line)
    [step] = [part.strip() for part in setup.split("&&") if part.strip().endswith("/bin/activate")]
    assert step == ". .venv/bin/activate", step  # the README activates the venv it made, as later steps need
    activate = Path(sys.prefix) / "bin" / "activate"
    assert activate.is_file(), f"{sys.prefix} is no venv with bin/activate: run the tests in one (tox, .venv)"
    return f". {shlex.quote(str(activate))}"


def _shell(line: str, folder: Path, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    """``line`` in a fresh bash that followed the README's set-up: its venv activated, nothing else inherited."""
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", f"{_activation()} && {line}"],
        cwd=folder,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# --- Command line ---------------------------------------------------------------------------------------------------


def test_the_one_line_main_yaml_a_secret_refusal_asks_for_lets_every_language_run(tmp_path: Path) -> None:
    command = "API_KEY=s3cret mainsdk sandbox run --env KEY=secret:API_KEY"
    refused = _shell(f"{command} --code 'print(1)'", tmp_path)
    assert refused.returncode == 2
    assert "MAIN-SANDBOX-0009" in refused.stderr and "list it there in main.yaml" in refused.stderr
    (tmp_path / "main.yaml").write_text("sandbox: { secrets: [API_KEY] }\n")  # what the message asks for
    for language, code, expected in [
        ("python", "import os; print(len(os.environ['KEY']))", "6\n"),
        ("node", "console.log(process.env.KEY.length)", "6\n"),
        ("bash", "echo ${#KEY}", "6\n"),
    ]:
        done = _shell(f"{command} --language {language} --code {shlex.quote(code)}", tmp_path)
        assert (done.returncode, done.stdout, done.stderr) == (0, expected, ""), language


def test_the_readme_shell_is_fresh_a_bare_mainsdk_is_found_only_through_the_activation(tmp_path: Path) -> None:
    # Issue 35: the README never activated its venv, and later steps ran a bare `mainsdk` (command not found).
    bare = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", "command -v mainsdk || echo none"],
        env=_clean_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert bare.stdout.strip() == "none" or not bare.stdout.startswith(sys.prefix), bare.stdout
    found = _shell("command -v mainsdk && command -v pip", tmp_path)
    assert found.stdout.splitlines() == [f"{sys.prefix}/bin/mainsdk", f"{sys.prefix}/bin/pip"], found.stdout


# --- In README order ------------------------------------------------------------------------------------------------

_PRELUDE = '''
import mainsdk


def _matches(actual, expected):
    """``expected`` as the README writes it: ... is anything, a mapping lists only the keys it shows."""
    if expected is ...:
        return True
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and _matches(actual[k], v) for k, v in expected.items())
    if isinstance(expected, set) and expected == {...}:
        return isinstance(actual, dict)
    if isinstance(expected, (list, tuple)):
        return len(actual) == len(expected) and all(_matches(a, e) for a, e in zip(actual, expected))
    return actual == expected


def _expect(actual, expected, line):
    assert _matches(actual, expected), f"README line {line!r} gave {actual!r}"

'''


def _comment(line: str) -> tuple[str, str] | None:
    """The code and the trailing comment of one line, or None when it has no comment."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line).readline))
    except (tokenize.TokenError, SyntaxError):
        return None
    for token in tokens:
        if token.type == tokenize.COMMENT and line[: token.start[1]].strip():
            return line[: token.start[1]].rstrip(), token.string[1:].strip()
    return None


def _expected_value(comment: str) -> str | None:
    """The Python value a comment shows (``'2\\n'``, ``b'2'``, ``{...}``), or None when it is prose."""
    for candidate in (comment, comment.split(" — ", maxsplit=1)[0]):
        try:
            ast.literal_eval(candidate)
        except (ValueError, SyntaxError):
            continue
        return candidate
    return None


def checked_python(block: str) -> str:
    """The block with each value-showing or error-showing line turned into a check of it."""
    lines = []
    for line in block.splitlines():
        split = _comment(line)
        if split is None:
            lines.append(line)
            continue
        code, comment = split
        indent = code[: len(code) - len(code.lstrip())]
        expression = code.strip()
        if match := re.fullmatch(r"print\((.*)\)", expression):
            expression = match[1]
        code_match = CODE.match(comment)
        value = _expected_value(comment)
        if code_match:
            lines += [
                f"{indent}try:",
                f"{indent}    {expression}",
                f"{indent}except mainsdk.SandboxError as error:",
                f"{indent}    assert error.code == {code_match[0]!r}, (error.code, {line!r})",
                f"{indent}else:",
                f"{indent}    raise AssertionError({line!r} + ' did not raise')",
            ]
        elif value is not None and "=" not in expression.split("(")[0]:
            lines.append(f"{indent}_expect({expression}, {value}, {line.strip()!r})")
        else:
            lines.append(line)
    return _PRELUDE + "\n".join(lines) + "\n"


def _tutorial_config() -> str:
    [config] = _blocks("The tutorial, in Python", "yaml")
    return config


# Every example a reader can run here, in the README's order. Not run: the install commands ("Two commands",
# ``pip install``), the MCP servers (they wait for a client: the MCP example starts one), the console transcripts,
# the figure block that needs pandas in the box, and "Packages in the box" (it builds pandas from PyPI).
EXAMPLES = [
    ("The tutorial, in Python", "python", 0),
    ("Sessions: one box across commands", "python", 0),
    ("Sessions: one box across commands", "python", 1),  # pause, resume, snapshot and fork
    ("Notebook sessions: cells, rich results, background processes", "python", 0),
    ("Agents: a code-runner action", "python", 0),
    ("Agents: a code-runner action", "python", 1),  # an MCP client receiving a plot as an image
    ("Command line", "sh", 0),
]


def _position(title: str) -> int:
    return README.read_text(encoding="utf-8").index(f"\n## {title}\n")


def _run_python(folder: Path, block: str) -> None:
    script = checked_python(block)
    checks = script[len(_PRELUDE) :]
    assert "_expect(" in checks or "except mainsdk.SandboxError" in checks  # each block shows a value to check
    (folder / "example.py").write_text(script)
    done = _shell("python example.py", folder, timeout=300)  # as a reader runs a saved example
    assert done.returncode == 0, f"{done.stderr}\n--- the example as run ---\n{script}"


def _run_command_lines(folder: Path, block: str) -> None:
    # The files the examples name.
    (folder / "script.sh").write_text('echo "mode=$MODE key=${#KEY} rows=$(wc -l < data.csv)"\n')
    (folder / "data.csv").write_text("a\nb\n")
    outputs = []
    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        done = _shell(line, folder)
        assert (done.returncode, done.stderr) == (0, ""), f"{line}\n{done.stderr}"
        outputs.append(done.stdout)
    first, *rest = outputs
    assert first == "2\n"
    assert "mode=fast key=6 rows=2\n" in rest  # the secret reached the run, its value is never printed
    [as_json] = [json.loads(out) for out in rest if out.startswith("{")]
    assert (as_json["stdout"], as_json["exit_code"], as_json["stop"]) == ("1\n", 0, None)  # node, from stdin
    assert any(out.startswith("local ") or "\nlocal " in out for out in rest)


def test_the_examples_run_one_after_another_in_one_folder_as_written(tmp_path: Path) -> None:
    assert [_position(title) for title, _, _ in EXAMPLES] == sorted(_position(title) for title, _, _ in EXAMPLES)
    (tmp_path / "main.yaml").write_text(_tutorial_config())  # written once, as the tutorial says
    for title, lang, index in EXAMPLES:
        block = _blocks(title, lang)[index]
        if lang == "python":
            _run_python(tmp_path, block)
        else:
            _run_command_lines(tmp_path, block)
    assert (tmp_path / "main.yaml").read_text() == _tutorial_config()  # no example rewrote the reader's config


def test_the_checks_a_readme_line_becomes_can_fail(tmp_path: Path) -> None:
    # Without this, a transformation that checks nothing would pass every README.
    wrong = textwrap.dedent(
        """\
        from mainsdk import sandbox
        sandbox.run("print(1 + 1)").stdout    # '3\\n'
        """
    )
    (tmp_path / "main.yaml").write_text(_tutorial_config())
    (tmp_path / "example.py").write_text(checked_python(wrong))
    done = subprocess.run(
        [sys.executable, "example.py"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1 and "gave '2\\n'" in done.stderr


# --- The newcomer path as a user who is not root ---------------------------------------------------------------------

NOBODY = 65534
JS_CELL = (
    "from mainsdk import sandbox\n"
    "with sandbox.create() as session:\n"
    "    cell = session.run_code('const r = await Promise.resolve([3, 1]); r.length', language='javascript')\n"
    "    print(cell.text, cell.error)\n"
)


def _setup_line() -> str:
    block = BLOCK.search(_section("Two commands"))
    assert block is not None
    return next(line for line in block["body"].splitlines() if "mainsdk sandbox run" in line)


def _as_nobody(command: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    env.update({k: v for k, v in os.environ.items() if k.startswith(("PIP_", "NODE_EXTRA_CA")) or k.endswith("_proxy")})
    return subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "bash", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


@pytest.fixture
def newcomer_root() -> Iterator[Path]:
    """A folder the other user owns (pytest's own tmp folders are root's, mode 0700), removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="mainsdk-newcomer-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="running the newcomer as another user needs root")
def test_the_newcomer_path_works_for_a_user_who_is_not_root(newcomer_root: Path) -> None:
    # Issue 35: as a non-root user (no writable cgroup: memory is RLIMIT_AS), the set-up worked but node died at
    # the default limits (SIGTRAP), and so did every JS cell. The README's set-up line, run as written by a user
    # who is not root, in a fresh clone of what it installs; then a python run, a node run and a JS cell.
    if shutil.which("setpriv") is None or shutil.which("node") is None:
        pytest.skip("needs setpriv and node (.ci/run installs both)")
    root = newcomer_root
    clone, home = root / "clone", root / "home"
    home.mkdir()
    line = _setup_line()
    for folder in sorted(set(re.findall(r"\./([\w/]+)", line))):
        shutil.copytree(
            README.parent / folder, clone / folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
        )
    for path in (root, *root.rglob("*")):
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    set_up = _as_nobody(line, clone, home)
    assert (set_up.returncode, set_up.stdout.splitlines()[-1:]) == (0, ["2"]), set_up.stderr[-3000:]  # after pip's
    activate = ". .venv/bin/activate && "  # as the README's set-up does, in the shell a later step runs in
    node = _as_nobody(activate + "mainsdk sandbox run --language node --code 'console.log(1 + 1)'", clone, home)
    assert (node.returncode, node.stdout, node.stderr) == (0, "2\n", "")
    python = _as_nobody(activate + "mainsdk sandbox run --code 'print(6 * 7)'", clone, home)
    assert (python.returncode, python.stdout) == (0, "42\n"), python.stderr
    cell = _as_nobody(activate + f"python -c {shlex.quote(JS_CELL)}", clone, home)
    assert (cell.returncode, cell.stdout) == (0, "2 None\n"), cell.stderr
