"""The seed's guarantees on the local driver, through ``sandbox.run``, with real code in the real sandbox."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import os
import secrets
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mainsdk import AsyncSandbox, Sandbox, SandboxDeps, SandboxError, secret
from mainsdk.audit import code_sha256
from mainsdk.config import load_config_text
from mainsdk.errors import INVALID_OPTION, LOCAL_IN_PRODUCTION, SECRET_NOT_ALLOWED
from mainsdk.hookspecs import hookimpl
from mainsdk_local.driver import LocalDriver


def processes_matching(marker: str) -> list[int]:
    """Host pids whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(int(entry))
    return found


def test_a_snippet_runs_and_prints(sandbox: Sandbox) -> None:
    result = sandbox.run("print(1 + 1)", "python", feature="notebook")
    assert (result.stdout, result.stderr, result.exit_code, result.stop) == ("2\n", "", 0, None)
    assert result.isolation == "namespace" and result.driver == "local"
    assert result.duration > 0 and result.id.startswith("run_")


def test_node_and_bash_run_too(sandbox: Sandbox) -> None:
    assert sandbox.run("console.log(6 * 7)", "node").stdout == "42\n"
    assert sandbox.run("echo $((6 * 7)); exit 3", "bash").exit_code == 3


def test_the_exit_code_and_stderr_come_back(sandbox: Sandbox) -> None:
    result = sandbox.run("import sys; print('oops', file=sys.stderr); sys.exit(4)")
    assert (result.exit_code, result.stderr, result.stop) == (4, "oops\n", None)


def test_the_code_runs_in_another_process_as_an_unprivileged_user(sandbox: Sandbox) -> None:
    code = (
        "import os\n"
        "status = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)\n"
        "print(os.getpid() != int(os.environ.get('X', 0)), os.getuid(), status['CapEff'].strip(),"
        " status['NoNewPrivs'].strip())"
    )
    assert sandbox.run(code, env={"X": str(os.getpid())}).stdout == "True 1000 0000000000000000 1\n"


def test_infinite_loop_stops_at_the_time_limit(sandbox: Sandbox) -> None:
    started = time.monotonic()
    result = sandbox.run("while True: pass", limits={"timeout": "1s"})
    elapsed = time.monotonic() - started
    assert result.stop == "timeout" and result.stop_code == "MAIN-SANDBOX-0002"
    assert result.exit_code is None
    assert 0.9 <= result.duration < 3 and elapsed < 4


def test_allocating_past_the_memory_limit_stops_memory(sandbox: Sandbox) -> None:
    result = sandbox.run("b = bytearray(300 * 1024 * 1024)\nprint('survived')", limits={"memory": "64MB"})
    assert result.stop == "memory" and "survived" not in result.stdout


def test_ten_megabytes_under_a_one_megabyte_limit_stops_output(sandbox: Sandbox) -> None:
    started = time.monotonic()
    result = sandbox.run("import sys\nsys.stdout.write('x' * (10 * 1024 * 1024))\nprint('end')")
    assert result.stop == "output" and result.stop_code == "MAIN-SANDBOX-0004"
    assert result.stdout == "x" * (1024 * 1024)
    assert time.monotonic() - started < 5


def test_output_and_files_limits_are_shared_by_stdout_and_stderr(sandbox: Sandbox) -> None:
    code = "import sys\nfor _ in range(64):\n    sys.stdout.write('o' * 16384); sys.stderr.write('e' * 16384)"
    result = sandbox.run(code, limits={"output": "256KB"})
    assert result.stop == "output"
    assert len(result.stdout) + len(result.stderr) == 256 * 1024


def test_a_background_process_is_gone_after_the_run(sandbox: Sandbox) -> None:
    marker = f"1000.{secrets.randbelow(10**6)}"
    code = f"sleep {marker} & setsid sleep {marker} & ( ( sleep {marker} & ) & ) ; echo started"
    result = sandbox.run(code, "bash")
    assert result.stdout == "started\n" and result.exit_code == 0
    assert processes_matching(f"sleep\0{marker}") == []


@pytest.fixture
def host_marker() -> Iterator[Path]:
    """A file with a secret in the app's home (/root here) that no run may read."""
    path = Path.home() / f".mainsdk-test-{secrets.token_hex(4)}"
    path.write_text("host-secret-content")
    yield path
    path.unlink()


