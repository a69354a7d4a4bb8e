"""A warm ``node``, started ahead as ``node --expose-internals -e STUB``: it runs one run's code as ``node -e`` would.

What a cold ``node -e CODE`` does (``lib/internal/main/eval_string.js`` and ``evalScript`` in
``lib/internal/process/execution.js``, read out of the binary with
``internalBinding('builtins').natives``): bootstrap, ``addBuiltinLibsToObject(globalThis)``,
then, in the bootstrap's own callback scope (async id 1, trigger 0), ``evalScript('[eval]', CODE)``
(wrapped as ``(crypto=>{{CODE}})(require('node:crypto'))`` when the code names ``crypto``). An
exception thrown out of it goes to node's uncaught-exception path (V8's message, source line,
caret, stack); after it node runs the nextTick queue, then microtasks, then the event loop.

The stub does the same, later:

- It takes what it needs from node's internals (``evalScript``, ``BuiltinModule``, ``UDP``,
  the async-id fields), then undoes ``--expose-internals``: ``require('internal/...')`` fails
  as it does cold, ``module.builtinModules`` is the cold list, ``process.execArgv`` is
  ``['-e', CODE]``, ``process._eval`` is the code, and ``process.moduleLoadList`` loses what
  the stub loaded. It never touches ``process.stdout`` (made lazily) and its names live in a
  closure, not in globals.
- It calls ``evalScript`` from a function compiled under the name and position of the cold
  path's bottom frame (``node:internal/main/eval_string:51:3`` in v20.20.2). That position is
  not assumed: a cold ``node -e PROBE_CODE`` of the same binary, in the same box and
  environment, prints its stack; the stub runs the same probe through its own path and says
  "dirty" (the key then runs cold) unless the two stacks are equal, byte for byte.
- That function is called from native code with no JS frame below it: it is the close
  callback of a fresh ``UDP`` handle (no descriptor), bound to ``undefined`` so that V8 prints
  the frame as a top-level one. A close callback runs through ``MakeCallback``: an exception
  thrown out of the code reaches the same uncaught-exception path as cold (``throw 1``,
  ``throw null``, SyntaxError output, ``uncaughtException`` handlers and their origin, exit
  codes), and on return node runs nextTicks then microtasks, as after the cold bootstrap. The
  handle is made with async id 1, trigger 0, and a plain object as its public resource, as
  the bootstrap's callback scope has.
- The job comes on the control socket (fd ``CONTROL_FD``); the stub sends B the run's timeout
  on the deadline pipe (``DEADLINE_FD``: B's timer starts now), closes both, changes into the
  run's folder, and replaces ``process.env`` (real setenv/unsetenv) before the code runs.

Descriptors: 0 is /dev/null, 1 and 2 are pipes whose read ends the launcher holds (node cannot
put another pipe on them, so the run's output comes from these), and the two control
descriptors sit high, so that node's own descriptors get the numbers they get cold.
"""

from __future__ import annotations

import json
import struct

CONTROL_FD, DEADLINE_FD = 100, 101
PROBE_GLOBAL = "__mainsdk_probe"
# What a cold run prints to find the bottom frame of the code's stack; the stub runs the same prefix.
PROBE_CODE = f"globalThis.{PROBE_GLOBAL}=new Error().stack;process.stdout.write({PROBE_GLOBAL})"
_LENGTH = struct.Struct(">I")

