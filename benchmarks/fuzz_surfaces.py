"""Fuzz the newest surfaces: cells, background processes, package specs, agent inputs, MCP frames and the CLI.

    python benchmarks/fuzz_surfaces.py --seed 1 --count 1024

Each case is one call on the real local driver (the MCP server and the CLI as real processes): a cell
(``session.run_code``), a background process (``session.start``, ``wait``, ``output``, ``kill``), a
``sandbox.packages`` entry loaded from ``main.yaml`` or a ``packages=[...]`` request, an agent's input to
the code-runner action (one-shot and ``session=True``, files against the box's own), a JSON-RPC frame to
``mainsdk sandbox mcp --session``, or a ``mainsdk sandbox run`` command line. Most cases put a mistake into
an otherwise good call; the rest are good calls whose result is checked.

A mistake must end in a user's code (``MAIN-SANDBOX-0001`` ..., never ``0006``), not retryable, in a
message of at most 2,000 characters; a good call must succeed and return what the code made. Counted:
``raw`` (any other exception, a traceback on the CLI's stderr, an MCP internal error), ``hang`` (not
answered in ``HANG_SECONDS``), ``blow-up`` (a refusal message or a result past its bound), ``misclassified``
(a mistake accepted or answered as an outage, a good call refused) and ``lost`` (a good call whose result
lacks what the code printed, or a pin loaded as another one than written). Prints, last,
``N cases: R raw exceptions, H hangs, B blow-ups, M misclassified, L lost`` and exits 1 unless all are 0.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import queue
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
from mainsdk import Sandbox, SandboxDeps, SandboxError, secret
from mainsdk.config import load_config_text
from mainsdk.errors import ConfigError
from mainsdk.packages import parse_pin, select_packages

from mainsdk_local import local_sandbox_driver

HANG_SECONDS = 30.0
MAX_MESSAGE = 2_000  # a refusal quotes what was wrong, never the whole of a huge input
USER_CODES = frozenset(
    {"MAIN-SANDBOX-0001", "MAIN-SANDBOX-0005", "MAIN-SANDBOX-0008", "MAIN-SANDBOX-0009", "MAIN-CONFIG-0003"}
)
CONFIG = """
sandbox:
  driver: local
  limits: { timeout: 10s, memory: 256MB, output: 64KB, files: 1MB }
  secrets: [FZ_EMPTY]
permissions:
  processes: [python3, bash]
  disk: { temp: { max: 64MB } }
