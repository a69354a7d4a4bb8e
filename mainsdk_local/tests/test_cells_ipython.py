"""Python cells speak IPython on the local driver: IPython itself, from the kernel's pinned package set, in real boxes.

The set (``mainsdk.driver.KERNEL_PACKAGES``) is built once on the host by the driver's ``EnvBuilder`` (here into
pytest's cache folder, as an app's goes into ~/.cache/mainsdk/envs) and bound read-only at
``/opt/mainsdk/kernel`` in the box, apart from the user's site-packages.
"""

from __future__ import annotations

import base64
import glob
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from mainsdk import RichResult, SandboxError, secret
from mainsdk.cells import PACKAGE_INDEX
from mainsdk.config import load_config_text
from mainsdk.errors import INVALID_OPTION, SECRET_NOT_ALLOWED
from mainsdk_local.launcher.common import KERNEL_SITE

from mainsdk_local import local_sandbox_driver

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@pytest.fixture(autouse=True)
def kernel_cache(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # The kernel's set is built once into pytest's cache folder (about 3 s with uv), then reused.
    monkeypatch.setenv("XDG_CACHE_HOME", str(request.config.cache.mkdir("mainsdk-packages")))
    yield


def test_cells_run_through_ipython_from_the_kernels_own_folder(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create() as session:
        where = session.run_code("import IPython, sys\n(IPython.__file__, get_ipython().__class__.__mro__[1].__name__)")
        assert where.text == f"('{KERNEL_SITE}/IPython/__init__.py', 'InteractiveShell')"
        # After the user's site-packages on sys.path; the box's python execs see the folder read-only.
        order = session.run_code(
            "sys.path.index('/opt/mainsdk/kernel') > max(i for i, p in enumerate(sys.path) if 'site-packages' in p)"
        )
        assert order.text == "True"
        written = session.run_code("open('/opt/mainsdk/kernel/x', 'w')")
        assert written.error is not None and written.error.name == "OSError"


def test_magics_shell_commands_and_a_cell_indented_as_a_whole(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create() as session:
        timed = session.run_code("%timeit -n 3 -r 2 sum(range(10))")
        assert timed.ok and "per loop (mean ± std. dev. of 2 runs, 3 loops each)" in timed.stdout
        cell_magic = session.run_code("%%time\ny = 6 * 7")
        assert cell_magic.ok and "Wall time:" in cell_magic.stdout and session.run_code("y").text == "42"
        env = session.run_code("%env GREETING=hello\n!echo $GREETING from sh")
        assert env.ok and env.stdout == "env: GREETING=hello\nhello from sh\n"
        moved = session.run_code("%mkdir sub\n%cd sub\nimport os\nos.getcwd()")
        assert moved.ok and moved.text == "'/work/sub'"
        captured = session.run_code("files = !ls /opt/mainsdk/kernel\n'IPython' in files")
        assert captured.text == "True"
        indented = session.run_code("    a = 1\n    if a:\n        a += 1\n    a")
        assert indented.ok and indented.text == "2"
        failed = session.run_code("!exit 3\n_exit_code")
        assert failed.text == "3"


def test_display_and_the_final_expression_come_with_all_their_forms(make_sandbox: Callable[..., Any]) -> None:
    code = f"""
import base64
from IPython.display import HTML, Javascript, Latex, Markdown, display
class Chart:
    def _repr_png_(self): return base64.b64decode({base64.b64encode(PNG).decode()!r})
    def _repr_jpeg_(self): return b"\\xff\\xd8\\xff jpeg"
    def _repr_latex_(self): return r"$\\alpha$"
    def _repr_markdown_(self): return "**chart**"
    def __repr__(self): return "Chart()"
class Bundle:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {{"text/plain": "Bundle()", "application/vnd.example+json": {{"n": 1}}, "text/html": "<i>b</i>"}}
display(HTML("<b>bold</b>"), Markdown("*md*"))
display(Javascript("console.log(1)"))
display(Bundle())
Chart()
"""
    with make_sandbox().sandbox.create() as session:
        result = session.run_code(code)
    assert result.ok, result.error
    forms = [{r.mime: r.data for r in d.forms} for d in result.displays]
    assert forms[0] == {"text/html": "<b>bold</b>", "text/plain": "<IPython.core.display.HTML object>"}
    assert forms[1] == {"text/markdown": "*md*", "text/plain": "<IPython.core.display.Markdown object>"}
    assert forms[2] == {
        "application/javascript": "console.log(1)",
        "text/plain": "<IPython.core.display.Javascript object>",
    }
    assert forms[3] == {"application/vnd.example+json": '{"n": 1}', "text/html": "<i>b</i>", "text/plain": "Bundle()"}
    assert forms[4] == {
        "image/png": PNG,
        "image/jpeg": b"\xff\xd8\xff jpeg",
        "text/markdown": "**chart**",
        "text/latex": "$\\alpha$",
        "text/plain": "Chart()",
    }
    assert [d.main for d in result.displays] == [False, False, False, False, True]
    assert result.text == "Chart()" and result.displays[-1].text == "Chart()"
    quiet = result  # a trailing semicolon shows nothing, as in a notebook
    with make_sandbox().sandbox.create() as session:
        quiet = session.run_code("1 + 1;")
    assert quiet.ok and quiet.results == ()


def test_errors_are_ipythons_text_and_exit_ends_only_the_cell(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create() as session:
        session.run_code("x = 'kept'")
        failed = session.run_code("def f():\n    raise ValueError('bad value')\nf()")
        assert failed.error is not None and (failed.error.name, failed.error.value) == ("ValueError", "bad value")
        assert (
            "Cell In[2], line 3" in failed.error.traceback and "----> 2     raise ValueError" in failed.error.traceback
        )
        assert "\x1b[" not in failed.error.traceback and failed.stdout == ""  # on the error, not on stdout
        syntax = session.run_code("def (:")
        assert (
            syntax.error is not None and syntax.error.name == "SyntaxError" and "Cell In[3]" in syntax.error.traceback
        )
        usage = session.run_code("%timeit -q -z")
        assert usage.error is not None and usage.error.name == "UsageError"
        exited = session.run_code("import sys\nsys.exit(3)")
        assert exited.error is not None and exited.error.name == "SystemExit" and exited.state_kept
        after = session.run_code("x")
        assert after.text == "'kept'" and not after.restarted


def test_a_timeout_through_ipython_interrupts_a_shell_command_and_keeps_the_state(
    make_sandbox: Callable[..., Any],
) -> None:
    with make_sandbox().sandbox.create() as session:
        session.run_code("x = 'kept'")
        stopped = session.run_code("!sleep 30", timeout="1s")
        assert stopped.stop == "timeout" and stopped.state_kept
        python = session.run_code("import time\ntime.sleep(30)", timeout="1s")
        assert python.stop == "timeout" and python.error is not None and python.error.name == "KeyboardInterrupt"
        assert session.run_code("x").text == "'kept'"


def test_shell_output_and_each_display_reach_the_app_while_the_cell_runs(make_sandbox: Callable[..., Any]) -> None:
    seen: list[tuple[float, str, object]] = []

    def on_output(stream: str, data: bytes) -> None:
        seen.append((time.monotonic(), "output", data))

    def on_result(result: RichResult) -> None:
        seen.append((time.monotonic(), "result", (result.display, result.mime, result.data, result.main)))

    code = (
        "!echo first\nimport time\ntime.sleep(1)\ndisplay('one')\ntime.sleep(1)\ndisplay('two')\ntime.sleep(1)\n'last'"
    )
    with make_sandbox().sandbox.create() as session:
        result = session.run_code(code, on_output=on_output, on_result=on_result)
        ended = time.monotonic()
    assert result.ok and result.stdout == "first\n"
    events = [what for _, _, what in seen]
    assert events == [
        b"first\n",
        (0, "text/plain", "'one'", False),
        (1, "text/plain", "'two'", False),
        (2, "text/plain", "'last'", True),
    ]
    # Each as it came, not at the cell's end: the sleeps after each event bound how early it was, whatever the load.
    first, one, two, _ = (at for at, _, _ in seen)
    assert ended - first >= 2.9 and ended - one >= 1.9 and ended - two >= 0.9 and two - one >= 0.9
    assert [r.data for r in result.results] == ["'one'", "'two'", "'last'"]  # the same, each once


def test_a_cells_own_env_holds_for_that_cell_only_and_its_secret_is_redacted(
    make_sandbox: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_API_KEY", "sk-cell-env-secret-42")
    built = make_sandbox()
    with built.sandbox.create(env={"MODE": "session"}) as session:
        own = session.run_code(
            "import os\nprint(os.environ['KEY'])\n!echo $MODE $KEY\n(os.environ['MODE'], os.environ['KEY'])",
            env={"MODE": "cell", "KEY": secret("TEST_API_KEY")},
        )
        assert own.ok and "sk-cell-env-secret-42" not in own.stdout + (own.text or "")
        assert own.stdout.count("cell") == 1 and own.text is not None and own.text.startswith("('cell', ")
        failed = session.run_code("raise KeyError(os.environ['KEY'])", env={"KEY": secret("TEST_API_KEY")})
        assert failed.error is not None and "sk-cell-env-secret-42" not in failed.error.value + failed.error.traceback
        live: list[RichResult] = []
        forms = session.run_code(
            "from IPython.display import HTML, JSON, Markdown\nk = os.environ['KEY']\n"
            "display(HTML(f'<b>{k}</b>'), Markdown(k), JSON({'k': k}))\n{'k': k}",
            env={"KEY": secret("TEST_API_KEY")},
            on_result=live.append,
        )
        assert forms.ok and {"text/html", "text/markdown", "application/json"} <= {r.mime for r in forms.results}
        assert len(live) == len(forms.results) == 7  # three outputs of two forms, and the final expression's
        assert all("sk-cell-env-secret-42" not in str(r.data) for r in (*forms.results, *live))  # every text form
        after = session.run_code("(os.environ['MODE'], os.environ.get('KEY'))")
        assert after.text == "('session', None)"  # restored after each cell
        with pytest.raises(SandboxError) as refused:
            session.run_code("print('never')", env={"X": secret("NOT_LISTED")})
        assert refused.value.code == SECRET_NOT_ALLOWED and "NOT_LISTED" in refused.value.message
        with pytest.raises(SandboxError) as bad:
            session.run_code("1", env={"1BAD": "x"})
        assert bad.value.code == INVALID_OPTION
    assert [e.kind for e in built.events if e.cell == 5] == ["refused"]


async def test_a_cells_own_env_on_async_sandbox(async_sandbox: Any) -> None:
    async with async_sandbox.create() as session:
        result = await session.run_code("import os\nos.environ['ONLY']", env={"ONLY": "here"})
        assert result.text == "'here'"
        assert (await session.run_code("os.environ.get('ONLY')")).results == ()


def test_pip_without_the_index_says_how_to_pin_and_installs_nothing(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create() as session:
        for line in ("%pip install six==1.16.0", "!pip install six", "!python3 -m pip install six"):
            result = session.run_code(line)
            assert result.ok and result.stdout == ""
            assert "no route to the package index" in result.stderr and "sandbox.packages.python" in result.stderr
            assert "six==" in result.stderr and "externally-managed" not in result.stderr
        assert session.run_code("import six").error is not None


INDEX_CONFIG = """
sandbox:
  driver: local
  local: { python: python3 }
  limits: { timeout: 60s, memory: 512MB, output: 1MB }
  network: [pypi.org, files.pythonhosted.org]
network:
  allow: [pypi.org, files.pythonhosted.org]
permissions:
  processes: [python3]
  disk: { temp: { max: 64MB } }
"""


def _index_addresses() -> dict[str, str] | None:
    """The package index's hosts as this machine's resolver answers (None: it cannot resolve them)."""
    try:
        return {host: str(socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)[0][4][0]) for host in PACKAGE_INDEX}
    except OSError:
        return None


@pytest.mark.skipif(_index_addresses() is None, reason="this machine cannot resolve the package index's hosts")
def test_pip_installs_into_the_session_when_the_index_is_among_its_hosts(
    make_sandbox: Callable[..., Any], local_config: str
) -> None:
    # The real index, through the box's egress proxy (the only hosts the session may reach). This machine's resolver
    # answers the index's names with addresses the proxy takes for private ones: the driver's resolve mapping pins
    # the names to those same answers, nothing more.
    config = load_config_text(INDEX_CONFIG)
    driver = local_sandbox_driver(permissions=config.permissions, resolve=_index_addresses())
    with make_sandbox(INDEX_CONFIG, driver=driver).sandbox.create(network=list(PACKAGE_INDEX)) as session:
        installed = session.run_code("%pip install --no-deps six==1.16.0")
        assert installed.ok and "Successfully installed six-1.16.0" in installed.stdout, installed
        assert "externally-managed" not in installed.stderr
        imported = session.run_code("import six\n(six.__version__, six.__file__.startswith('/tmp/'))")
        assert imported.text == "('1.16.0', True)"  # in the session's own folder, under the box's HOME
        listed = session.run_code("!pip list --path ~/.mainsdk/pip-packages")
        assert listed.ok and "six" in listed.stdout


def test_a_user_who_pins_ipython_gets_theirs(make_sandbox: Callable[..., Any], local_config: str) -> None:
    config = local_config.replace(
        "  secrets: [TEST_API_KEY]\n", "  secrets: [TEST_API_KEY]\n  packages:\n    python: [ipython==9.1.0]\n"
    )
    config = config.replace("timeout: 10s", "timeout: 60s")
    with make_sandbox(config).sandbox.create(packages=["ipython"]) as session:
        # The kernel's shell itself is the user's IPython: found first on sys.path, before the kernel's own set.
        shell = "sys.modules['IPython.core.interactiveshell'].__file__.startswith('/opt/mainsdk')"
        result = session.run_code(f"import IPython, sys\n(IPython.__version__, {shell}, get_ipython() is not None)")
        assert result.text == "('9.1.0', False, True)"
        shown = session.run_code("display('still a notebook')")
        assert [(r.mime, r.data, r.main) for r in shown.results] == [("text/plain", "'still a notebook'", False)]


def _old_python() -> str | None:
    found = shutil.which("python3.10")
    if found is not None and os.access(found, os.X_OK) and "shims" not in found:
        return found
    pyenv = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10*/bin/python3.10")))
    return pyenv[-1] if pyenv else None


@pytest.mark.skipif(_old_python() is None, reason="this machine has no Python 3.10 to point sandbox.local.python at")
def test_a_box_python_too_old_for_the_set_is_refused_naming_it(
    make_sandbox: Callable[..., Any], local_config: str
) -> None:
    old = _old_python()
    assert old is not None
    config = local_config.replace("python: python3,", f"python: {old},").replace(
        "processes: [python3,", f"processes: [{old},"
    )
    built = make_sandbox(config)
    with built.sandbox.create() as session, pytest.raises(SandboxError) as refused:
        session.run_code("print('never')")
    assert refused.value.code == INVALID_OPTION and old in refused.value.message and "3.10" in refused.value.message
    assert "Python 3.11 or newer" in refused.value.message and refused.value.ran is False


def test_display_lines_a_cell_forges_cannot_flood_the_app(make_sandbox: Callable[..., Any], local_config: str) -> None:
    # The cell writes 3,000 made-up display lines of 1 KB each straight on every pipe it holds (the executor's
    # result pipe among them): the supervisor passes them on as live frames, and the app takes at most
    # limits.files bytes of them (here 100 KB), whatever the box says.
    config = local_config.replace("output: 1MB }", "output: 1MB, files: 100KB }")
    forge = (
        "import json, os\nline = lambda n: json.dumps({'cell': 1, 'display': 1000 + n, 'results': [{'mime': "
        "'text/plain', 'data': 'x' * 1000, 'encoding': 'utf-8', 'display': 1000 + n}]}).encode() + b'\\n'\n"
        "for name in os.listdir('/proc/self/fd'):\n    if int(name) > 2:\n        try:\n"
        "            for n in range(3000):\n                os.write(int(name), line(n))\n"
        "        except OSError:\n            pass\n"
    )
    calls: list[RichResult] = []
    with make_sandbox(config).sandbox.create() as session:
        result = session.run_code(forge, on_result=calls.append)
        assert 0 < len(calls) <= 100 * 1024 // (1000 + 64) and result.state_kept
        assert session.run_code("6 * 7").text == "42"
