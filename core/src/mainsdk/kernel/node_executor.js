// The cell kernel's JavaScript and TypeScript executor (see the kernel package's docstring for the protocol).
//
// The supervisor starts node as `node --expose-internals -e <NODE_BOOT> <fd> <sha256> <R> <W> <language>
// <constants> [site ...]` (supervisor.py): the boot line reads this file's text from the sealed in-memory file
// <fd>, checks its SHA-256, and calls the function this text is with node's `require`, the arguments from <R>
// on and the boot line's own `import()` (a vm script has none of its own on node 20); <constants> is protocol.py's NODE_CONSTANTS as JSON. Its stdin is
// /dev/null, its stdout and stderr the supervisor's own, in a process group of its own, with a parent-death
// SIGKILL. It never holds the token. Between cells its waiter, a worker thread of its own that runs no cell's
// code, is blocked in read(R) (fs.readSync): what the supervisor watches to know a cell is over. Each request is
// one JSON line on R, each result one JSON line on W.
//
// A cell is run as node's own REPL runs a line, with node's own machinery rather than hand parsing:
// - node's bundled acorn (internal/deps/acorn, on node 20 and 22 behind --expose-internals) parses the cell;
//   each ESM `import` declaration becomes `var ... = await import(...)` (a vm script cannot hold one, and
//   node 20 refuses a vm script's own dynamic import without --experimental-vm-modules: every `import(...)` of
//   the cell goes through this file's own, which resolves from the interpreter's folder);
// - a cell with a top-level `await` goes through node's REPL transform (internal/repl/await's
//   processTopLevelAwait): its declarations are hoisted out of an async function, and its final expression
//   is that function's value;
// - the code runs in this context (vm.Script.runInThisContext, breakOnSigint), so a `let`/`const`/`class`/
//   `function` of one cell is there in the next, exactly as in node's REPL (re-declaring a `let` or `const`
//   in a later cell is the same SyntaxError as there; an imported name is a `var`, so an import cell re-runs).
// TypeScript: node's own type stripping where the box's node has it (module.stripTypeScriptTypes, node >=
// 22.13), otherwise `typescript`'s transpileModule from the kernel's package set (a `site` folder).
//
// Interrupts (the supervisor's SIGINT at a cell's timeout): the synchronous part of a cell is interrupted by
// V8 (breakOnSigint) and the state is kept; a cell waiting on a promise is rejected with "Interrupted" and
// the state is kept (what it was waiting for may still finish later). A busy loop after an `await` runs
// outside any vm call: nothing can stop it but the supervisor's kill after the grace, and the state goes
// with the interpreter. Callbacks a cell left (timers, I/O) run between cells too (the main thread's event
// loop is free then); one that blocks the main thread holds the next cell until its timeout.
//
// The whole executor is one function, so none of its names is a global a cell could collide with (a cell's
// `import fs` or `let path`).
(function executor(require, args, load) {
"use strict";
const fs = require("fs");
const vm = require("vm");
const util = require("util");
const nodeModule = require("module");
const path = require("path");
const { pathToFileURL } = require("url");

const REQ = Number(args[0]);
const RES = Number(args[1]);
const LANGUAGE = args[2];
const { TEXT_LIMIT, UNSUPPORTED_EXIT } = JSON.parse(args[3]);
const SITE = args.slice(4);
const IMPORT = "__mainsdk_import__";

// Node's own parser and REPL transform (node 20 and 22 have both; node's REPL itself loads them so). Should a
// later node move them, a cell that needs one says so instead of the kernel failing to start.
function internal(name) {
  try {
    return require(name);
  } catch (error) {
    return { missing: `node's ${name}, which node ${process.version} does not have (${error.code || error.message})` };
  }
}
const acorn = internal("internal/deps/acorn/acorn/dist/acorn");
const replAwait = internal("internal/repl/await");
function missing(what, module) {
  const error = new Error(`${what} in a cell needs ${module.missing}`);
  error.name = "KernelError";
  error.stack = `KernelError: ${error.message}`;
  throw error;
}

// Imports resolve from the interpreter's folder, as a script there would (node_modules up from it).
const base = pathToFileURL(path.join(process.cwd(), "[cell]")).href;
const cellRequire = nodeModule.createRequire(path.join(process.cwd(), "[cell]"));
Object.defineProperty(globalThis, IMPORT, {
  value: (specifier) => load(specifier.startsWith(".") ? new URL(specifier, base).href : specifier),
  enumerable: false,
});
globalThis.require = cellRequire;

function stripper() {
  if (LANGUAGE !== "typescript") return null;
  if (typeof nodeModule.stripTypeScriptTypes === "function") {
    return (code) => {
      // Node 22 and 23 warn that stripTypeScriptTypes is experimental, into the cell's stderr: not the cell's.
      const warn = process.emitWarning;
      process.emitWarning = () => {};
      try {
        return nodeModule.stripTypeScriptTypes(code, { mode: "transform" }); // enums and namespaces too
      } finally {
        process.emitWarning = warn;
      }
    };
  }
  for (const folder of SITE) {
    let ts;
    try {
      ts = nodeModule.createRequire(path.join(folder, "[kernel]"))("typescript");
    } catch {
      continue;
    }
    const options = { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: false };
    return (code) => {
      const out = ts.transpileModule(code, { compilerOptions: options, reportDiagnostics: true });
      const bad = (out.diagnostics || []).find((d) => d.category === ts.DiagnosticCategory.Error);
      if (bad) {
        const error = new SyntaxError(ts.flattenDiagnosticMessageText(bad.messageText, "\n"));
        error.stack = `SyntaxError: ${error.message}`;
        throw error;
      }
      return out.outputText.replace(/\nexport \{\};\s*$/, "\n");
    };
  }
  process.stderr.write(
    `mainsdk cell kernel: TypeScript cells need node >= 22.13 (type stripping) or the kernel's typescript ` +
      `package; this box has node ${process.version} and neither\n`,
  );
  process.exit(UNSUPPORTED_EXIT);
}
const strip = stripper();

const PIPE_BUF = 4096; // Linux: a pipe write of at most this many bytes is atomic

function writeAll(fd, text) {
  const data = typeof text === "string" ? Buffer.from(text, "utf8") : text;
  let done = 0;
  while (done < data.length) done += fs.writeSync(fd, data, done);
}

// The waiter: a worker thread of the executor's own that reads each request line, blocked in read(R) between
// cells (what the supervisor watches: that thread, which no cell's code ever runs on), hands it to the main
// thread and sleeps until the main thread wrote the cell's result. The main thread's event loop stays free
// for what a cell awaits, so a timer or a callback a cell left can never be where a cell ends.
const WAITER = `
const fs = require("fs");
const { workerData, parentPort } = require("worker_threads");
const done = new Int32Array(workerData.done);
const chunk = Buffer.alloc(1 << 16);
let pending = Buffer.alloc(0);
wait: for (;;) {
  let newline = pending.indexOf(10);
  while (newline < 0) {
    let n;
    try {
      n = fs.readSync(workerData.req, chunk, 0, chunk.length, null);
    } catch (error) {
      if (error.code === "EINTR" || error.code === "EAGAIN") continue;
      throw error;
    }
    if (n === 0) {
      parentPort.postMessage(null); // the supervisor is gone
      break wait;
    }
    pending = Buffer.concat([pending, chunk.subarray(0, n).filter((b) => b !== 0)]); // its probes: "I wait"
    newline = pending.indexOf(10);
  }
  const line = pending.subarray(0, newline).toString("utf8");
  pending = pending.subarray(newline + 1);
  Atomics.store(done, 0, 0);
  parentPort.postMessage(line);
  Atomics.wait(done, 0, 0); // until the main thread wrote this cell's result
}
`;

// ESM import declarations as dynamic imports of this file's own import (positions from acorn, lines kept).
function rewriteImports(code) {
  if (acorn.missing) {
    if (/^\s*import\s*[\w{*"']/m.test(code)) missing("an import statement", acorn);
    return code;
  }
  let tree;
  try {
    tree = acorn.parse(code, {
      ecmaVersion: "latest",
      sourceType: "module",
      allowAwaitOutsideFunction: true,
      allowReturnOutsideFunction: true,
      allowHashBang: true,
    });
  } catch {
    return code; // not module syntax (sloppy-only code, or an error V8 reports better): as written
  }
  const edits = [];
  const visit = (node) => {
    if (!node || typeof node.type !== "string") return;
    if (node.type === "ImportExpression") {
      edits.push([node.start, node.start + "import".length, IMPORT]);
    }
    for (const key of Object.keys(node)) {
      const child = node[key];
      if (Array.isArray(child)) child.forEach(visit);
      else if (child && typeof child.type === "string") visit(child);
    }
  };
  for (const node of tree.body) {
    if (node.type !== "ImportDeclaration") {
      visit(node);
      continue;
    }
    const source = JSON.stringify(node.source.value);
    const load = `(await ${IMPORT}(${source}))`;
    const names = [];
    let namespace = null;
    for (const spec of node.specifiers) {
      if (spec.type === "ImportNamespaceSpecifier") namespace = spec.local.name;
      else if (spec.type === "ImportDefaultSpecifier") names.push(`default: ${spec.local.name}`);
      else {
        const imported = spec.imported.type === "Literal" ? JSON.stringify(spec.imported.value) : spec.imported.name;
        names.push(`${imported}: ${spec.local.name}`);
      }
    }
    let text;
    if (namespace !== null) {
      text = `var ${namespace} = ${load};` + (names.length ? ` var {${names.join(", ")}} = ${namespace};` : "");
    } else if (names.length) {
      text = `var {${names.join(", ")}} = ${load};`;
    } else {
      text = `${load};`;
    }
    const lines = code.slice(node.start, node.end).split("\n").length - 1;
    edits.push([node.start, node.end, text + "\n".repeat(lines)]);
  }
  edits.sort((a, b) => b[0] - a[0]);
  for (const [start, end, text] of edits) code = code.slice(0, start) + text + code.slice(end);
  return code;
}

function errorOf(thrown) {
  if (thrown instanceof Error || (thrown && typeof thrown === "object" && "stack" in thrown)) {
    let name = String(thrown.name || "Error");
    let message = String(thrown.message ?? "");
    if (thrown.code === "ERR_SCRIPT_EXECUTION_INTERRUPTED") {
      name = "Interrupted";
      message = "the cell was interrupted (SIGINT)";
      return { name, value: message, traceback: `${name}: ${message}` };
    }
    const frames = String(thrown.stack || `${name}: ${message}`).split("\n");
    // The kernel's own frames (vm, the boot line, this file) are not the cell's.
    const cut = frames.findIndex((line) => /^\s+at .*(node:vm|\[eval\]|node:internal|mainsdk_kernel\/)/.test(line));
    const stack = (cut > 0 ? frames.slice(0, cut) : frames).join("\n");
    return { name, value: message.slice(0, TEXT_LIMIT), traceback: stack.slice(-TEXT_LIMIT) };
  }
  const text = util.inspect(thrown);
  return { name: "Uncaught", value: text.slice(0, TEXT_LIMIT), traceback: `Uncaught ${text}`.slice(-TEXT_LIMIT) };
}

class Results {
  constructor(maxBytes) {
    this.items = [];
    this.dropped = 0;
    this.room = maxBytes;
  }

  add(mime, text) {
    if (text.length > this.room) {
      this.dropped += 1;
      return;
    }
    this.room -= text.length;
    this.items.push({ mime, data: text, encoding: "utf-8" });
  }

  addValue(value) {
    if (value !== null && typeof value === "object" || typeof value === "number" || typeof value === "boolean" || typeof value === "string") {
      try {
        const json = JSON.stringify(value);
        if (typeof json === "string") this.add("application/json", json);
      } catch {
        // not JSON-able (a cycle, a BigInt inside): its text form only
      }
    }
    let text;
    try {
      text = util.inspect(value);
    } catch (error) {
      text = `<inspect failed: ${error && error.name}>`;
    }
    this.add("text/plain", text);
  }
}

// Interrupts: the synchronous part of a cell is V8's (breakOnSigint); a cell waiting on a promise is rejected
// here. A SIGINT that lands between cells finds nothing running.
//
// Node's SIGINT watchdog (what breakOnSigint runs on) starts a thread of its own for each vm call and joins it
// after, and vm takes the process's SIGINT listeners off and puts them back around the call: most of a warm
// cell's time in the executor. So the executor holds that watchdog started for its whole life (with the calls
// node's REPL starts and stops it by), and each cell's vm call only registers with it. While it is held, SIGINT is the
// watchdog's: it interrupts a vm call, and otherwise is kept as pending, which a waiting cell polls for
// (PENDING_POLL). A cell that listens for SIGINT itself (its listener takes the signal from the watchdog) puts
// the executor back to node's own per-call watchdog and a listener of its own, as node without a held watchdog.
const PENDING_POLL = 5; // ms
let interrupt = null;
function onSigint() {
  if (interrupt) interrupt();
}
const watchdog = heldWatchdog();
if (!watchdog) process.on("SIGINT", onSigint);

function heldWatchdog() {
  const warn = process.emitWarning;
  process.emitWarning = () => {}; // the binding module warns that it is internal, into a cell's stderr: not the cell's
  let binding;
  try {
    binding = require("internal/test/binding").internalBinding("contextify");
  } catch {
    return null; // a node without it: a watchdog for each vm call
  } finally {
    process.emitWarning = warn;
  }
  const calls = ["startSigintWatchdog", "stopSigintWatchdog", "watchdogHasPendingSigint"];
  if (!calls.every((name) => typeof binding[name] === "function")) return null;
  let started;
  try {
    started = binding.startSigintWatchdog() !== false; // false (or a throw): its thread could not start
  } catch {
    started = false;
  }
  if (!started) {
    binding.stopSigintWatchdog(); // its count back to none: each vm call starts its own again
    return null;
  }
  return { binding, held: true };
}

// Whether the held watchdog still has SIGINT: false once a cell listens for SIGINT itself, and from then on
// (the watchdog released, the cell's listeners put back after it, as vm does around its own calls).
function watchdogHeld() {
  if (!watchdog || !watchdog.held) return false;
  if (process.listenerCount("SIGINT") === 0) return true;
  const listeners = process.rawListeners("SIGINT");
  process.removeAllListeners("SIGINT");
  watchdog.held = false;
  watchdog.binding.stopSigintWatchdog();
  for (const listener of listeners) process.addListener("SIGINT", listener);
  process.on("SIGINT", onSigint);
  return false;
}

// A SIGINT the held watchdog kept while no vm call ran: taken (and forgotten) by a waiting cell's poll.
function pendingSigint() {
  if (!watchdogHeld() || !watchdog.binding.watchdogHasPendingSigint()) return false;
  watchdog.binding.startSigintWatchdog(); // a start and a stop of a held watchdog forget the pending signal
  watchdog.binding.stopSigintWatchdog();
  return true;
}
// A cell's stray rejection or a throw in its callback is printed, as node's REPL does; it ends nothing.
process.on("unhandledRejection", (reason) => {
  process.stderr.write(`Uncaught (in promise) ${util.inspect(reason)}\n`);
});
process.on("uncaughtException", (error) => {
  process.stderr.write(`Uncaught ${error && error.stack ? error.stack : util.inspect(error)}\n`);
});

function setEnv(env) {
  const saved = [];
  for (const [name, value] of Object.entries(env || {})) {
    saved.push([name, Object.prototype.hasOwnProperty.call(process.env, name) ? process.env[name] : undefined]);
    process.env[name] = String(value);
  }
  return () => {
    for (const [name, value] of saved.reverse()) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  };
}

async function runCell(request) {
  const results = new Results(Number(request.max_results ?? 1 << 20));
  const filename = `<cell-${request.cell}>`;
  const restore = setEnv(request.env);
  let error = null;
  try {
    let code = request.code;
    if (strip) code = strip(code);
    if (code.includes("import")) code = rewriteImports(code); // two parses saved on most cells, as below
    let wrapped = null;
    if (code.includes("await")) {
      // node's REPL makes the same check before it transforms a line
      if (replAwait.missing) {
        if (/\bawait\b/.test(code)) missing("a top-level await", replAwait);
      }
      try {
        wrapped = replAwait.processTopLevelAwait(code);
      } catch {
        wrapped = null; // not parseable: V8 reports the cell's own SyntaxError below
      }
    }
    const script = new vm.Script(wrapped ?? code, { filename });
    let value = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
    if (wrapped !== null) {
      const stop = new Promise((resolve, reject) => {
        interrupt = () => {
          const cause = new Error("the cell was interrupted (SIGINT) while it waited");
          cause.name = "Interrupted";
          cause.stack = `Interrupted: ${cause.message}`;
          reject(cause);
        };
      });
      const poll = setInterval(() => {
        if (pendingSigint()) onSigint();
      }, PENDING_POLL);
      let outcome;
      try {
        outcome = await Promise.race([value, stop]);
      } finally {
        clearInterval(poll);
      }
      value = outcome === undefined ? undefined : outcome.value;
    }
    if (value !== undefined) {
      globalThis._ = value;
      results.addValue(value);
    }
  } catch (thrown) {
    error = errorOf(thrown);
  } finally {
    interrupt = null;
    restore();
  }
  return { cell: request.cell, results: results.items, results_dropped: results.dropped, error };
}

// A write node could not finish at once (the pipe was full: node queues the rest, the descriptor being
// non-blocking) is written before the cell's result: the cell's output comes before its end, as in Python.
function drained(stream) {
  if (!stream.writableLength) return null;
  return new Promise((resolve) => {
    stream.once("drain", resolve);
    stream.once("close", resolve);
    stream.once("error", resolve);
  });
}

// Output written synchronously: node makes a pipe's writes asynchronous, so what a cell printed past the pipe's
// 64 KiB would come after its end (in the next cell), an endless console.log would fill node's memory instead of
// meeting the output limit, and the non-blocking flag would be on the file the supervisor writes its frames to.
function blockingOutput() {
  for (const stream of [process.stdout, process.stderr]) {
    if (stream._handle && typeof stream._handle.setBlocking === "function") stream._handle.setBlocking(true);
  }
}

const { Worker } = require("worker_threads");
const done = new Int32Array(new SharedArrayBuffer(4));
function release() {
  Atomics.store(done, 0, 1);
  Atomics.notify(done, 0); // the waiter goes back to read(R): the supervisor is watching for it
}
const waiter = new Worker(WAITER, { eval: true, workerData: { req: REQ, done: done.buffer }, stdout: false });
waiter.on("error", (error) => {
  process.stderr.write(`mainsdk cell kernel: the request waiter failed: ${error && error.stack}\n`);
  process.exit(70); // no request can come any more
});
waiter.on("message", (line) => {
  if (line === null) process.exit(0);
  // A message is handled on a turn of the event loop: a SIGINT that landed after the last cell ended is seen
  // (and finds nothing running) before this cell starts.
  const request = JSON.parse(line);
  watchdogHeld(); // a listener an earlier cell left for SIGINT: node's own per-call watchdog from now on
  blockingOutput(); // before each cell: a cell may have undone it
  runCell(request).then(async (frame) => {
    for (const stream of [process.stdout, process.stderr]) await drained(stream); // a cell made it non-blocking again
    let text;
    try {
      text = JSON.stringify(frame);
    } catch {
      text = JSON.stringify({ ...frame, results: [], results_dropped: frame.results.length });
    }
    // A result of at most PIPE_BUF bytes is one atomic write, whole or not at all in the pipe: the waiter goes
    // back to read(R) first, so the supervisor, which takes the cell as over once it sees a result and the waiter
    // at its wait, most often finds it there at once instead of polling for it. A longer result may take several
    // writes (the supervisor reading between them): it is written whole before the waiter goes back.
    const data = Buffer.from(text + "\n", "utf8");
    const atomic = data.length <= PIPE_BUF;
    if (atomic) release();
    try {
      writeAll(RES, data);
    } catch {
      process.exit(70); // a cell closed the result pipe: no cell can end again, as when Python's executor dies
    }
    if (!atomic) release();
  });
});
blockingOutput();
writeAll(RES, '{"ready": true}\n');
});
