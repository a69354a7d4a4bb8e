"""Fuzz every public call's arguments on the real local driver.

    python benchmarks/fuzz_arguments.py --seed 1 --count 2000

Each argument set calls one of ``sandbox.run``, ``async_sandbox.run``, the
session calls (``create``, ``run``, ``write``, ``read``), ``files.read``,
``action.run``, ``SandboxDeps`` (building a ``Sandbox``) or
``local_sandbox_driver``. Most sets put one or two wrong values (a type, an
encoding, a NUL byte, a path out of the work folder, a huge or non-finite
number, a bool as a number...) into an otherwise good call; the rest are good
calls that really run, whose code reports back what it was given.

A wrong set must end in a ``SandboxError`` with a user's code (never
``MAIN-SANDBOX-0006``), ``retryable=False``, and no box started for it (no
``run`` audit event). A good set must succeed, and its code must have received
exactly the files and environment passed (no silent corruption). Anything else
is ``misclassified``; any other exception is a ``raw exception``; a call not
done in ``HANG_SECONDS`` is a ``hang``. Prints, last,
``N argument sets: R raw exceptions, H hangs, M misclassified`` and exits 1
unless all three are 0.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import hashlib
import json
import pathlib
import random
import sys
import threading
import traceback
from decimal import Decimal
from typing import Any

import attrs
from mainsdk import AsyncSandbox, Sandbox, SandboxDeps, SandboxError, parse_sandbox_config, secret
from mainsdk.audit import AuditEvent
from mainsdk.config import load_config_text

from mainsdk_local import local_sandbox_driver

HANG_SECONDS = 60.0
# A user's mistake: refused with one of these, never an outage.
USER_CODES = frozenset(
    {
        "MAIN-SANDBOX-0001",
        "MAIN-SANDBOX-0005",
        "MAIN-SANDBOX-0007",
        "MAIN-SANDBOX-0008",
        "MAIN-SANDBOX-0009",
        "MAIN-CONFIG-0003",
    }
)
CONFIG = """
sandbox:
  driver: local
  limits: { timeout: 10s, memory: 256MB, output: 1MB, files: 1MB }
  secrets: [FUZZ_KEY]
permissions:
  processes: [python3, bash]
  disk: { temp: { max: 64MB } }