def test_the_code_cannot_read_the_apps_home_or_root(sandbox: Sandbox, host_marker: Path, tmp_path: Path) -> None:
    app_file = tmp_path / "app-data.txt"
    app_file.write_text("host-secret-content")
    paths = [str(host_marker), "/etc/shadow", str(app_file), str(tmp_path)]
    code = (
        f"import os\nfor p in {paths!r}:\n"
        "    try:\n        print(p, 'READ', open(p).read() if os.path.isfile(p) else os.listdir(p))\n"
        "    except OSError as e:\n        print(p, type(e).__name__)\n"
    )
    out = sandbox.run(code).stdout
    assert "READ" not in out and "host-secret-content" not in out
    assert f"{host_marker} FileNotFoundError" in out
    # /root holds at most the path down to an interpreter installed there (pyenv), nothing else of the home.
    listing = ast.literal_eval(
        sandbox.run("import os; print(os.listdir('/root') if os.path.exists('/root') else [])").stdout
    )
    assert set(listing) <= {".pyenv"}


def test_the_code_cannot_see_the_apps_environment(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APP_ONLY_VALUE", "app-secret-env")
    out = sandbox.run("import os; print(sorted(os.environ))", env={"GIVEN": "1"}).stdout
    names = set(ast.literal_eval(out))  # the list printed by the code
    assert "APP_ONLY_VALUE" not in names and "GIVEN" in names
    assert names <= {"GIVEN", "LC_CTYPE"}  # Python may coerce the C locale by setting LC_CTYPE


def test_the_code_cannot_reach_the_network(sandbox: Sandbox) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        code = (
            "import socket\n"
            "print([name for _, name in socket.if_nameindex()])\n"
            "print(open('/proc/net/route').read().count('\\n'))\n"
            "s = socket.socket(); s.settimeout(2)\n"
            f"try:\n    s.connect(('127.0.0.1', {port})); print('CONNECTED')\n"
            "except OSError as e:\n    print(type(e).__name__)\n"
        )
        out = sandbox.run(code).stdout.splitlines()
    assert out == ["['lo']", "1", "ConnectionRefusedError"]  # only loopback, an empty route table, the host unreachable


def test_the_code_sees_only_its_own_processes(sandbox: Sandbox) -> None:
    out = sandbox.run("import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))").stdout
    assert set(ast.literal_eval(out)) <= {1, 2, 3}  # the box's init, the interpreter, and nothing of the host


def test_the_work_folder_holds_only_the_passed_files_and_out_is_empty(sandbox: Sandbox) -> None:
    code = "import os; print(os.getcwd(), sorted(os.listdir('.')), os.listdir('../out'))"
    assert sandbox.run(code, files={"data.csv": "a\nb\n"}).stdout == "/work ['data.csv'] []\n"


def test_files_written_to_out_come_back_as_file_refs(sandbox: Sandbox) -> None:
    result = sandbox.run(
        "rows = open('data.csv').read().splitlines()\nopen('../out/count.txt', 'w').write(str(len(rows)))",
        files={"data.csv": "a\nb\nc\n"},
        feature="chart",
    )
    assert [(f.name, f.size) for f in result.files] == [("count.txt", 1)]
    assert sandbox.files.read(result.files[0]) == b"3"


def test_only_the_work_and_out_folders_are_writable(sandbox: Sandbox) -> None:
    code = (
        "import os\n"
        "for p in ['/x', '/usr/x', '/etc/x', '/tmp/x', '/proc/x', '/work/x', '/out/x']:\n"
        "    try:\n        open(p, 'w').write('1'); print(p, 'ok')\n"
        "    except OSError as e:\n        print(p, 'no')\n"
    )
    out = sandbox.run(code).stdout.split("\n")
    assert [line for line in out if line.endswith("ok")] == ["/work/x ok", "/out/x ok"]


def test_secret_values_are_redacted_even_when_split(make_sandbox: Callable[..., Any]) -> None:
    built = make_sandbox(secret=lambda name: "tok-9f8e7d6c5b4a" if name == "TEST_API_KEY" else None)
    code = "import os, sys\nk = os.environ['K']\nfor c in k:\n    sys.stdout.write(c); sys.stdout.flush()\nprint()"
    result = built.sandbox.run(code, env={"K": secret("TEST_API_KEY")})
    assert result.stdout == "[redacted:secret]\n"
    assert "tok-9f8e7d6c5b4a" not in repr(built.events)


def test_a_secret_not_listed_is_refused_and_nothing_runs(make_sandbox: Callable[..., Any], tmp_path: Path) -> None:
    built = make_sandbox()
    marker = tmp_path / "ran"
    with pytest.raises(SandboxError) as caught:
        built.sandbox.run(f"open({str(marker)!r}, 'w')", env={"K": secret("NOT_LISTED")})
    assert caught.value.code == SECRET_NOT_ALLOWED and not marker.exists()
    assert [(e.kind, e.error) for e in built.events] == [("refused", SECRET_NOT_ALLOWED)]


def test_every_run_is_audited_with_the_hash_never_the_code(make_sandbox: Callable[..., Any]) -> None:
    built = make_sandbox()
    code = "print('visible-output-text')  # code-comment-text"
    built.sandbox.run(code, feature="notebook", env={"MODE": "x"})
    [event] = built.events
    assert event.code_sha256 == code_sha256(code)
    assert (event.kind, event.feature, event.driver, event.isolation, event.exit_code) == (
        "run",
        "notebook",
        "local",
        "namespace",
        0,
    )
    assert event.env_names == ("MODE",) and event.stop is None and event.duration is not None
    text = repr(event.to_dict())
    assert "visible-output-text" not in text and "code-comment-text" not in text


def test_the_local_driver_is_refused_in_production(make_sandbox: Callable[..., Any]) -> None:
    built = make_sandbox(environment="production")
    with pytest.raises(SandboxError) as caught:
        built.sandbox.run("print(1)")
    assert caught.value.code == LOCAL_IN_PRODUCTION


def test_an_interpreter_not_under_permissions_processes_is_refused(
    make_sandbox: Callable[..., Any], local_config: str
) -> None:
    built = make_sandbox(local_config.replace("processes: [python3, node, bash]", "processes: [python3]"))
    with pytest.raises(SandboxError) as caught:
        built.sandbox.run("console.log(1)", "node")
    assert caught.value.code == INVALID_OPTION and "permissions.processes" in caught.value.message


def test_a_limit_above_the_config_is_refused(sandbox: Sandbox) -> None:
    with pytest.raises(SandboxError) as caught:
        sandbox.run("print(1)", limits={"timeout": "1h"})
    assert caught.value.code == INVALID_OPTION and "sandbox.limits.timeout" in caught.value.message


async def test_the_async_twin_runs_and_a_cancelled_run_leaves_nothing(async_sandbox: AsyncSandbox) -> None:
    assert (await async_sandbox.run("print(40 + 2)")).stdout == "42\n"
    marker = f"1000.{secrets.randbelow(10**6)}"
    task = asyncio.ensure_future(async_sandbox.run(f"sleep {marker}", "bash"))
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert processes_matching(f"sleep\0{marker}") == []


def test_long_code_goes_through_stdin(sandbox: Sandbox) -> None:
    # The code is not in argv (the figures wrapper, a few KB, is): "x = 1" appears only in the code itself.
    code = "x = 1\n" * 30000 + "print(x, ('x = ' + '1') not in open('/proc/self/cmdline').read())"
    assert sandbox.run(code).stdout == "1 True\n"


def test_runs_in_parallel_threads_do_not_mix(sandbox: Sandbox) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda i: sandbox.run(f"print({i} * 2)").stdout, range(8)))
    assert outs == [f"{i * 2}\n" for i in range(8)]


