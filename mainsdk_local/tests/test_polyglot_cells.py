"""JavaScript and bash cells on the local driver: the kernel's node and bash executors in the real box."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

import pytest
from mainsdk import AsyncSandbox, secret
from mainsdk_local.driver import _node_strips_types

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="JavaScript cells need node (.ci/run installs it)")


@needs_node
async def test_a_js_cell_with_a_top_level_await_returns_its_value_and_its_state_stays(
    async_sandbox: AsyncSandbox,
) -> None:
    async with async_sandbox.create() as session:
        first = await session.run_code(
            'import {sep} from "node:path";\nconst n = await new Promise((r) => setTimeout(() => r(41), 10));\n'
            "console.log('waited');\nn + 1",
            language="javascript",
        )
        assert first.error is None and first.text == "42" and first.stdout == "waited\n"
        second = await session.run_code("[n, sep]", language="javascript")
        assert second.text == "[ 41, '/' ]" and not second.restarted
        failed = await session.run_code("null.x", language="javascript")
        assert failed.error is not None and failed.error.name == "TypeError" and failed.state_kept
        assert (await session.run_code("1 + 1")).text == "2"  # the Python interpreter is another one


@needs_node
async def test_a_js_cell_at_its_timeout_is_interrupted_and_the_state_kept(async_sandbox: AsyncSandbox) -> None:
    async with async_sandbox.create() as session:
        await session.run_code("let kept = 'yes'", language="javascript")
        slow = await session.run_code("while (true) {}", language="javascript", timeout="1s")
        assert slow.stop == "timeout" and slow.state_kept
        assert (await session.run_code("kept", language="javascript")).text == "'yes'"


async def test_a_bash_cell_keeps_cd_and_export_and_reports_its_status(async_sandbox: AsyncSandbox) -> None:
    async with async_sandbox.create() as session:
        made = await session.run_code("mkdir -p sub && cd sub && export KEPT=1 && v=2", language="bash")
        assert made.error is None and made.stdout == ""
        shown = await session.run_code('basename "$PWD"; echo "$KEPT $v"; sh -c \'echo "$KEPT"\'', language="bash")
        assert shown.stdout == "sub\n1 2\n1\n" and shown.error is None
        failed = await session.run_code("ls /nonexistent-folder", language="bash")
        assert failed.error is not None and failed.error.name == "ExitStatus" and failed.error.value == "2"
        assert "nonexistent-folder" in failed.stderr and failed.state_kept
        slow = await session.run_code("sleep 30", language="bash", timeout="1s")
        assert slow.stop == "timeout" and slow.state_kept
        assert (await session.run_code('echo "$v"', language="bash")).stdout == "2\n"


async def test_exit_in_a_bash_cell_ends_the_interpreter_and_the_next_cell_restarts(
    async_sandbox: AsyncSandbox,
) -> None:
    async with async_sandbox.create() as session:
        await session.run_code("v=1", language="bash")
        ended = await session.run_code("exit 4", language="bash")
        assert not ended.state_kept
        after = await session.run_code('echo "[${v-}]"', language="bash")
        assert after.restarted and after.stdout == "[]\n"


def test_a_secret_a_bash_or_js_cell_prints_is_redacted(
    make_sandbox: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_API_KEY", "sk-cell-secret-value-123")
    built = make_sandbox()
    with built.sandbox.create(env={"KEY": secret("TEST_API_KEY")}) as session:
        shown = session.run_code('echo "$KEY"', language="bash")
        assert shown.stdout and "sk-cell-secret-value-123" not in shown.stdout
        if shutil.which("node") is not None:
            value = session.run_code("process.env.KEY", language="javascript")
            assert value.text and "sk-cell-secret-value-123" not in value.text


async def test_a_bash_cells_set_x_traces_its_own_commands_only(async_sandbox: AsyncSandbox) -> None:
    async with async_sandbox.create() as session:
        first = await session.run_code("set -x; v=1", language="bash")
        second = await session.run_code('echo "$v"', language="bash")
        assert first.stderr.splitlines()[-1].endswith("v=1") and second.stdout == "1\n"
        assert second.stderr.splitlines() == [second.stderr.strip()] and second.stderr.strip().endswith("echo 1")
        assert "__mainsdk" not in first.stderr + second.stderr  # the kernel's loop is never traced


@needs_node
@pytest.mark.skipif(
    shutil.which("npm") is None and not _node_strips_types(),
    reason="this node strips no types and there is no npm to build the kernel's typescript set (.ci/run installs it)",
)
async def test_a_typescript_cell_runs_in_the_box_through_node_or_the_kernels_typescript_set(
    async_sandbox: AsyncSandbox,
) -> None:
    # node >= 22.13 strips the types itself; an older one (this machine's node 20) gets the kernel's typescript,
    # built on the host with npm and bound read-only in the box, its folder given as the start line's site.
    async with async_sandbox.create() as session:
        code = "enum Size { S = 1 }\ninterface P { n: number }\nconst p: P = { n: await Promise.resolve(2) };\np.n"
        first = await session.run_code(code, language="typescript")
        assert first.error is None and first.text == "2"
        second = await session.run_code("p.n + Size.S", language="typescript")
        assert second.text == "3" and not second.restarted
        # Its site folder (node's argument after the protocol's constants: supervisor.executor_argv) is read-only,
        # where the box has one.
        written = await session.run_code(
            "const site = process.argv[7];\n"
            'site ? require("node:fs").writeFileSync(site + "/node_modules/typescript/package.json", "") : "no set"',
            language="typescript",
        )
        assert written.text == "'no set'" or (written.error is not None and "EROFS" in written.error.value)
