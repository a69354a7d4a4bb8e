"""The warm node's stub against a real cold ``node -e``, byte for byte, outside the sandbox.

Each case runs the same code twice with the same environment and folder: once as ``node -e
CODE``, once handed to a node started ahead as ``node --expose-internals -e STUB`` with the
descriptors the launcher gives it (0 /dev/null, 1 and 2 pipes, the control socket and the
deadline pipe high). What the caller sees must be equal: exit status, stdout, stderr. The cases
are what a warm start could get wrong: stacks and uncaught-error output, handlers and exit codes,
the order of nextTicks, microtasks and the loop, argv, execArgv, globals, ``require``, internals,
async ids, descriptors, threads. (The sandboxed pool is tested in ``test_node_pool.py``.)
"""

from __future__ import annotations

import os
import selectors
import shutil
import socket
import struct
import subprocess
from collections.abc import Mapping

import pytest
from mainsdk_local.launcher import node_stub

NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "A": "1", "B": "two words"}

Seen = tuple[int, bytes, bytes]


def cold(code: str, env: Mapping[str, str] = ENV, cwd: str = "/tmp") -> Seen:
    assert NODE is not None
    done = subprocess.run([NODE, "-e", code], env=dict(env), cwd=cwd, capture_output=True, timeout=60, check=False)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def probe() -> str:
    status, out, err = cold(node_stub.PROBE_CODE, cwd="/")
    assert status == 0 and not err
    assert node_stub.usable_probe(out.decode())
    return out.decode()


class Warm:
    """A stub node started as the launcher starts one, waiting for its job."""

    def __init__(self, probe: str, env: Mapping[str, str] = ENV) -> None:
        assert NODE is not None
        ours, theirs = socket.socketpair()
        self.control = ours
        self.deadline_r, deadline_w = os.pipe2(os.O_CLOEXEC)
        self.out_r, out_w = os.pipe2(os.O_CLOEXEC)
        self.err_r, err_w = os.pipe2(os.O_CLOEXEC)
        for target, fd in ((node_stub.CONTROL_FD, theirs.fileno()), (node_stub.DEADLINE_FD, deadline_w)):
            with pytest.raises(OSError):
                os.fstat(target)  # free here: the stub knows its descriptors by number
            os.dup2(fd, target)
        self.proc = subprocess.Popen(
            node_stub.stub_argv(NODE, probe),
            env=dict(env),
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=out_w,
            stderr=err_w,
            pass_fds=(node_stub.CONTROL_FD, node_stub.DEADLINE_FD),
        )
        for fd in (deadline_w, out_w, err_w, node_stub.CONTROL_FD, node_stub.DEADLINE_FD):
            os.close(fd)
        theirs.close()
        self.state = ours.recv(1)

    def run(self, code: str, env: Mapping[str, str] = ENV, cwd: str = "/tmp", timeout: float = 30.0) -> Seen:
        assert self.state == b"R", self.state
        self.control.sendall(node_stub.encode_job(code, dict(env), cwd, timeout))
        self.control.close()
        out, err = b"", b""
        sel = selectors.DefaultSelector()
        for fd in (self.out_r, self.err_r):
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            for key, _ in sel.select(60):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fd)
                elif key.fd == self.out_r:
                    out += chunk
                else:
                    err += chunk
        status = self.proc.wait(60)
        (self.sent_timeout,) = struct.unpack("d", os.read(self.deadline_r, 8))
        self.close()
        return status, out, err

    def close(self) -> None:
        self.control.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.deadline_r, self.out_r, self.err_r):
            os.close(fd)


def warm(probe: str, code: str, env: Mapping[str, str] = ENV, cwd: str = "/tmp") -> Seen:
    return Warm(probe, env).run(code, env, cwd)


def same_but_pid(seen: Seen, pid: int) -> Seen:
    return seen[0], seen[1].replace(str(pid).encode(), b"PID"), seen[2].replace(str(pid).encode(), b"PID")