# -- out files and a stalled launcher: the run's output is kept -------------------------

OUT_FILES_CAP = 1000  # the documented cap (README, "Out files")


def test_a_deep_out_tree_is_cut_with_stop_output_and_the_run_kept(sandbox: Sandbox) -> None:
    code = (
        "import os, sys\n"
        "open('../out/top.txt', 'w').write('top')\n"
        "os.chdir('../out')\n"
        "for _ in range(200):\n    os.mkdir('d'); os.chdir('d')\n"
        "open('bottom.txt', 'w').write('bottom')\n"
        "print('made'); sys.exit(3)\n"
    )
    result = sandbox.run(code)
    assert (result.stop, result.stdout, result.exit_code) == ("output", "made\n", 3)
    assert result.stop_code == "MAIN-SANDBOX-0004"
    assert [f.name for f in result.files] == ["top.txt"]


@pytest.mark.parametrize("count", [6000, 70000])
def test_many_out_files_are_cut_at_the_cap_and_the_run_kept(sandbox: Sandbox, count: int) -> None:
    # 65,000 files once made the collect reply pass the protocol's 1 MiB header: the run was lost as a 0006.
    code = f"import sys\nfor i in range({count}): open(f'../out/{{i:05d}}.txt', 'w')\nprint('wrote'); sys.exit(5)"
    result = sandbox.run(code)
    assert (result.stop, result.stdout, result.exit_code) == ("output", "wrote\n", 5)
    assert len(result.files) == OUT_FILES_CAP


