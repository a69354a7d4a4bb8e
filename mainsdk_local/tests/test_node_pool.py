"""The warm pool's node kind: ``node`` exec'd ahead in a fresh box, handed one ``node -e`` run. Real launcher, no mocks.

Warm and cold runs of the same exec in the same server are compared byte for byte (stdout, stderr,
exit code, signal, stop), and each pitfall of a warm start has a test: the code cannot reach the
control channel, nothing carries between runs, the run's own limits hold, the time limit counts
from hand-off, start-up variables that differ run cold, output keeps its order, EOF and limits.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time
from collections.abc import Iterator, Mapping

import pytest
from mainsdk_local.launcher.node_pool import NodeStub
from mainsdk_local.launcher.pool import MAX_KINDS, Entry
from mainsdk_local.launcher_client import ExecSpec, Launcher
from mainsdk_local.programs import Program, resolve_program
from pool_runs import MiB, Ran, pooled_launcher, run_in_box, stats, wait_ready

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="the launcher is Linux only"),
    pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed"),
]


@pytest.fixture(scope="module")
def node() -> Program:
    return resolve_program("node", "node")


@pytest.fixture
def launcher() -> Iterator[Launcher]:
    yield from pooled_launcher(2)


async def run(
    launcher: Launcher,
    node: Program,
    code: str,
    *,
    warm: bool = True,
    env: Mapping[str, str] | None = None,
    files: Mapping[str, bytes] | None = None,
    memory: int = 512 * MiB,
    timeout: float = 30.0,
    max_processes: int = 64,
    disk: int = 16 * MiB,
    session: bool = False,
    argv: tuple[str, ...] | None = None,
) -> Ran:
    """One run in a fresh box, as the driver does it: open, write files, exec node -e CODE, close."""
    spec = ExecSpec(
        argv=argv or (node.executable, "-e", code),
        env=dict(env if env is not None else ENV),
        timeout=timeout,
        memory_bytes=memory,
        max_processes=max_processes,
        readonly_paths=node.readonly_paths,
        hidden_paths=node.hidden_paths,
        warm="node" if warm else None,
    )
    return await run_in_box(launcher, spec, files=files, disk=disk, session=session)


ENV = {"PATH": "/usr/bin:/bin", "HOME": "/work", "FOO": "bar"}


async def until_ready(launcher: Launcher, node: Program, env: Mapping[str, str] | None = None) -> None:
    """Ask for a warm node of this shape once (a run), then wait until one is ready."""
    await wait_ready(launcher, "node", lambda: run(launcher, node, "0", env=env), 90)


async def warm_run(launcher: Launcher, node: Program, code: str, **kwargs: object) -> Ran:
    """``code`` on a warm node of its key (asserted): runs it until one was ready for it (a cold run asks for one)."""
    await until_ready(launcher, node, kwargs.get("env"))  # type: ignore[arg-type]
    deadline = time.monotonic() + 90
    while True:
        ran = await run(launcher, node, code, **kwargs)  # type: ignore[arg-type]
        if ran.result.warm_kind == "node" or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.3)
    assert ran.result.warm_kind == "node", f"expected a warm run: {ran.seen()}"
    return ran


# What a run sees of node itself. Each is run cold and warm in the same server and must match byte for byte.
LOOKS = {
    "print": "console.log(1 + 1)",
    "throw": "function f(){g()} function g(){throw new TypeError('x')} f()",
    "throw 1": "throw 1",
    "syntax error": "x = (",
    "rejection": "Promise.reject(new Error('rej'))",
    "handler": "process.on('uncaughtException',(e,o)=>console.log('caught', o, e.message)); throw new Error('e')",
    "exit code": "process.exitCode = 3",
    "order": "setTimeout(()=>console.log('t'),0); setImmediate(()=>console.log('i'));"
    " process.nextTick(()=>console.log('n')); Promise.resolve().then(()=>console.log('p')); console.log('s')",
    "argv": "console.log(JSON.stringify([process.argv, process.execArgv, process.argv0, process._eval,"
    " process.title]))",
    "module": "console.log(JSON.stringify([module.filename, module.paths, __filename, require.main,"
    " Object.keys(require.cache), process.cwd(), require('fs').readdirSync('.')]))",
    "internals": "require('internal/process/execution')",
    "load list": "console.log(process.moduleLoadList.length, process.moduleLoadList.slice(-3))",
    "env": "console.log(JSON.stringify(process.env));"
    " console.log(require('child_process').execFileSync('/usr/bin/env').toString())",
    "ids": "console.log(process.pid, process.ppid, process.getuid(), process.getgid(), process.umask())",
    "status": "console.log(require('fs').readFileSync('/proc/self/status','utf8').split('\\n')"
    ".filter(l=>/^(Cap|NoNewPrivs|Seccomp|Sig|Threads|Uid|Gid)/.test(l)).join('\\n'))",
    "descriptors": "const fs=require('fs'); console.log(fs.readdirSync('/proc/self/fd').map(f=>{"
    "try{return f+'>'+fs.readlinkSync('/proc/self/fd/'+f).replace(/[0-9]+/g,'N')}catch(e){return f+'>gone'}}))",
    "rlimits": "console.log(require('fs').readFileSync('/proc/self/limits','utf8'))",
    "cgroup": "console.log(require('fs').readFileSync('/proc/self/cgroup','utf8').replace(/[0-9a-f-]{8,}/g,'X'))",
    "async ids": "const ah=require('async_hooks'); console.log(ah.executionAsyncId(), ah.triggerAsyncId())",
    "stdio": "console.log(process.stdout._type, process.stderr._type, process.stdout.isTTY);"
    " process.stdin.on('data',d=>console.log('in',d)).on('end',()=>console.log('end'))",
    "warning": "process.emitWarning('careful')",
    "crypto": "console.log(typeof crypto.randomBytes)",
}


@pytest.mark.parametrize("name", sorted(LOOKS))
async def test_a_warm_node_run_looks_exactly_like_a_cold_one(launcher: Launcher, node: Program, name: str) -> None:
    code = LOOKS[name]
    files = {"data.txt": b"some data"}
    cold = await run(launcher, node, code, warm=False, files=files)
    assert not cold.result.warm
    warm = await warm_run(launcher, node, code, files=files)
    assert warm.seen() == cold.seen()


async def test_output_keeps_its_order_size_and_eof(launcher: Launcher, node: Program) -> None:
    """Much output on both streams, and a background child that writes after the code ended: nothing lost."""
    code = (
        "process.stdout.write('o'.repeat(3 << 20)); process.stderr.write('e'.repeat(1 << 20));"
        " require('child_process').spawn('/bin/sh', ['-c', 'sleep 0.3; echo late'], {stdio: 'inherit'});"
    )
    cold = await run(launcher, node, code, warm=False)
    warm = await warm_run(launcher, node, code)
    assert warm.seen() == cold.seen()
    assert warm.stdout == b"o" * (3 << 20) + b"late\n"  # node waited for its child, whose output came last
    assert warm.stderr == b"e" * (1 << 20)


SNOOP = (
    "const fs = require('fs'), cp = require('child_process');"
    " const seen = [Math.random(), process.env.SECRET, globalThis.leaked, fs.readdirSync('/work'),"
    " fs.readdirSync('/out'), cp.execFileSync('/bin/ps', ['-eo', 'pid,comm']).toString()];"
    " console.log(JSON.stringify(seen));"
    " fs.writeFileSync('/work/left', 'x'); fs.writeFileSync('/out/left', 'x');"
    " globalThis.leaked = 1; process.env.SECRET = 'changed';"
    " cp.spawn('/bin/sleep', ['30'], {detached: true, stdio: 'ignore'}).unref();"
)


async def test_warm_node_runs_share_nothing(launcher: Launcher, node: Program) -> None:
    first = await warm_run(launcher, node, SNOOP, env=dict(ENV, SECRET="s3cr3t"))
    second = await warm_run(launcher, node, SNOOP)
    assert first.result.exit_code == second.result.exit_code == 0, (first.stderr, second.stderr)
    seen1, seen2 = json.loads(first.stdout), json.loads(second.stdout)
    assert seen1[0] != seen2[0]  # a fresh Math.random state: each node is its own execve
    assert (seen1[1], seen2[1]) == ("s3cr3t", None)  # not another run's environment
    assert seen2[2] is None  # nor its globals
    assert seen2[3:5] == [[], []]  # no file of another run, in /work or /out
    assert seen1[5] == seen2[5]  # only its own processes: not the other run's sleep
    assert "sleep" not in seen2[5]


async def test_the_code_cannot_reach_the_control_channel(launcher: Launcher, node: Program) -> None:
    """What the stub held before hand-off (the control socket, B's deadline pipe) is closed; no status is forged."""
    code = (
        "const fs = require('fs'); const open = [];"
        " for (let fd = 3; fd < 256; fd++) { try { fs.fstatSync(fd); open.push(fd) } catch {} }"
        " for (const fd of [100, 101]) {"
        " try { fs.writeSync(fd, 'R' + '\\0'.repeat(64)) } catch (e) { open.push(e.code) } }"
        " console.log(JSON.stringify(open)); process.reallyExit(7)"
    )
    cold = await run(launcher, node, code, warm=False)
    warm = await warm_run(launcher, node, code)
    assert warm.seen() == cold.seen()
    assert warm.stdout.endswith(b'"EBADF","EBADF"]\n')
    assert warm.result.exit_code == 7  # its own exit status, nothing forged


async def test_memory_and_process_limits_are_the_runs_own(launcher: Launcher, node: Program) -> None:
    hog = "const b = Buffer.alloc(300 * 1024 * 1024, 1); console.log('held', b.length)"
    small = await warm_run(launcher, node, hog, memory=128 * MiB)
    assert small.result.stop == "memory"
    large = await warm_run(launcher, node, hog, memory=768 * MiB)
    assert (large.result.stop, large.stdout) == (None, b"held 314572800\n")
    forks = (
        "const cp = require('child_process'); let n = 0, refused = 0;"
        " for (let i = 0; i < 24; i++) { const r = cp.spawnSync('/bin/sleep', ['0']); r.error ? refused++ : n++ }"
        " const kids = [];"
        " for (let i = 0; i < 24; i++) { try { kids.push(cp.spawn('/bin/sleep', ['2'])) } catch (e) { refused++ } }"
        " let errors = 0; for (const k of kids) k.on('error', () => errors++);"
        " setTimeout(() => { console.log(errors > 0); process.exit(0) }, 500)"
    )
    cold = await run(launcher, node, forks, warm=False, max_processes=20)
    warm = await warm_run(launcher, node, forks, max_processes=20)
    assert warm.seen() == cold.seen()
    assert warm.stdout == b"true\n"  # the pids limit refused some: it is the run's 20, not the warm node's 64


async def test_the_disk_limit_is_the_runs_own(launcher: Launcher, node: Program) -> None:
    code = (
        "const fs = require('fs');"
        " console.log(fs.readFileSync('/proc/self/limits', 'utf8').match(/Max file size.*/)[0]);"
        " try { fs.writeFileSync('big', Buffer.alloc(3 << 20)) } catch (e) { console.log('refused', e.code) }"
    )
    cold = await run(launcher, node, code, warm=False, disk=2 * MiB)
    warm = await warm_run(launcher, node, code, disk=2 * MiB)
    assert warm.seen() == cold.seen()
    assert b"2097152" in warm.stdout and b"refused" in warm.stdout


async def test_the_time_limit_counts_from_hand_off(launcher: Launcher, node: Program) -> None:
    await until_ready(launcher, node)
    await asyncio.sleep(3)  # the node has waited longer than the run's whole time limit
    code = "setTimeout(() => console.log('finished', process.uptime() > 3), 1000)"  # uptime: since the node started
    ran = await run(launcher, node, code, timeout=2.5)
    assert ran.result.warm_kind == "node"
    assert (ran.result.stop, ran.stdout) == (None, b"finished true\n")  # served by a node older than its limit
    late = await warm_run(launcher, node, "setTimeout(() => {}, 30000)", timeout=1.0)
    assert late.result.stop == "timeout"
    assert late.result.duration < 10


async def test_start_up_variables_and_other_shapes_run_cold(launcher: Launcher, node: Program) -> None:
    await until_ready(launcher, node)
    assert (await stats(launcher))["node_ready"] >= 1  # of this key: the only one asked for yet
    # node's own threads need more: with pids.max 5 a cold node cannot start them, where a warm one has them already
    few_cold = await run(launcher, node, "console.log(1)", warm=False, max_processes=4, timeout=3)
    few = await run(launcher, node, "console.log(1)", max_processes=4, timeout=3)
    assert few.result.warm_kind != "node"
    assert few.seen() == few_cold.seen()
    await warm_run(launcher, node, "0")  # the runs above asked for other kinds: ask for this key's again
    deadline = time.monotonic() + 60
    while (await stats(launcher))["node_ready"] == 0:  # and wait for its refill: the next check needs one ready
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    worker = (
        "const { Worker } = require('worker_threads');"
        " new Worker('console.log(JSON.stringify(process.execArgv).length)', { eval: true })"
    )
    cold = await run(launcher, node, worker, warm=False)
    other = await run(launcher, node, worker)
    assert other.result.warm_kind != "node"  # a Worker would inherit the warm node's own argv and options
    assert other.seen() == cold.seen()
    code = "console.log(JSON.stringify([process.env.TZ, process.env.NODE_PATH, new Date(0).getHours(), module.paths]))"
    for env in (
        dict(ENV, TZ="Asia/Tokyo"),
        dict(ENV, NODE_PATH="/work/lib"),
        dict(ENV, NODE_OPTIONS="--stack-trace-limit=3"),
        dict(ENV, NODE_V8_COVERAGE="/work/coverage"),
        dict(ENV, HOME="/tmp"),
        dict(ENV, LANG="C.UTF-8"),
    ):
        cold = await run(launcher, node, code, warm=False, env=env)
        other = await run(launcher, node, code, env=env)
        assert other.result.warm_kind != "node", env  # no node was started with these
        assert other.seen() == cold.seen()
    for shape in ((node.executable, "-e", code, "arg"), (node.executable, "-p", "1"), (node.executable, "-e")):
        cold = await run(launcher, node, code, warm=False, argv=shape)
        other = await run(launcher, node, code, argv=shape)
        assert other.result.warm_kind != "node", shape
        assert other.seen() == cold.seen()
    # Other variables are the run's own, set at hand-off.
    ran = await warm_run(launcher, node, "console.log(process.env.FOO)", env=dict(ENV, FOO="baz"))
    assert ran.stdout == b"baz\n"


async def test_a_node_that_prints_as_it_starts_never_takes_a_run(launcher: Launcher, node: Program) -> None:
    """NODE_DEBUG makes node (and the stub's own requires) print while starting: that key runs cold, always."""
    env = dict(ENV, NODE_DEBUG="module")
    code = "console.log('ran')"
    cold = await run(launcher, node, code, warm=False, env=env)
    for _ in range(3):
        other = await run(launcher, node, code, env=env)
        assert other.result.warm_kind != "node"
        assert other.result.exit_code == 0 and other.stdout == b"ran\n"
        await asyncio.sleep(0.5)
    assert cold.stdout == b"ran\n"


async def test_a_session_box_and_later_execs_run_cold(launcher: Launcher, node: Program) -> None:
    await until_ready(launcher, node)
    ran = await run(launcher, node, "console.log(1)", session=True)
    assert not ran.result.warm


def test_the_control_messages_parse_in_any_split_and_the_probes_kept_are_bounded() -> None:
    """A warm node's C sends ``P``, a length and its probe, then the stub ``R`` or ``D``; the server keeps one probe
    per key, at most as many keys as the pool keeps kinds."""
    kind = NodeStub()
    probe = "Error\n    at [eval]:1:28\n    at node:internal/main/eval_string:51:3"
    message = b"P" + len(probe).to_bytes(4, "big") + probe.encode() + b"R"

    def entry(n: int) -> Entry:
        return Entry(kind, ("node", (), ("/usr/bin/node", n, ())), 0, 0, 0, "/nonexistent")

    whole = entry(0)
    assert kind.feed(whole, message) == "ready"
    split = entry(1)
    states = [kind.feed(split, message[i : i + 1]) for i in range(len(message))]
    assert states == ["wait"] * (len(message) - 1) + ["ready"]
    assert kind.probes[whole.key] == kind.probes[split.key] == probe
    assert kind.feed(entry(2), b"D") == "dirty"
    assert kind.feed(entry(3), b"") == "gone"
    assert kind.feed(entry(4), b"P" + (1 << 20).to_bytes(4, "big")) == "gone"  # no probe is that long
    assert kind.feed(entry(5), b"P" + (3).to_bytes(4, "big") + b"abcR") == "dirty"  # not a stack it can use
    for n in range(6, 6 + 2 * MAX_KINDS):
        kind.feed(entry(n), message)
    assert len(kind.probes) == MAX_KINDS


@pytest.mark.parametrize("variable", ["NODE_OPTIONS=--stack-trace-limit=3", "NODE_V8_COVERAGE=/work/coverage"])
async def test_these_variables_never_take_a_warm_node(launcher: Launcher, node: Program, variable: str) -> None:
    """No warm node is ever made for them (options, coverage of the whole process): a second run takes none either."""
    name, _, value = variable.partition("=")
    env = dict(ENV, **{name: value})
    code = "console.log(new Error('x').stack.split('\\n').length)"
    first = await run(launcher, node, code, env=env)
    deadline = time.monotonic() + 5
    while (await stats(launcher))["ready"] == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)  # enough for a node of this key to warm, were one asked for
    second = await run(launcher, node, code, env=env)
    cold = await run(launcher, node, code, warm=False, env=env)
    assert first.result.warm_kind != "node" and second.result.warm_kind != "node"  # a pre-exec box may take them
    assert second.seen() == cold.seen()


async def test_runs_at_once_each_get_their_own_output(launcher: Launcher, node: Program) -> None:
    """Warm and cold node runs side by side: each run's output pipes reach that run, none another's."""
    await until_ready(launcher, node)
    code = "const n = process.env.N; process.stdout.write(('out' + n + ' ').repeat(20000)); console.error('err' + n)"
    runs = await asyncio.gather(*(run(launcher, node, code, env=dict(ENV, N=str(n))) for n in range(10)))
    for n, ran in enumerate(runs):
        assert ran.stdout == (f"out{n} " * 20000).encode() and ran.stderr == f"err{n}\n".encode(), n
    assert any(ran.result.warm_kind == "node" for ran in runs)