"""
OUTPUT_LIMIT = 64 * 1024
SURFACES = ("cell", "background", "package", "agent", "mcp", "cli")
KINDS = ("raw", "hang", "blow-up", "misclassified", "lost")

BAD_TIMEOUTS: list[Any] = [
    Decimal("sNaN"),
    Decimal("NaN"),
    Decimal("-Infinity"),
    float("nan"),
    float("inf"),
    True,
    [1],
    {"s": 1},
    "soon",
    "-1s",
    "1e400h",
    "9" * 500,
    -1,
    10**400,
    "1h",  # above the configured 10s: only lowering is allowed
    "\udc80",
    "1s\0",
]
BAD_CODE: list[Any] = [None, 5, b"1", "", "  \n", "1\0", ["1"], "'\udc80'"]
BAD_PROGRAM: list[Any] = [None, "", 5, "perl", "a\0", ["python3"], b"python3"]
BAD_ARGS: list[Any] = [None, "-c", [1], ["\0"], ["x" * 200_000], 5, [None]]
BAD_KEYWORDS = ("timout", "langauge", "on_ouput", "program", "wait", "files")
BAD_FILES: list[Any] = [
    {"a": "x", "a/b": "y"},
    {"a/b": "y", "a": "x"},
    {"../a": "x"},
    {"/a": "x"},
    {"a\0": "x"},
    {"": "x"},
    {"a": 5},
    {"a": None},
    ["a"],
    "a",
    {"a//b": "x"},
    {"a" * 300: "x"},
]
BAD_INPUTS: list[Any] = [
    None,
    "print(1)",
    [],
    {},
    {"code": 5},
    {"code": ""},
    {"code": "print(1)", "language": "cobol"},
    {"code": "print(1)", "extra": 1},
    {"code": "print(1)", "timeout": "soon"},
    {"code": "print(1)", "timeout": float("nan")},
    {"code": "print(1)", "timeout": Decimal("sNaN")},
    {"code": "print(1)", "timeout": True},
    {"code": "print(1)", "timeout": -1},
    {"code": "print(1)", "timeout": "1h"},
    {"code": "print(1)\0"},
    {1: "x"},
]
# Against the box's own files: the first input writes, the second cannot (a file on the way, a folder there).
BOX_CLASHES = [({"f": "x"}, {"f/g": "y"}), ({"d/x": "x"}, {"d": "y"}), ({"f": "x"}, {"f/g/h": "y"})]
PACKAGE_NAMES = ["six", "Pandas", "zope.interface", "a_b-c", "x1"]
PACKAGE_MISTAKES = [
    "six[a b]==1.0",
    "pan das==1.0",
    "six==1 .0",
    "six[]==1.0",
    "six[a,]==1.0",
    "six[,a]==1.0",
    "six",
    "six>=1.0",
    "six==1.*",
    "six==1.0; python_version<'3'",
    "six @ https://example.com/six.whl",
    "./six",
    "six==",
    "==1.0",
    "six===1.0",
    "six==1.0==2.0",
    "six[a]]==1.0",
    "six[[a]==1.0",
    "six\0==1.0",
    "s" * 300 + "==1.0",
    "six==1.0 # comment",
    "six==١.٠",  # Arabic-Indic digits: not PEP 440's
    "şix==1.0",
]
CODE_FILE = "x.ts"  # a code file whose extension names no language a run has (the harness writes it)
CLI_MISTAKES: list[list[str]] = [
    ["--timeout", "soon"],
    ["--timeout", "1h"],
    ["--timeout", "nan"],
    ["--memory", "lots"],
    ["--memory", "1KB"],
    ["--output", "-1"],
    ["--language", "cobol"],
    ["--file", "noequals"],
    ["--file", "a=/nonexistent/file"],
    ["--file", "../a=/etc/hostname"],
    ["--env", "NOEQUALS"],
    ["--env", "1A=x"],
    ["--env", "K=secret:NOT_LISTED"],
    ["--network", "pypi.org"],
    ["--timout", "5s"],
    ["--feature", "a\nb"],
    # issue 31: a final newline passed the name check; a FIFO as --config hung; x.ts ran as Python
    ["--env", "A\n=x"],
    ["--env", "K=secret:K\n"],
    ["--config", "fifo.yaml"],
    ["--config", "/dev/zero"],
    [CODE_FILE],
]


@attrs.frozen
class SecretName:
    """``secret(name)`` to be called when the case runs (a wrong name raises there, which the judge counts)."""

    name: str


@attrs.frozen
class Case:
    """One call: its surface, what it does, and whether it is a mistake."""

    surface: str
    detail: dict[str, Any]
    mistake: bool

    def describe(self) -> str:
        shown = {k: (v if len(repr(v)) < 80 else f"{repr(v)[:77]}...") for k, v in self.detail.items()}
        return f"{self.surface} {'mistake' if self.mistake else 'good'} {shown!r}"


@attrs.frozen
class Verdict:
    """How a case ended: ``ok`` or one of ``KINDS``, and why."""

    kind: str
    why: str = ""


OK = Verdict("ok")


# --- Generating cases ------------------------------------------------------------------------------------------


def _cell(rng: random.Random, good: bool) -> Case:
    if good:
        number = rng.randrange(1000)
        code, expected = rng.choice(
            [
                (f"print({number})", {"stdout": f"{number}\n"}),
                (f"{number} * 2", {"text": str(number * 2)}),
                (f"raise ValueError('v{number}')", {"error": "ValueError"}),
                (f"import sys\nsys.stdout.write('x' * {number})", {"stdout": "x" * number}),
            ]
        )
        return Case("cell", {"code": code, "expected": expected, "timeout": rng.choice([None, "5s", 5])}, False)
    mistake = rng.choice(["code", "language", "timeout", "keyword", "env"])
    detail: dict[str, Any] = {"code": "1", "mistake": mistake}
    if mistake == "env":  # issue 31: a final newline passed the name check; secret('K\n') then a 0009
        # and an empty secret was a value for a cell's env (refused for egress): it is none for either
        detail["env"] = rng.choice(
            [{"A\n": "x"}, {"\nA": "x"}, {"A": SecretName("K\n")}, {"A": SecretName("FZ_EMPTY")}]
        )
    elif mistake == "code":
        detail["code"] = rng.choice(BAD_CODE)
    elif mistake == "language":
        detail["language"] = rng.choice(["node", "cobol", 5, None, "python\0"])
    elif mistake == "timeout":
        detail["timeout"] = rng.choice(BAD_TIMEOUTS)
    else:
        detail["keyword"] = rng.choice(BAD_KEYWORDS)
    return Case("cell", detail, True)


def _background(rng: random.Random, good: bool) -> Case:
    if good:
        word = f"w{rng.randrange(1000)}"
        return Case("background", {"program": "python3", "args": ["-c", f"print('{word}')"], "word": word}, False)
    mistake = rng.choice(["program", "args", "timeout", "wait", "keyword"])
    detail: dict[str, Any] = {"mistake": mistake, "program": "python3", "args": ["-c", "import time; time.sleep(30)"]}
    if mistake == "program":
        detail["program"] = rng.choice(BAD_PROGRAM)
    elif mistake == "args":
        detail["args"] = rng.choice(BAD_ARGS)
    elif mistake == "timeout":
        detail["timeout"] = rng.choice(BAD_TIMEOUTS)
    elif mistake == "wait":
        detail["wait"] = rng.choice([t for t in BAD_TIMEOUTS if t != "1h"])  # waiting an hour is fine
    else:
        detail["keyword"] = rng.choice(BAD_KEYWORDS)
    return Case("background", detail, True)


def _pin(rng: random.Random) -> str:
    """A valid pin, with spaces only where PEP 508 allows them (around the brackets, the commas and ``==``)."""
    name = rng.choice(PACKAGE_NAMES)
    extras = rng.sample(["excel", "perf", "a1"], k=rng.choice([0, 0, 1, 2]))
    version = rng.choice(["1.0", "2.2.3", "1.0rc1", "2024.1.post2", "1!2.0", "1.0+cpu"])
    spaced = rng.random() < 0.5

    def space() -> str:
        return rng.choice(["", " ", "  "]) if spaced else ""

    listed = f"{space()}[{space()}{f'{space()},{space()}'.join(extras)}{space()}]" if extras else ""
    return f"{space()}{name}{space()}{listed}{space()}=={space()}{version}{space()}"


def _package(rng: random.Random, good: bool) -> Case:
    if rng.random() < 0.7:  # a main.yaml entry
        if good:
            return Case("package", {"entry": _pin(rng)}, False)
        entry = rng.choice([*PACKAGE_MISTAKES, _pin(rng).replace("==", "= =", 1)])
        return Case("package", {"entry": entry}, True)
    configured = ["six==1.16.0", "Pandas[excel]==2.2.3"]
    if good:
        requested = rng.sample(["six", "pandas", "SIX", "six==1.16.0", "Pandas[excel]==2.2.3"], k=rng.randrange(3))
        return Case("package", {"configured": configured, "requested": requested}, False)
    requested_bad: Any = rng.choice(
        [["numpy"], ["six==1.17.0"], "six", [3], ["six>=1"], [None], ["six[a b]==1.16.0"], [""], ["\0"], [b"six"]]
    )
    return Case("package", {"configured": configured, "requested": requested_bad}, True)


def _agent(rng: random.Random, good: bool) -> Case:
    session = rng.random() < 0.5
    if good:
        number = rng.randrange(1000)
        files = rng.choice([{}, {"in.txt": f"{number}"}, {"d/in.txt": f"{number}"}])
        code = f"print(open('{next(iter(files))}').read())" if files else f"print({number})"
        data: dict[str, Any] = {"code": code, "files": files}
        if rng.random() < 0.3:
            data["timeout"] = rng.choice([5, "5s", 2.5])
        return Case("agent", {"input": data, "session": session, "expected": f"{number}\n"}, False)
    if session and rng.random() < 0.3:
        first, then = rng.choice(BOX_CLASHES)
        return Case("agent", {"first": first, "input": {"code": "print(1)", "files": then}, "session": True}, True)
    if rng.random() < 0.3:
        return Case("agent", {"input": {"code": "print(1)", "files": rng.choice(BAD_FILES)}, "session": session}, True)
    return Case("agent", {"input": rng.choice(BAD_INPUTS), "session": session}, True)


def _mcp(rng: random.Random, good: bool) -> Case:
    tool = rng.choice(["code_run", "run_code"])
    if good:
        number = rng.randrange(1000)
        arguments: dict[str, Any] = {"code": f"print({number})"}
        if rng.random() < 0.3:
            arguments["files"] = {"m.txt": "x"}
        return Case("mcp", {"tool": tool, "arguments": arguments, "expected": f"{number}\n"}, False)
    bad = rng.choice([*BAD_INPUTS, *({"code": "print(1)", "files": files} for files in BAD_FILES)])
    if isinstance(bad, dict) and any(isinstance(v, Decimal) for v in bad.values()):
        bad = {"code": "print(1)", "timeout": "NaN"}  # JSON has no Decimal: the nearest thing it carries
    return Case("mcp", {"tool": tool, "arguments": bad}, True)


def _cli(rng: random.Random, good: bool) -> Case:
    if good:
        number = rng.randrange(1000)
        argv = ["--code", f"print({number})", *rng.choice([[], ["--json"], ["--timeout", "5s"]])]
        return Case("cli", {"argv": argv, "expected": f"{number}\n"}, False)
    mistake = rng.choice(CLI_MISTAKES)
    return Case("cli", {"argv": mistake if mistake == [CODE_FILE] else ["--code", "print(1)", *mistake]}, True)


GENERATORS: dict[str, Callable[[random.Random, bool], Case]] = {
    "cell": _cell,
    "background": _background,
    "package": _package,
    "agent": _agent,
    "mcp": _mcp,
    "cli": _cli,
}


def generate(rng: random.Random, good_share: float, surfaces: tuple[str, ...] = SURFACES) -> Case:
    """One case on one of ``surfaces``; a good call with probability ``good_share``."""
    surface = rng.choice(surfaces)
    return GENERATORS[surface](rng, rng.random() < good_share)


# --- Judging ---------------------------------------------------------------------------------------------------


def _refusal(exc: SandboxError) -> Verdict:
    if exc.code not in USER_CODES or exc.retryable:
        return Verdict("misclassified", f"a mistake answered {exc.code} retryable={exc.retryable}: {exc.message:.300}")
    if len(exc.message) > MAX_MESSAGE:
        return Verdict("blow-up", f"a {len(exc.message)}-character message")
    return OK


def _tokens(text: str) -> collections.Counter[str]:
    return collections.Counter(re.findall(r"[A-Za-z0-9._!+-]+", text.replace("==", " ")))


class McpServer:
    """``mainsdk sandbox mcp --session`` as a real process, spoken to in JSON-RPC lines."""

    def __init__(self, folder: Path) -> None:
        command = [sys.executable, "-m", "mainsdk_cli", "sandbox", "mcp", "--language", "python", "--session"]
        self.process = subprocess.Popen(
            command, cwd=folder, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.next_id = 0
        reply = self.request(
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}},
        )
        assert "result" in reply, reply
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def send(self, frame: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(frame) + "\n")
        self.process.stdin.flush()

    def request(self, method: str, params: Any) -> dict[str, Any]:
        """The answer to one request, skipping notifications; ``TimeoutError`` when none comes."""
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            try:
                line = self.lines.get(timeout=HANG_SECONDS)
            except queue.Empty:
                raise TimeoutError(f"no answer to {method} in {HANG_SECONDS:.0f}s") from None
            frame = json.loads(line)
            if frame.get("id") == self.next_id:
                return dict(frame)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Harness:
    """One sandbox and session for the in-process surfaces, one MCP server, and an app folder for the CLI."""

    def __init__(self, surfaces: tuple[str, ...]) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="fuzz-surfaces-"))
        (self.folder / "main.yaml").write_text(CONFIG)
        os.mkfifo(self.folder / "fifo.yaml")  # --config naming it hung the CLI in the open
        (self.folder / CODE_FILE).write_text("print(1)\n")
        config = load_config_text(CONFIG)
        driver = local_sandbox_driver(permissions=config.permissions)
        secrets = {"FZ_EMPTY": ""}.get  # listed, and empty: no value
        self.sandbox = Sandbox(SandboxDeps(config=config, driver=driver, load_entrypoints=False, secret=secrets))
        self.session = self.sandbox.create(idle="10m") if {"cell", "background"} & set(surfaces) else None
        self.actions = {False: self.sandbox.action(), True: self.sandbox.action(name="notebook", session=True)}
        self.conversations = 0
        self.mcp = McpServer(self.folder) if "mcp" in surfaces else None
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)

    def close(self) -> None:
        if self.mcp is not None:
            self.mcp.close()
        if self.session is not None:
            self.session.close()
        self.sandbox.close()
        self.pool.shutdown(wait=False)
        shutil.rmtree(self.folder, ignore_errors=True)

    def judge(self, case: Case) -> Verdict:
        call: Callable[[Case], Verdict] = getattr(self, f"_{case.surface}")
        future = self.pool.submit(call, case)
        try:
            return future.result(timeout=HANG_SECONDS * 2)
        except concurrent.futures.TimeoutError:
            self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)  # the stuck call keeps its thread
            return Verdict("hang", f"not done in {HANG_SECONDS * 2:.0f}s")
        except (TimeoutError, subprocess.TimeoutExpired) as exc:  # the CLI's process not done in HANG_SECONDS
            return Verdict("hang", str(exc))
        except SandboxError as exc:
            return _refusal(exc) if case.mistake else Verdict("misclassified", f"a good call refused: {exc}")
        except ConfigError as exc:
            if not case.mistake:
                return Verdict("misclassified", f"a good entry refused: {exc}")
            codes = {problem.code for problem in exc.problems}
            if not codes <= USER_CODES:
                return Verdict("misclassified", f"codes {sorted(codes)}")
            return Verdict("blow-up", f"a {len(str(exc))}-character error") if len(str(exc)) > MAX_MESSAGE else OK
        except Exception as exc:  # noqa: BLE001 - what the fuzz is counting
            return Verdict("raw", "".join(traceback.format_exception_only(exc)).strip())

    @staticmethod
    def _accepted(case: Case, result: Any) -> Verdict:
        return Verdict("misclassified", f"a mistake was accepted: {result!r:.200}")

    def _cell(self, case: Case) -> Verdict:
        assert self.session is not None
        detail = case.detail
        options: dict[str, Any] = {"timeout": detail.get("timeout")}
        if "keyword" in detail:
            options[detail["keyword"]] = 1
        if "env" in detail:  # a secret is named when the call is made, as an app does: secret() refuses it then
            options["env"] = {k: secret(v.name) if isinstance(v, SecretName) else v for k, v in detail["env"].items()}
        cell = self.session.run_code(detail["code"], detail.get("language", "python"), **options)
        if case.mistake:
            return self._accepted(case, cell)
        expected = detail["expected"]
        got = {"stdout": cell.stdout, "text": cell.text, "error": cell.error.name if cell.error else None}
        if any(got[key] != value for key, value in expected.items()):
            return Verdict("lost", f"the cell gave {got!r:.200}, not {expected!r:.100}")
        return Verdict("blow-up", f"{len(cell.stdout)} characters") if len(cell.stdout) > OUTPUT_LIMIT else OK

    def _background(self, case: Case) -> Verdict:
        assert self.session is not None
        detail = case.detail
        options: dict[str, Any] = {"timeout": detail.get("timeout")}
        if "keyword" in detail:
            options[detail["keyword"]] = 1
        process = self.session.start(detail["program"], detail["args"], **options)
        try:
            result = process.wait(timeout=detail.get("wait", 20))
            if case.mistake:
                return self._accepted(case, result)
            if result.stdout != f"{detail['word']}\n" or not result.ok:  # wait raises TimeoutError, never None
                return Verdict("lost", f"the process gave {result!r:.200}")
            if process.output()[0] != result.stdout:
                return Verdict("lost", f"output() says {process.output()!r:.100}, the result {result.stdout!r}")
            return OK
        finally:
            process.kill()

    def _package(self, case: Case) -> Verdict:
        detail = case.detail
        if "entry" in detail:
            text = f"sandbox:\n  packages:\n    python:\n      - {json.dumps(detail['entry'])}\n"
            [loaded] = load_config_text(text).sandbox.packages.python
            if case.mistake:
                return self._accepted(case, loaded)
            # What loads is what was written, spaces aside: never another package or extra (six[a b] -> six[ab]).
            if _tokens(loaded) != _tokens(detail["entry"]) or str(parse_pin(loaded)) != loaded:
                return Verdict("lost", f"{detail['entry']!r} loaded as {loaded!r}")
            return OK
        chosen = select_packages(detail["requested"], detail["configured"], "python")
        if case.mistake:
            return self._accepted(case, chosen)
        if not set(chosen) <= set(detail["configured"]):
            return Verdict("lost", f"{detail['requested']!r} chose {chosen!r}")
        return OK

    def _agent(self, case: Case) -> Verdict:
        detail = case.detail
        action = self.actions[detail["session"]]
        self.conversations += 1
        conversation = f"c{self.conversations}"
        try:
            if "first" in detail:
                action.run({"code": "1", "files": detail["first"]}, conversation=conversation)
            result = action.run(detail["input"], conversation=conversation)
            if case.mistake:
                return self._accepted(case, result)
            if result.get("stdout") != detail["expected"]:
                return Verdict("lost", f"the action gave {result!r:.200}")
            return OK
        finally:
            action.close(conversation)

    def _mcp(self, case: Case) -> Verdict:
        assert self.mcp is not None
        detail = case.detail
        reply = self.mcp.request("tools/call", {"name": detail["tool"], "arguments": detail["arguments"]})
        if "error" in reply:
            error = reply["error"]
            if error.get("code") == -32603:  # an internal error: something raised inside the server
                return Verdict("raw", f"internal error {error!r:.300}")
            return OK if case.mistake else Verdict("misclassified", f"a good call answered {error!r:.300}")
        result = reply.get("result", {})
        text = " ".join(str(item.get("text", "")) for item in result.get("content", []))
        if case.mistake:
            if not result.get("isError"):
                return self._accepted(case, result)
            if "Traceback" in text or "MAIN-SANDBOX-0006" in text:
                return Verdict("misclassified", f"a mistake answered {text:.300}")
            codes = set(re.findall(r"MAIN-[A-Z]+-\d{4}", text))
            if not codes or not codes <= USER_CODES:
                return Verdict("misclassified", f"a mistake answered without a user's code: {text:.300}")
            return Verdict("blow-up", f"a {len(text)}-character tool error") if len(text) > MAX_MESSAGE else OK
        structured = result.get("structuredContent") or {}
        if result.get("isError") or structured.get("stdout") != detail["expected"]:
            return Verdict("lost", f"the tool gave {result!r:.300}")
        return OK

    def _cli(self, case: Case) -> Verdict:
        detail = case.detail
        env = {k: v for k, v in os.environ.items() if not k.startswith("MAINSDK_")}
        done = subprocess.run(
            [sys.executable, "-m", "mainsdk_cli", "sandbox", "run", *detail["argv"]],
            cwd=self.folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG_SECONDS,
            check=False,
        )
        if "Traceback (most recent call last)" in done.stderr:
            return Verdict("raw", done.stderr[-500:])
        if case.mistake:
            if done.returncode != 2:
                return Verdict("misclassified", f"exit {done.returncode}: {done.stderr[-300:]}")
            # argparse's own refusal of an unknown flag, or the CLI's of a flag's malformed value, naming the flag.
            flag = done.stderr.startswith(("usage:", "mainsdk: --"))
            codes = set(re.findall(r"MAIN-[A-Z]+-\d{4}", done.stderr))
            if not flag and (not codes or not codes <= USER_CODES):
                return Verdict("misclassified", f"refused without a user's code: {done.stderr[-300:]}")
            return Verdict("blow-up", f"{len(done.stderr)} characters") if len(done.stderr) > MAX_MESSAGE else OK
        stdout = done.stdout
        if "--json" in detail["argv"]:
            try:
                stdout = json.loads(done.stdout)["stdout"]
            except (ValueError, KeyError):
                return Verdict("lost", f"--json printed {done.stdout[:200]!r}")
        if done.returncode != 0 or stdout != detail["expected"]:
            return Verdict("lost", f"exit {done.returncode}, stdout {stdout!r:.100}, stderr {done.stderr[-200:]!r}")
        return OK


@attrs.frozen
class Summary:
    """The counts of each kind of failure, how many cases each surface had, and the first reports."""

    count: int
    failures: dict[str, int]
    by_surface: dict[str, int]
    reports: tuple[str, ...]

    def line(self) -> str:
        f = self.failures
        return (
            f"{self.count} cases: {f['raw']} raw exceptions, {f['hang']} hangs, {f['blow-up']} blow-ups, "
            f"{f['misclassified']} misclassified, {f['lost']} lost"
        )


def fuzz(
    seed: int, count: int, *, good_share: float = 0.3, surfaces: tuple[str, ...] = SURFACES, show: int = 20
) -> Summary:
    """Run ``count`` cases from ``seed`` over ``surfaces``."""
    rng = random.Random(seed)
    harness = Harness(surfaces)
    failures = dict.fromkeys(KINDS, 0)
    by_surface = dict.fromkeys(surfaces, 0)
    reports: list[str] = []
    try:
        for index in range(count):
            case = generate(rng, good_share, surfaces)
            by_surface[case.surface] += 1
            verdict = harness.judge(case)
            if verdict.kind != "ok":
                failures[verdict.kind] += 1
                if len(reports) < show:
                    reports.append(f"#{index} {verdict.kind}: {case.describe()}\n    {verdict.why}")
    finally:
        harness.close()
    return Summary(count, failures, by_surface, tuple(reports))


def main(argv: list[str] | None = None) -> int:
    """The command line: ``--seed N --count M [--good-share F] [--surface NAME ...]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=1024)
    parser.add_argument("--good-share", type=float, default=0.3, help="the share of good calls")
    parser.add_argument("--surface", action="append", choices=SURFACES, help="only these surfaces (repeatable)")
    args = parser.parse_args(argv)
    summary = fuzz(args.seed, args.count, good_share=args.good_share, surfaces=tuple(args.surface or SURFACES))
    for report in summary.reports:
        print(report)
    print("cases per surface: " + ", ".join(f"{name} {n}" for name, n in summary.by_surface.items()))
    print(summary.line())
    return 0 if not any(summary.failures.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