"""
# The code of a good run: it prints what it was given, so corruption is seen.
REPORT = (
    "import hashlib, json, os, sys\n"
    "names = json.loads(sys.argv[1]) if len(sys.argv) > 1 else []\n"
    "files = {}\n"
    "for root, _, found in os.walk('.'):\n"
    "    for f in found:\n"
    "        p = os.path.relpath(os.path.join(root, f), '.')\n"
    "        files[p] = hashlib.sha256(open(p, 'rb').read()).hexdigest()\n"
    "env = {k: v for k, v in os.environ.items() if k.startswith('FZ_')}\n"
    "print(json.dumps({'files': files, 'env': env}, sort_keys=True))\n"
)
NOTHING = object()  # "leave this argument out"


def _bad(rng: random.Random, values: list[Any]) -> Any:
    return rng.choice(values)


BAD_CODE: list[Any] = [None, 5, b"print(1)", "", "   \n", "print(1)\0", "print('\udc80')", ["print(1)"], 1.5]
BAD_LANGUAGE: list[Any] = [None, "cobol", ["python"], 1, "Python", "", "python\0", True]
BAD_FILES: list[Any] = [
    ["a.txt"],
    "a.txt",
    {"a": None},
    {"a": 5},
    {"a": pathlib.Path("/etc/hostname")},
    {"a": 1.5},
    {"a": True},
    {1: "x"},
    {"": "x"},
    {"a\0": "x"},
    {"../a": "x"},
    {"/a": "x"},
    {"a": "x", "a/b": "y"},
    {"a//b": "x"},
    {"./a": "x"},
    {"a/": "x"},
    {"a" * 300: "x"},
    {"a": "\udc80"},
    {"\udc80": "x"},
    {"a": ["x"]},
    {"a": {"b": "c"}},
    {"a\\b": "x"},
    {"big": b"x" * (2 * 1024 * 1024)},  # above limits.files
    5,
]
BAD_ENV: list[Any] = [
    ["A=1"],
    "A=1",
    {"A=B": "1"},
    {"": "1"},
    {"1A": "1"},
    {"A": 1},
    {"A": None},
    {"A": "x\0"},
    {"A": "\udc80"},
    {1: "x"},
    {"A\0": "x"},
    {"A": b"x"},
    {"A-B": "x"},
    {"K": secret("NOT_LISTED")},
    {"A\n": "x"},  # issue 31: `^...$` with re.match let a final newline by
    {"\nA": "x"},
    {"A": "x" * 200_000},
    {"A": ["x"]},
]
BAD_NETWORK: list[Any] = ["pypi.org", [None], [1], ["http://pypi.org/"], ["pypi.org"], ["*"], [""], ["a\0b"], 5]
BAD_LIMITS: list[Any] = [
    "1s",
    ["1s"],
    5,
    {"timeout": True},
    {"timeout": -1},
    {"timeout": 0},
    {"timeout": float("nan")},
    {"timeout": float("inf")},
    {"timeout": 10**400},
    {"timeout": "1e300h"},
    {"timeout": "99999999999h"},
    {"timeout": "abc"},
    {"timeout": None},
    {"timeout": Decimal("NaN")},
    {"timeout": "\udc80"},
    {"memory": "100KB"},
    {"memory": 1},
    {"memory": "1TB"},
    {"memory": False},
    {"output": 0},
    {"files": -5},
    {"cpu": 1},
    {1: 1},
    {None: "1s"},
]
BAD_MAX_COST: list[Any] = ["abc", -1, float("nan"), True, [1], 10**400, "$-1", "\0"]
BAD_FEATURE: list[Any] = [5, b"x", "a\nb", "x" * 1000, "\udc80", "a\0", ["x"]]
BAD_ON_OUTPUT: list[Any] = [1, "print", [print], b"x", lambda data: None, lambda: None]
BAD_IDLE: list[Any] = ["abc", -1, float("nan"), True, "999999h", [1], 10**400, None]
BAD_PROGRAM: list[Any] = [None, "", 5, "a\0", "perl", b"python3", ["python3"], "\udc80"]
BAD_ARGS: list[Any] = [None, "x", [1], ["\0"], [b"x"], ["x" * 200_000], 5, ["\udc80"], [None]]
BAD_TIMEOUT: list[Any] = ["abc", -1, True, "1h", float("nan"), [1], 10**400, "\0"]
BAD_PATH: list[Any] = [None, "", "../a", "/a", "a\0", 5, "a" * 300, b"a", "a//b", "\udc80", ["a"]]
BAD_DATA: list[Any] = [None, 5, pathlib.Path("/etc/hostname"), 1.5, ["x"], {"a": "b"}, "\udc80", b"x" * (2 << 20)]
BAD_READ_PATH: list[Any] = [None, 5, "../x", "/etc/passwd", "a\0", "", b"x", "nope", "../out/nope", ["x"]]
BAD_REF: list[Any] = [None, 5, "file_" + "0" * 32, "../../etc/passwd", b"x", "\udc80", "", ["file_x"], "a\0"]
BAD_ACTION_INPUT: list[Any] = [
    None,
    "print(1)",
    {"code": 5},
    {"code": ""},
    {"code": "print(1)", "language": "cobol"},
    {"code": "print(1)", "files": ["a"]},
    {"code": "print(1)", "files": {"a": 5}},
    {"code": "print(1)", "extra": 1},
    {"code": "print(1)\0"},
    {"code": "print(1)", "files": {"../a": "x"}},
    {"code": "print(1)", "language": ["python"]},
    {1: "x"},
    {"code": "print('\udc80')"},
]
BAD_AGENT: list[Any] = [5, b"x", "a\nb", ["x"]]
BAD_ACTION_OPTIONS: list[dict[str, Any]] = [
    {"languages": "python"},
    {"languages": None},
    {"languages": ["cobol"]},
    {"languages": []},
    {"languages": [1]},
    {"risk": "x"},
    {"risk": None},
    {"name": 5},
    {"name": ""},
    {"intent": None},
    {"feature": 5},
    # issue 31: an egress host outside the action's own network was accepted here, refused at every run
    {"egress": {"api.example.com": {"headers": {"X-Api-Key": secret("FUZZ_KEY")}}}},
    {"network": ["pypi.org"], "egress": {"api.example.com": {"headers": {"X-Api-Key": secret("FUZZ_KEY")}}}},
    {"network": ["api.example.com"], "egress": {"api.example.com": {"headers": {"X-Api-Key\n": secret("FUZZ_KEY")}}}},
]
BAD_DEPS: list[dict[str, Any]] = [
    {"config": {"sandbox": {}}},
    {"config": "main.yaml"},
    {"driver": "local"},
    {"driver": object()},
    {"driver": 5},
    {"network": "pypi.org"},
    {"network": [1]},
    {"secret": "x"},
    {"files": object()},
    {"log": 5},
    {"tenancy": "t"},
    {"environment": 5},
    {"agents": object()},
    {"access": object()},
    {"plugins": "x"},
    {"plugins": 5},
    {"load_entrypoints": 0},
    {"drvier": None},
]
BAD_DRIVER: list[dict[str, Any]] = [
    {"permissions": ["python3"]},
    {"permissions": {"processes": "python3"}},
    {"permissions": {"processes": [1]}},
    {"permissions": {"proceses": ["python3"]}},
    {"permissions": 5},
    {"programs": {"python": None}},
    {"programs": "python3"},
    {"programs": {1: "x"}},
    {"max_processes": True},
    {"max_processes": 0},
    {"max_processes": -1},
    {"max_processes": "5"},
    {"max_processes": 10**30},
    {"force_weak": "no"},
    {"force_weak": 1},
    {"resolve": {"a.test": 1}},
    {"resolve": "x"},
    {"resolve": {"a.test": "not-an-ip"}},
    {"resolve": {"*.a.test": "127.0.0.1"}},
]


def _good_files(rng: random.Random) -> dict[str, str | bytes]:
    choices: list[dict[str, str | bytes]] = [
        {"a.txt": "hi"},
        {"d/e.bin": b"\0\1\xff"},
        {"u.txt": "é ✓ \U0001f600"},
        {"big.bin": bytes(rng.randrange(256) for _ in range(5000))},
        {"x": "", "y/z": b""},
    ]
    return rng.choice(choices)


def _good_env(rng: random.Random) -> dict[str, str]:
    return rng.choice([{"FZ_A": "1"}, {"FZ_A": ""}, {"FZ_B": "é ✓"}, {"FZ_C": "a=b; $(x)"}])


@attrs.frozen
class Case:
    """One argument set: which call, its arguments, and whether it is a mistake."""

    target: str
    options: dict[str, Any]
    mistake: bool
    files: dict[str, str | bytes] = attrs.field(factory=dict)  # a good run's files, to check what the code got
    env: dict[str, str] = attrs.field(factory=dict)

    def describe(self) -> str:
        shown = {k: (v if len(repr(v)) < 80 else f"{repr(v)[:77]}...") for k, v in self.options.items()}
        return f"{self.target} {shown!r}"


def _mutate(rng: random.Random, base: dict[str, Any], pools: dict[str, list[Any]]) -> dict[str, Any]:
    """``base`` with one or two arguments replaced by a wrong value."""
    options = dict(base)
    for name in rng.sample(sorted(pools), k=min(len(pools), rng.choice([1, 1, 1, 2]))):
        options[name] = _bad(rng, pools[name])
    return options


TARGETS = (
    *("run", "run", "async_run", "create", "session_run", "session_write", "session_read"),
    *("files_read", "action", "action_options", "deps", "driver"),
)


def generate(rng: random.Random, real_share: float) -> Case:
    """One argument set; a good one (a real run) with probability ``real_share``."""
    target = rng.choice(TARGETS)
    good = rng.random() < real_share
    if target in ("run", "async_run"):
        files, env = _good_files(rng), _good_env(rng)
        base = {"code": REPORT, "language": "python", "files": files, "env": env, "feature": "fuzz"}
        if good:
            return Case(target, base, False, files, env)
        pools = {
            "code": BAD_CODE,
            "language": BAD_LANGUAGE,
            "files": BAD_FILES,
            "env": BAD_ENV,
            "network": BAD_NETWORK,
            "limits": BAD_LIMITS,
            "max_cost": BAD_MAX_COST,
            "feature": BAD_FEATURE,
            "on_output": BAD_ON_OUTPUT,
        }
        return Case(target, _mutate(rng, base, pools), True)
    if target == "create":
        base = {"files": _good_files(rng), "env": _good_env(rng), "idle": "30s"}
        if good:
            return Case(target, base, False)
        pools = {"files": BAD_FILES, "env": BAD_ENV, "network": BAD_NETWORK, "limits": BAD_LIMITS, "idle": BAD_IDLE}
        pools["feature"] = BAD_FEATURE
        return Case(target, _mutate(rng, base, pools), True)
    if target == "session_run":
        base = {"program": "python3", "args": ["-c", "print(7)"], "timeout": "5s"}
        if good:
            return Case(target, base, False)
        pools = {"program": BAD_PROGRAM, "args": BAD_ARGS, "timeout": BAD_TIMEOUT, "on_output": BAD_ON_OUTPUT}
        return Case(target, _mutate(rng, base, pools), True)
    if target == "session_write":
        data = rng.choice(["text é", b"\0\xff", ""])
        write_base: dict[str, Any] = {"path": rng.choice(["w.txt", "d/w.bin"]), "data": data}
        if good:
            return Case(target, write_base, False)
        return Case(target, _mutate(rng, write_base, {"path": BAD_PATH, "data": BAD_DATA}), True)
    if target == "session_read":
        if good:
            return Case(target, {"path": "seed.txt"}, False)
        return Case(target, {"path": _bad(rng, BAD_READ_PATH)}, True)
    if target == "files_read":
        if good:
            return Case(target, {"ref": "GOOD"}, False)
        return Case(target, {"ref": _bad(rng, BAD_REF)}, True)
    if target == "action":
        action_base: dict[str, Any] = {"input": {"code": "print(1)"}, "agent": None}
        if good:
            return Case(target, action_base, False)
        return Case(target, _mutate(rng, action_base, {"input": BAD_ACTION_INPUT, "agent": BAD_AGENT}), True)
    if target == "action_options":
        if good:
            return Case(target, {"languages": ["python", "bash"], "risk": "read"}, False)
        return Case(target, dict(rng.choice(BAD_ACTION_OPTIONS)), True)
    if target == "deps":
        if good:
            return Case(target, {"config": "SANDBOX_SECTION"}, False)
        return Case(target, dict(rng.choice(BAD_DEPS)), True)
    if good:
        return Case(target, {"permissions": {"processes": ["python3"]}, "max_processes": 64}, False)
    return Case(target, dict(rng.choice(BAD_DRIVER)), True)


@attrs.frozen
class Verdict:
    """How one set ended: ``ok``, ``raw``, ``hang`` or ``misclassified``, and why."""

    kind: str
    why: str = ""


class Harness:
    """The sandboxes the sets call: one sync, one async (its own loop thread), one open session, one FileRef."""

    def __init__(self) -> None:
        self.config = load_config_text(CONFIG)
        self.events: list[AuditEvent] = []
        self.driver = local_sandbox_driver(permissions=self.config.permissions)
        deps = SandboxDeps(config=self.config, driver=self.driver, log=self.events.append, load_entrypoints=False)
        self.sandbox = Sandbox(deps)
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="fuzz-async", daemon=True).start()
        self.async_sandbox = AsyncSandbox(deps)
        self.session = self.sandbox.create(idle="10m")
        self.session.write("seed.txt", "seed")
        self.ref = self.sandbox.run("open('../out/r.txt', 'w').write('ref')").files[0]
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)

    def close(self) -> None:
        self.session.close()
        self.sandbox.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.pool.shutdown(wait=False)

    def call(self, case: Case) -> Any:
        options = case.options
        if case.target == "run":
            code = options.pop("code")
            return self.sandbox.run(code, *_positional(options), **options)
        if case.target == "async_run":
            code = options.pop("code")
            coro = self.async_sandbox.run(code, *_positional(options), **options)
            return asyncio.run_coroutine_threadsafe(coro, self.loop).result()
        if case.target == "create":
            with self.sandbox.create(**options) as session:
                return session.id
        if case.target == "session_run":
            program, args = options.pop("program"), options.pop("args")
            return self.session.run(program, args, **options)
        if case.target == "session_write":
            self.session.write(options["path"], options["data"])
            return self.session.read(options["path"])
        if case.target == "session_read":
            return self.session.read(options["path"])
        if case.target == "files_read":
            ref = self.ref if options["ref"] == "GOOD" else options["ref"]
            return self.sandbox.files.read(ref)
        if case.target == "action":
            return self.sandbox.action().run(options["input"], agent=options["agent"])
        if case.target == "action_options":
            return self.sandbox.action(**options)
        if case.target == "deps":
            if options.get("config") == "SANDBOX_SECTION":
                options = {"config": parse_sandbox_config({"driver": "local"}), "driver": self.driver}
            elif "drvier" in options:
                return Sandbox(options)  # a mapping with a misspelt field
            else:
                options.setdefault("driver", self.driver)
            options.setdefault("load_entrypoints", False)
            built = Sandbox(SandboxDeps(**options))
            return built.run("print(1)").stdout if "SANDBOX_SECTION" in case.options.values() else built
        return local_sandbox_driver(**options)

    def judge(self, case: Case) -> Verdict:
        before = len(self.events)
        future = self.pool.submit(self.call, attrs.evolve(case, options=dict(case.options)))
        try:
            result = future.result(timeout=HANG_SECONDS)
        except concurrent.futures.TimeoutError:
            self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)  # the stuck call keeps its thread
            return Verdict("hang", f"not done in {HANG_SECONDS:.0f}s")
        except SandboxError as exc:
            if not case.mistake:
                return Verdict("misclassified", f"a good call refused: {exc}")
            if exc.code not in USER_CODES or exc.retryable:
                return Verdict("misclassified", f"a mistake answered {exc.code} retryable={exc.retryable}: {exc}")
            started = [e for e in self.events[before:] if e.kind == "run"]
            if started:
                return Verdict("misclassified", f"a box started for a mistake before it was refused: {exc}")
            return Verdict("ok")
        except Exception as exc:  # noqa: BLE001 - what the fuzz is counting
            return Verdict("raw", "".join(traceback.format_exception_only(exc)).strip())
        if case.mistake:
            return Verdict("misclassified", f"a mistake was accepted: {result!r:.200}")
        return self._check_good(case, result)

    def _check_good(self, case: Case, result: Any) -> Verdict:
        if case.target in ("run", "async_run"):
            if result.exit_code != 0 or result.stop is not None:
                return Verdict("misclassified", f"a good run failed: {result.exit_code} {result.stop} {result.stderr}")
            seen = json.loads(result.stdout)
            files = {
                name: hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()
                for name, data in case.files.items()
            }
            if seen != {"files": files, "env": case.env}:
                return Verdict("misclassified", f"the code got {seen}, not {files} and {case.env}")
        if case.target == "session_run" and (result.stdout, result.exit_code) != ("7\n", 0):
            return Verdict("misclassified", f"a good command gave {result!r}")
        if case.target == "session_write":
            data = case.options["data"]
            if result != (data.encode() if isinstance(data, str) else data):
                return Verdict("misclassified", f"wrote {data!r}, read {result!r}")
        if case.target == "session_read" and result != b"seed":
            return Verdict("misclassified", f"read {result!r}, not b'seed'")
        if case.target == "files_read" and result != b"ref":
            return Verdict("misclassified", f"read {result!r}, not b'ref'")
        if case.target == "action" and result.get("stdout") != "1\n":
            return Verdict("misclassified", f"the action gave {result!r}")
        return Verdict("ok")


def _positional(options: dict[str, Any]) -> list[Any]:
    return [options.pop("language")] if "language" in options else []


def fuzz(seed: int, count: int, real_share: float = 0.1, show: int = 10) -> tuple[int, int, int, list[str]]:
    """Run ``count`` sets from ``seed``; return (raw exceptions, hangs, misclassified, the first ``show`` reports)."""
    rng = random.Random(seed)
    harness = Harness()
    counts = {"raw": 0, "hang": 0, "misclassified": 0}
    reports: list[str] = []
    try:
        for index in range(count):
            case = generate(rng, real_share)
            verdict = harness.judge(case)
            if verdict.kind != "ok":
                counts[verdict.kind] += 1
                if len(reports) < show:
                    reports.append(f"#{index} {verdict.kind}: {case.describe()}\n    {verdict.why}")
    finally:
        harness.close()
    return counts["raw"], counts["hang"], counts["misclassified"], reports


def main(argv: list[str] | None = None) -> int:
    """The command line: ``--seed N --count M [--real-share F]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=600)
    parser.add_argument("--real-share", type=float, default=0.1, help="the share of good sets (real runs)")
    args = parser.parse_args(argv)
    raw, hangs, misclassified, reports = fuzz(args.seed, args.count, args.real_share)
    for report in reports:
        print(report)
    print(f"{args.count} argument sets: {raw} raw exceptions, {hangs} hangs, {misclassified} misclassified")
    return 0 if raw == hangs == misclassified == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