class _StopsItsLauncherBeforeCollecting(LocalDriver):
    """The real local driver, whose launcher server is stopped (SIGSTOP) just before /out is collected, once."""

    armed = False

    @hookimpl
    async def mainsdk_driver_collect(self, box: Any, max_bytes: int) -> Any:
        if self.armed and self._launcher._proc is not None:
            self.armed = False
            os.kill(self._launcher._proc.pid, signal.SIGSTOP)
        return await super().mainsdk_driver_collect(box, max_bytes)


@pytest.mark.parametrize("phase", ["exec", "collect"])
async def test_a_stopped_launcher_holds_no_run_past_its_timeout(phase: str, local_config: str, tmp_path: Path) -> None:
    config = load_config_text(local_config, source=tmp_path / "main.yaml")
    driver = _StopsItsLauncherBeforeCollecting(permissions=config.permissions, restrict_processes=True)
    sandbox = AsyncSandbox(SandboxDeps(config=config, driver=driver, load_entrypoints=False))
    try:
        assert (await sandbox.run("print(1)")).exit_code == 0
        assert driver._launcher._proc is not None
        server = driver._launcher._proc.pid

        def resume() -> None:  # a watchdog, so that the old code's hang ends and the test can fail
            with contextlib.suppress(ProcessLookupError):
                os.kill(server, signal.SIGCONT)

        watchdog = asyncio.get_running_loop().call_later(20, resume)
        # The code starts a `sleep <marker>` to be found by: a warm interpreter's command line is the pool's stub,
        # never the code (a marker in the code's text would never be seen, and the launcher never stopped).
        marker = f"1000.{secrets.randbelow(10**6)}"
        code = (
            f"import subprocess\nsubprocess.Popen(['/usr/bin/sleep', '{marker}'])\n"
            f"print('up', flush=True)\nwhile {phase == 'exec'}: pass\nprint('done')"
        )
        if phase == "collect":
            # The server collects a one-shot run's /out unasked, right after the run: 40 MB of out files keep it
            # at that (reading and sending them) when the driver's collect hook stops it.
            code += "\nfor i in range(40): open(f'../out/{i:02d}.bin', 'wb').write(bytes(1 << 20))"
        started = time.monotonic()
        try:
            driver.armed = phase == "collect"
            task = asyncio.ensure_future(sandbox.run(code, limits={"timeout": "2s"}))
            if phase == "exec":
                while not processes_matching(f"sleep\0{marker}") and not task.done():
                    await asyncio.sleep(0.02)
                os.kill(server, signal.SIGSTOP)  # the code runs: stop the launcher under it
            result = await task
        finally:
            watchdog.cancel()
            resume()
        elapsed = time.monotonic() - started
        if phase == "exec":
            assert (result.stop, result.stdout, result.exit_code) == ("timeout", "up\n", None)
        else:  # the run ended; its /out was lost with the stalled launcher, which is a cut
            assert (result.stop, result.stdout, result.exit_code) == ("output", "up\ndone\n", 0)
        assert elapsed < 2 + 5, elapsed
        assert processes_matching(f"sleep\0{marker}") == []
        again = await sandbox.run("print('again')")  # the stalled launcher was replaced
        assert (again.stdout, again.stop) == ("again\n", None)
        assert driver._launcher._proc is not None and driver._launcher._proc.pid != server
    finally:
        sandbox.hooks.shutdown()