# The word c-r-y-p-t-o must not appear in the stub: node -e wraps a program naming it (see above).
_STUB = r"""'use strict';
(() => {
  const CONTROL = @CONTROL@, DEADLINE = @DEADLINE@, PROBE = @PROBE@, KEY = '@KEY@';
  const loads = process.moduleLoadList, loaded = loads.length;
  let fs;
  const say = (what) => { try { fs.writeSync(CONTROL, what); } catch {} };
  try {
    const BuiltinModule = require('internal/modules/helpers')
      .loadBuiltinModule('internal/process/execution', 'internal/process/execution').constructor;
    const own = (id) => BuiltinModule.map.get(id).exports;
    fs = own('fs');
    const { evalScript, evalModuleEntryPoint } = own('internal/process/execution');
    const { makeContextifyScript, runScriptInThisContext } = own('internal/vm');
    const { getOptionValue } = own('internal/options');
    const { Module } = own('internal/modules/cjs/loader');
    const warn = process.emitWarning;
    process.emitWarning = () => {};  // internal/test/binding warns as it loads
    const { internalBinding } = require('internal/test/binding');
    process.emitWarning = warn;
    const { UDP } = internalBinding('udp_wrap');
    const { async_id_fields: asyncIds, constants: { kAsyncIdCounter, kDefaultTriggerAsyncId } } =
      internalBinding('async_wrap');
    const { resource_symbol } = internalBinding('symbols');
    const counter = asyncIds[kAsyncIdCounter];
    const [, file, line, column] = /^    at (node:[^ ]+):(\d+):(\d+)$/.exec(PROBE.split('\n').pop());
    // Calls fn(...) at file:line:column: the cold path's bottom frame, evalScript's call in eval_string.
    const factory = runScriptInThisContext(makeContextifyScript(
      '(fn, a) => function () {' + '\n'.repeat(line - 1) + ' '.repeat(column - 1) +
        'fn(a[0], a[1], a[2], a[3], a[4]) }',
      file, 0, 0, undefined, false, undefined, Symbol(file), undefined), true, false);
    // What eval_string.js does with its source, as [function, arguments].
    const evaluate = (source) => {
      const type = getOptionValue('--input-type');
      if (type === 'module' || (getOptionValue('--experimental-default-type') === 'module' && type !== 'commonjs')) {
        return [evalModuleEntryPoint, [source, false]];
      }
      const name = 'cry' + 'pto';
      const word = getOptionValue('--experimental-global-web' + name) &&
        new RegExp('\\b' + name + '\\b').exec(source) !== null;
      const define = word && !!process.versions.openssl;
      if (word && !define) {
        const setReal = (val) => { delete globalThis[name]; globalThis[name] = val; };
        Object.defineProperty(globalThis, name, { __proto__: null, set: setReal });
      }
      const esm = getOptionValue('--import').length > 0 || getOptionValue('--experimental-loader').length > 0;
      const body = define ? '(' + name + '=>{{' + source + '}})(require(\'node:' + name + '\'))' : source;
      return [evalScript, ['[eval]', body, false, false, esm]];
    };
    const later = ([fn, args], handle) => (handle || new UDP()).close(factory(fn, args).bind(undefined));
    const readJob = () => {
      const head = Buffer.alloc(4);
      const fill = (buf) => {
        for (let n = 0; n < buf.length;) {
          const got = fs.readSync(CONTROL, buf, n, buf.length - n, null);
          if (got === 0) process.reallyExit(0);  // the launcher dropped this node
          n += got;
        }
        return buf;
      };
      fill(head);
      return JSON.parse(fill(Buffer.alloc(head.readUInt32BE(0))).toString('utf8'));
    };
    const run = () => {
      const got = globalThis[KEY];
      delete globalThis[KEY];
      if (got !== PROBE) {
        say('D');  // this node's stack would not be the cold one: the key runs cold
        process.reallyExit(0);
      }
      // The stub needs no more internals: --expose-internals is undone now, off the run's path.
      const publicIds = [...BuiltinModule.map.keys()]
        .filter((id) => BuiltinModule.canBeRequiredByUsers(id) && !id.startsWith('internal/'));
      BuiltinModule.setRealmAllowRequireByUsers(publicIds);
      Module.builtinModules = Object.freeze(BuiltinModule.getCanBeRequiredByUsersWithoutSchemeList());
      say('R');
      const job = readJob();
      fs.writeSync(DEADLINE, Buffer.from(Float64Array.of(job.timeout).buffer));
      fs.closeSync(DEADLINE);
      fs.closeSync(CONTROL);
      process.chdir(job.cwd);
      for (const name of Object.keys(process.env)) delete process.env[name];
      for (const [name, value] of job.env) process.env[name] = value;
      process.execArgv.splice(0, Infinity, '-e', job.code);
      Object.defineProperty(process, '_eval',
        { __proto__: null, writable: false, configurable: true, enumerable: true, value: job.code });
      // The code's callback scope looks like the cold bootstrap's: async id 1, trigger 0, a plain resource.
      asyncIds[kAsyncIdCounter] = 0;
      asyncIds[kDefaultTriggerAsyncId] = 0;
      const handle = new UDP();
      asyncIds[kAsyncIdCounter] = counter;
      asyncIds[kDefaultTriggerAsyncId] = -1;
      handle[resource_symbol] = {};
      later(evaluate(job.code), handle);
      loads.length = loaded;
    };
    const probe = evaluate('globalThis.' + KEY + '=new Error().stack');
    later([run, []]);
    later(probe);  // libuv runs a turn's close callbacks last in, first out: the probe, then run()
  } catch {
    say('D');
    process.reallyExit(0);
  }
})();
"""


def stub_source(probe: str) -> str:
    """The stub's program for a node whose cold ``node -e PROBE_CODE`` printed ``probe``."""
    return (
        _STUB.replace("@CONTROL@", str(CONTROL_FD))
        .replace("@DEADLINE@", str(DEADLINE_FD))
        .replace("@KEY@", PROBE_GLOBAL)
        .replace("@PROBE@", json.dumps(probe))  # ASCII only: a valid JS string literal
    )


def stub_argv(node: str, probe: str) -> list[str]:
    """The warm node's argv."""
    return [node, "--expose-internals", "-e", stub_source(probe)]


def usable_probe(probe: str) -> bool:
    """Whether a cold probe's output is a stack whose bottom frame the stub can stand in for."""
    lines = probe.split("\n")
    if len(lines) < 3 or lines[0] != "Error" or not lines[1].startswith("    at [eval]:1:"):
        return False
    bottom = lines[-1]
    if not bottom.startswith("    at node:") or " " in bottom[len("    at ") :]:
        return False
    parts = bottom[len("    at ") :].rsplit(":", 2)
    return len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit() and int(parts[1]) >= 1 and int(parts[2]) >= 1


def encode_job(code: str, env: dict[str, str], cwd: str, timeout: float) -> bytes:
    """The job frame the stub reads: a 4-byte length, then JSON (strings only: the caller checked they are UTF-8)."""
    body = json.dumps({"code": code, "env": list(env.items()), "cwd": cwd, "timeout": timeout}).encode()
    return _LENGTH.pack(len(body)) + body