CASES = {
    "print": "console.log(1 + 1)",
    "throw": "throw new Error('boom')",
    "throw_nested": "function f(){g()} function g(){throw new TypeError('x')} f()",
    "throw_1": "throw 1",
    "throw_null": "throw null",
    "throw_object": "throw {a: 1}",
    "syntax": "x = (",
    "syntax_redeclare": "let a = 1; let a = 2;",
    "indented_throw": "   \t  throw new Error('indented')",
    "unicode": "console.log('h\u00e9llo \u2603'); throw new Error('\u00fcn\u00ef')",
    "order": "setTimeout(()=>console.log('t'),0); setImmediate(()=>console.log('i'));"
    " process.nextTick(()=>console.log('n')); Promise.resolve().then(()=>console.log('p'));"
    " queueMicrotask(()=>console.log('m')); console.log('sync')",
    "uncaught_handler": "process.on('uncaughtException',(e,o)=>console.log('caught', o, e.message));"
    " throw new Error('e1')",
    "monitor": "process.on('uncaughtExceptionMonitor',(e,o)=>console.log('mon', o)); throw new Error('e1')",
    "handler_throws": "process.on('uncaughtException',()=>{throw new Error('again')}); throw new Error('first')",
    "rejection": "Promise.reject(new Error('rej'))",
    "rejection_1": "Promise.reject(1)",
    "rejection_handler": "process.on('unhandledRejection',(r)=>console.log('unh', r.message));"
    " Promise.reject(new Error('r'))",
    "await_throw": "(async()=>{await null; throw new Error('inasync')})()",
    "async_stack": "async function f(){ await null; console.log(new Error().stack) } f()",
    "timer_throw": "setTimeout(()=>{throw new RangeError('later')}, 1)",
    "exit_code": "process.exitCode = 3",
    "exit": "process.nextTick(()=>process.exit(4)); console.log('a')",
    "exit_event": "process.on('exit',c=>console.log('exit',c)); throw new Error('x')",
    "stacks": "function a(n){ if(n) return a(n-1); return new Error().stack }"
    " for (const n of [0, 2, 3, 4, 12]) console.log(a(n))",
    "callsites": "Error.prepareStackTrace=(e,cs)=>cs.map(c=>[c.getTypeName(),c.getFunctionName(),c.getMethodName(),"
    "c.getFileName(),c.getLineNumber(),c.getColumnNumber(),c.isToplevel(),c.isEval(),c.isNative(),"
    "c.isConstructor(),c.isAsync(),typeof c.getThis(),typeof c.getFunction()]);"
    " console.log(JSON.stringify(new Error().stack))",
    "limits": "console.log(Error.stackTraceLimit, typeof Error.prepareStackTrace)",
    "argv": "console.log(JSON.stringify([process.argv, process.execArgv, process.argv0, process.execPath,"
    " process.title, Object.getOwnPropertyDescriptor(process, '_eval')]))",
    "globals": "console.log(JSON.stringify(Object.getOwnPropertyNames(globalThis).map(k=>{"
    "const d=Object.getOwnPropertyDescriptor(globalThis,k);"
    "return [k, typeof d.get, typeof d.set, 'value' in d ? typeof d.value : '-', d.enumerable, d.configurable]})))",
    "var": "var x = 1; let y = 2; console.log(globalThis.x, globalThis.y, typeof y, this === module.exports)",
    "module": "console.log(JSON.stringify([module.id, module.filename, module.paths, module.loaded,"
    " module.children.length, module.parent, __filename, __dirname, require.main === module,"
    " typeof require.main, Object.keys(require.cache), exports === module.exports]))",
    "module_later": "setTimeout(()=>console.log(typeof module, module.filename, require.main))",
    "internals": "require('internal/process/execution')",
    "internals_import": "import('internal/process/execution').then(console.log, e => console.log(e.code, e.message))",
    "internals_scheme": "require('node:internal/vm')",
    "builtins": "const M=require('module'); console.log(JSON.stringify([M.builtinModules,"
    " M.builtinModules.map(M.isBuiltin), M.isBuiltin('internal/vm'), M.isBuiltin('node:internal/vm')]))",
    "load_list": "console.log(process.moduleLoadList.join('\\n'))",
    "fs_global": "console.log(typeof fs.readFileSync, typeof Object.getOwnPropertyDescriptor(globalThis,'fs').get);"
    " fs = 1; console.log(fs)",
    "crypto_word": "console.log(typeof crypto, typeof crypto.randomBytes, typeof crypto.subtle)",
    "crypto_throw": "crypto.nope()",
    "esm_import": "import('fs').then(m=>console.log(typeof m.readFileSync))",
    "env": "console.log(JSON.stringify(Object.entries(process.env)), process.cwd())",
    "child_env": "console.log(require('child_process').execFileSync('/usr/bin/env').toString())",
    "child_node": "console.log(require('child_process').execFileSync(process.execPath,"
    " ['-e', 'console.log(process.execArgv, process.argv)']).toString())",
    "descriptors": "const fs=require('fs'); console.log(fs.readdirSync('/proc/self/fd').map(f=>{"
    "try{return f+'>'+fs.readlinkSync('/proc/self/fd/'+f).replace(/[0-9]+/g,'N')}"
    "catch(e){return f+'>gone'}}).join(' '));"
    " console.log(fs.openSync('/dev/null'))",
    "threads": "console.log(require('fs').readFileSync('/proc/self/status','utf8').match(/Threads.*/)[0])",
    "stdio": "console.log(process.stdout.isTTY, process.stdout._type, process.stdout.fd,"
    " process.stdout.writableHighWaterMark, process.stderr._type)",
    "stdin": "let d=''; process.stdin.on('data',c=>d+=c).on('end',()=>console.log('end', JSON.stringify(d)))",
    "warning": "process.emitWarning('careful'); new Buffer(1)",
    "async_ids": "const ah=require('async_hooks'); console.log(ah.executionAsyncId(), ah.triggerAsyncId(),"
    " ah.executionAsyncResource().constructor.name, new ah.AsyncResource('X').asyncId())",
    "handles": "console.log(process._getActiveHandles().length, process._getActiveRequests().length,"
    " process.getActiveResourcesInfo(), JSON.stringify(process.eventNames()), process.listenerCount('warning'))",
    "regexp_statics": "console.log(JSON.stringify([RegExp.$1, RegExp.lastMatch, RegExp.input]))",
    "report": "console.log(process.report.reportOnUncaughtException, process.features.inspector)",
    "empty": "",
    "hashbang": "#!/usr/bin/env node\nconsole.log(1)",
    "esm_syntax": "import fs from 'fs'; console.log(typeof fs.readFileSync)",
    "top_level_await": "await 1; console.log('tla')",
    "return": "return 5",
    "no_newline": "process.stdout.write('no newline')",
    "big_output": "process.stdout.write('x'.repeat(1 << 20)); process.stderr.write('y'.repeat(1 << 18))",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_warm_node_looks_exactly_like_a_cold_one(probe: str, name: str) -> None:
    code = CASES[name]
    expected = cold(code)
    stub = Warm(probe)
    pid = stub.proc.pid
    got = stub.run(code)
    if name == "warning":  # the only difference: another process, another pid (both are pid 2 in a box)
        expected = same_but_pid(expected, int(expected[2].split(b"(node:")[1].split(b")")[0]))
        got = same_but_pid(got, pid)
    assert got == expected


def test_the_stub_sends_the_runs_timeout_and_closes_its_control_channel(probe: str) -> None:
    stub = Warm(probe)
    code = (
        "const fs=require('fs'); for (const fd of [100, 101]) { try { fs.fstatSync(fd); console.log(fd, 'open') }"
        " catch (e) { console.log(fd, e.code) } }"
    )
    assert stub.run(code) == (0, b"100 EBADF\n101 EBADF\n", b"")
    assert stub.sent_timeout == 30.0


@pytest.mark.parametrize("change", ["a frame", "the bottom frame's name"])
def test_a_probe_that_does_not_match_makes_the_stub_dirty(probe: str, change: str) -> None:
    """The bottom frame comes from a cold run; a stack the stub cannot reproduce means cold, never a different run."""
    lines = probe.split("\n")
    if change == "a frame":
        lines[2] = lines[2].replace(")", "0)")
    else:
        lines[-1] = lines[-1].replace("at ", "at main (") + ")"
    stub = Warm("\n".join(lines))
    try:
        assert stub.state == b"D"
    finally:
        stub.close()


def test_usable_probe_accepts_only_an_anonymous_bottom_frame_in_node() -> None:
    good = (
        "Error\n    at [eval]:1:28\n    at evalScript (node:internal/process/execution:133:3)\n"
        "    at node:internal/main/eval_string:51:3"
    )
    assert node_stub.usable_probe(good)
    assert not node_stub.usable_probe(good.replace("at node:internal/main/eval_string:51:3", "at main (node:x:1:1)"))
    assert not node_stub.usable_probe("Error\n    at [eval]:1:28")
    assert not node_stub.usable_probe("")
