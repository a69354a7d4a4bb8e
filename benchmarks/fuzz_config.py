"""Fuzz the ``main.yaml`` loader and ``mainsdk check`` with generated files.

    python benchmarks/fuzz_config.py --seed 1 --count 2000

Each generated file (structural mutations, type confusions, aliases and merge
keys, alias bombs, deep nesting, huge numbers, unicode, tags, duplicate keys,
corrupted text) is loaded as ``mainsdk sandbox run`` loads it
(``load_config``, then the sandbox is built from it) and checked as
``mainsdk check --config FILE`` checks it. Every file must end in a loaded
config or a ``ConfigError`` whose codes are MAIN-CONFIG-0003 or
MAIN-SANDBOX-0001, within 1 s and 100 MB; ``mainsdk check`` must exit 2 for a
file the loader refuses and 0 or 1 for one it loads. Every 20th file puts one mistake in ``sandbox.egress`` (a
header name or a secret reference that is not one), which must be refused naming its host and header. Prints, last,
``N configs: R raw exceptions, H hangs, M misclassified`` and exits 1 unless all three are 0.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import random
import signal
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import attrs

TIME_BUDGET = 1.0  # seconds for one file, loader and check together
MEMORY_BUDGET = 100 * 1024 * 1024  # bytes, peak traced allocation for one file
HANG_ALARM = 20  # seconds after which a file is interrupted and counted as a hang
CONFIG_CODES = frozenset({"MAIN-CONFIG-0003", "MAIN-SANDBOX-0001"})


# --- Generating main.yaml text -------------------------------------------------------------------------------------


@attrs.frozen
class Raw:
    """YAML text put into the file as it is: a tag, an alias, a number too long to be anything."""

    text: str


def _scalar(value: object) -> str:
    if isinstance(value, Raw):
        return value.text
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return ".nan" if isinstance(value, float) and math.isnan(value) else repr(value)
    text = str(value)
    # JSON's quoting is valid YAML double-quoted style, and covers control characters and unicode.
    return json.dumps(text, ensure_ascii=False) if not text.isidentifier() else text


def emit(value: object, indent: int = 0, rng: random.Random | None = None) -> str:
    """Block YAML for a structure of dicts, lists and scalars; with ``rng`` some collections are in flow style."""
    pad = "  " * indent
    if isinstance(value, dict) and value:
        if rng is not None and rng.random() < 0.15:
            return "{" + ", ".join(f"{_key(k)}: {emit(v, 0)}" for k, v in value.items()) + "}"
        lines = []
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{_key(key)}:\n{emit(item, indent + 1, rng)}")
            else:
                lines.append(f"{pad}{_key(key)}: {emit(item, 0)}")
        return "\n".join(lines) if indent else "\n".join(lines) + "\n"
    if isinstance(value, list) and value:
        if rng is None or rng.random() < 0.5:
            return "[" + ", ".join(emit(item, 0) for item in value) + "]"
        return "\n".join(f"{pad}- {emit(item, 0)}" for item in value)
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _scalar(value)


def _key(key: object) -> str:
    return _scalar(key) if not isinstance(key, (dict, list)) else "? " + emit(key, 0) + "\n"


def _base(rng: random.Random) -> dict[str, object]:
    config: dict[str, object] = {
        "sandbox": {
            "driver": rng.choice(["local", "e2b", "local", "vercel-sandbox"]),
            "limits": {"timeout": "30s", "memory": "512MB", "output": "1MB", "files": "50MB", "max-cost": "$0.10"},
            "network": ["pypi.org"],
            "secrets": ["OPENWEATHER_KEY"],
            "local": {"python": "python3", "node": "node", "bash": "bash"},
            "e2b": {"key": "secret:E2B_API_KEY", "template": "base"},
            "price": "$0.0001",
        },
        "network": {"allow": ["pypi.org", "*.example.com"]},
        "permissions": {"processes": ["python3", "node", "bash"], "disk": {"temp": {"max": "1GB"}}},
        "audit": {"file": "audit.jsonl"},
    }
    sandbox = config["sandbox"]
    assert isinstance(sandbox, dict)
    for key in list(sandbox):
        if rng.random() < 0.3:
            del sandbox[key]
    for key in list(config):
        if key != "sandbox" and rng.random() < 0.3:
            del config[key]
    return config


HUGE = [
    Raw("1e300"),
    Raw("-1e300"),
    Raw(".inf"),
    Raw("-.inf"),
    Raw(".nan"),
    "99999999999h",
    "597h",
    "1e300",
    "100000000TB",
    10**30,
    2**63,
    -(2**63),
    Raw("0x" + "f" * 40),
    Raw("0o777777777777777777777"),
    "0.0000000000001ms",
    "1" + "0" * 400 + "s",
]


def _confusion(rng: random.Random) -> object:
    """A value of the wrong kind, or a right kind at an edge."""
    pool: list[Callable[[], object]] = [
        lambda: None,
        lambda: rng.choice([True, False]),
        lambda: rng.randint(-5, 10**6),
        lambda: rng.uniform(-1e6, 1e6),
        lambda: "",
        lambda: "   ",
        lambda: rng.choice(["30s", "1GB", "$1", "local", "pypi.org", "python3", "0", "-1s", "1.5.5s", "1e3s"]),
        lambda: [rng.choice(["a", 1, None])],
        lambda: {"x": 1},
        lambda: {},
        lambda: [],
        lambda: rng.choice(HUGE),
        lambda: rng.choice(["ünïcødé", "\u202ertl", "zero\u200bwidth", "emoji 😀", "nul\x00byte", "\t", "a\nb"]),
        lambda: Raw(rng.choice(["!!binary aGVsbG8=", "!!timestamp 2001-12-14", "!custom x", "!!str 1", "!!int 5"])),
        lambda: Raw(rng.choice(["!!set {a, b}", "!!omap [a: 1]", "!!pairs [a: 1]", "!!python/object:os.system {}"])),
        lambda: Raw('!!python/object/apply:os.system ["true"]'),
        lambda: Raw("~"),
    ]
    return rng.choice(pool)()


def _paths(value: object, prefix: tuple[object, ...] = ()) -> Iterator[tuple[object, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


def _set(root: object, path: tuple[object, ...], value: object) -> None:
    parent = root
    for part in path[:-1]:
        parent = parent[part]  # type: ignore[index]
    key = path[-1]
    if isinstance(parent, list):
        if isinstance(key, int) and not isinstance(key, bool) and 0 <= key < len(parent):
            parent[key] = value
        else:
            parent.append(value)
    elif isinstance(parent, dict):
        parent[key] = value


def _mutated(rng: random.Random) -> str:
    config = _base(rng)
    for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):  # a fifth stay valid, to exercise what comes after
        paths = [p for p in _paths(config) if p]
        path = rng.choice(paths)
        choice = rng.random()
        if choice < 0.55:
            _set(config, path, _confusion(rng))
        elif choice < 0.7 and isinstance(path[-1], str):  # a typo'd or foreign key beside it
            _set(config, (*path[:-1], path[-1][:-1] + rng.choice("xyz_")), _confusion(rng))
        elif choice < 0.8:  # a non-string key
            _set(config, (*path[:-1], rng.choice([1, 2.5, True, None, Raw("[a, b]")])), _confusion(rng))
        elif choice < 0.9:  # a section where a scalar was, or a scalar where a section was
            _set(config, path, {"nested": {"deeper": [_confusion(rng)]}})
        else:
            _set(config, path, [_confusion(rng), _confusion(rng)])
    if rng.random() < 0.1:
        return emit(rng.choice([[config], "just text", 42, None, []]), 0, rng) + "\n"
    return emit(config, 0, rng)


def _with_anchors(rng: random.Random) -> str:
    """Merge keys and aliases, used properly and not."""
    defaults = rng.choice(
        [
            "  timeout: 10s\n  memory: 256MB\n",
            "  timeout: 99999999999h\n",
            "  tiemout: 10s\n",
            "  memory: [1, 2]\n",
        ]
    )
    merge = rng.choice(["<<: *defaults", "<<: [*defaults, *more]", "<<: *more", "<<: *nothing", "<<: 5", "<<: *hosts"])
    return (
        f"defaults: &defaults\n{defaults}"
        "more: &more\n  output: 2MB\n"
        "hosts: &hosts [pypi.org]\n"
        "sandbox:\n"
        f"  driver: {rng.choice(['local', 'e2b'])}\n"
        "  limits:\n"
        f"    {merge}\n"
        f"    {rng.choice(['files: 10MB', 'timeout: 5s', 'files: *hosts', 'output: 1MB'])}\n"
        f"  network: {rng.choice(['*hosts', '[*hosts]', '[pypi.org]'])}\n"
        f"network:\n  allow: {rng.choice(['*hosts', '[]', '*defaults'])}\n"
    )


def _bomb(rng: random.Random) -> str:
    width, depth = rng.randint(2, 12), rng.randint(3, 12)
    # Each level's aliases, bare or wrapped in collections (which must count as much).
    wrap = rng.choice(["[{}]", "[{}]", "[[{}]]", "{{k: [{}]}}", "[a, {{b: [[{}]]}}]"])
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, depth):
        lines.append(f"l{level}: &l{level} " + wrap.format(", ".join([f"*l{level - 1}"] * width)))
    if rng.random() < 0.5:  # the bomb under a key the loader reads, or as a merge
        lines.append(rng.choice([f"sandbox:\n  network: *l{depth - 1}", f"sandbox:\n  <<: *l{depth - 1}"]))
    if rng.random() < 0.3:  # mappings instead of lists
        lines = [f"m0: &m0 {{a: {'x' * 10}, b: y}}"] + [
            f"m{i}: &m{i} {{{', '.join(f'k{j}: *m{i - 1}' for j in range(width))}}}" for i in range(1, depth)
        ]
    return "\n".join(lines) + "\n"


def _deep(rng: random.Random) -> str:
    depth = rng.choice([20, 31, 32, 33, 40, 100, 1000, rng.randint(1, 100_000)])
    if rng.random() < 0.5:
        return "sandbox:\n  network: " + "[" * depth + "]" * depth + "\n"
    if rng.random() < 0.5:
        return "sandbox: " + "{a: " * depth + "x" + "}" * depth + "\n"
    lines = ["sandbox:"] + [f"{'  ' * (i + 1)}k{i}:" for i in range(min(depth, 2000))]
    return "\n".join(lines) + " x\n"


def _huge_number(rng: random.Random) -> str:
    digits = rng.choice([18, 19, 20, 90, 101, 400, 4300, 4301, 10_000, 100_000])
    number = "9" * digits
    key = rng.choice(["timeout", "memory", "output", "files", "max-cost"])
    suffix = rng.choice(["", "", "h", "s", "GB", ".5", "e5"])
    quoted = rng.random() < 0.3
    value = f'"{number}{suffix}"' if quoted else f"{number}{suffix}"
    where = rng.choice([f"sandbox:\n  limits:\n    {key}: {value}\n", f"sandbox:\n  price: {value}\n"])
    return where if rng.random() < 0.8 else f"permissions:\n  disk:\n    temp:\n      max: {value}\n"


def _corrupted(rng: random.Random) -> str:
    text = _mutated(rng)
    for _ in range(rng.randint(1, 3)):
        if not text:
            break
        at = rng.randrange(len(text))
        action = rng.random()
        if action < 0.3:
            text = text[:at]
        elif action < 0.6:
            text = (
                text[:at]
                + rng.choice([":", "-", "[", "{", "&x", "*x", "!", "%", "@", "`", "\t", "\x00", "\ufeff"])
                + text[at:]
            )
        elif action < 0.8:
            text = text[:at] + text[at + rng.randint(1, 20) :]
        else:
            lines = text.splitlines(keepends=True)
            index = rng.randrange(len(lines))
            lines.insert(index, lines[index])  # a duplicate key, often
            text = "".join(lines)
    return text


def _special(rng: random.Random) -> str:
    return rng.choice(
        [
            "",
            "\n",
            "# only a comment\n",
            "---\n",
            "---\na: 1\n---\nb: 2\n",
            "sandbox:\n",
            "sandbox: ~\n",
            "sandbox: {}\nsandbox: {}\n",
            "sandbox:\n  driver: local\n  driver: e2b\n",
            "? [a, b]\n: c\n",
            "? {a: 1}\n: c\n",
            "sandbox: !!python/object/apply:os.system [echo pwned]\n",
            "!!python/object:builtins.dict {}\n",
            "sandbox:\n  limits: !!omap [timeout: 5s]\n",
            "sandbox: &a\n  limits: *a\n",
            "a: &a [*a]\n",
            "%YAML 1.1\n---\nsandbox: {driver: local}\n",
            "%TAG ! tag:example.com,2000:\n---\nsandbox: !foo {}\n",
            'sandbox:\n  limits:\n    timeout: "\\ud800"\n',
            "\ufeffsandbox:\n  driver: local\n",
            'sandbox:\n  secrets: ["\\x00"]\n',
            "1: 2\n",
            "true: false\n",
            "null: sandbox\n",
            "sandbox:\n\tdriver: local\n",
            "x" * 300_000 + ": 1\n",
            "other:\n" + "".join(f"  k{i}: v\n" for i in range(6000)),
            "other: [" + ", ".join("1" for _ in range(6000)) + "]\n",
            "a: " + "'" + "b" * 200_000 + "'\n",
        ]
    )


# sandbox.egress with one mistake in the header's name or the secret it names (issue 31: a final newline passed the
# header check, and a value naming no secret was refused without naming its host or header). Each must be refused
# with a message naming both EGRESS_HOST and EGRESS_HEADER (``Outcome.misclassified``).
EGRESS_HOST = "api.fuzz.example"
EGRESS_HEADER = "X-Fuzz-Key"
EGRESS_MISTAKES = [
    (f'"{EGRESS_HEADER}\\n"', '"secret:K"'),
    (f'"{EGRESS_HEADER}\\r"', '"secret:K"'),
    (EGRESS_HEADER, '"secret:"'),
    (EGRESS_HEADER, '"secret:FZ3 KEY"'),
    (EGRESS_HEADER, '"secret:1ABC"'),
    (EGRESS_HEADER, '"secret:K\\n"'),
    (EGRESS_HEADER, '"secret:\\nK"'),
    (EGRESS_HEADER, "{secret: 1A}"),
    (EGRESS_HEADER, '{secret: "K\\n"}'),
    (EGRESS_HEADER, '{secret: K, prefix: "Bearer\\n"}'),
    (EGRESS_HEADER, '"the-value-itself"'),
]


def _egress(rng: random.Random) -> str:
    header, value = rng.choice(EGRESS_MISTAKES)
    return (
        f"sandbox:\n  driver: local\n  secrets: [K]\n  network: [{EGRESS_HOST}]\n"
        f"  egress:\n    {EGRESS_HOST}:\n      headers:\n        {header}: {value}\n"
    )


GENERATORS: list[tuple[str, Callable[[random.Random], str], float]] = [
    ("mutated", _mutated, 0.45),
    ("anchors", _with_anchors, 0.12),
    ("bomb", _bomb, 0.08),
    ("deep", _deep, 0.07),
    ("huge-number", _huge_number, 0.08),
    ("corrupted", _corrupted, 0.12),
    ("special", _special, 0.08),
]
EGRESS_EVERY = 20  # every 20th file is an egress mistake, from an rng of its own (the others' sequence is kept)


def generate(seed: int, count: int) -> Iterator[tuple[int, str, str]]:
    """``count`` (index, kind, text) main.yaml files from ``seed``, the same for the same arguments."""
    rng = random.Random(seed)
    kinds = [g for g in GENERATORS]
    weights = [w for *_, w in GENERATORS]
    egress_rng = random.Random(seed)
    for index in range(count):
        name, make, _ = rng.choices(kinds, weights)[0]
        text = make(rng)
        if index % EGRESS_EVERY == EGRESS_EVERY - 1:
            yield index, "egress", _egress(egress_rng)
        else:
            yield index, name, text


# --- Loading each file as the command line does --------------------------------------------------------------------


@attrs.frozen
class Outcome:
    """What one file did: loaded or refused (and how), whether check agreed, time and memory used."""

    index: int
    kind: str
    verdict: str  # "loaded", "refused", "raw", "hang"
    detail: str
    check_exit: int | None
    seconds: float
    peak_bytes: int
    names_key: bool = True  # an egress mistake's refusal names its host and header

    @property
    def misclassified(self) -> bool:
        """Refused with a code that is not a config code, or ``mainsdk check`` disagreeing with the loader.

        An egress mistake (kind ``egress``) must be refused, naming its host and header.
        """
        if self.kind == "egress" and (self.verdict == "loaded" or not self.names_key):
            return True
        if self.verdict == "refused":
            return not self.detail or self.check_exit != 2 or not set(self.detail.split(",")) <= CONFIG_CODES
        if self.verdict == "loaded":
            return self.check_exit not in (0, 1)
        return False

    @property
    def over_budget(self) -> bool:
        """More than the time or memory budget."""
        return self.seconds > TIME_BUDGET or self.peak_bytes > MEMORY_BUDGET


class _Hang(BaseException):
    """Raised by the alarm; a BaseException so that no ``except Exception`` in the code under test swallows it."""


def _alarm(_signum: int, _frame: FrameType | None) -> None:
    raise _Hang


def _load(path: Path, build: bool) -> tuple[str, str]:
    """``mainsdk sandbox run``'s first steps: load the config, then build the sandbox from it."""
    from mainsdk.config import load_config
    from mainsdk.errors import ConfigError, SandboxError

    try:
        config = load_config(path)
    except ConfigError as exc:
        unprintable = [p for p in exc.problems if not (p.key + p.message).isprintable()]
        if unprintable:  # a value quoted back raw could repaint a terminal or forge a line
            return "raw", f"load_config: unprintable text in a message: {unprintable[0]!r}"[:300]
        return "refused", ",".join(sorted({p.code for p in exc.problems}))
    except Exception as exc:  # noqa: BLE001 - a raw exception is what this counts
        return "raw", f"load_config: {type(exc).__name__}: {str(exc)[:200]}"
    if build:  # a coded refusal here is the driver's (a secret not set), not the loader's
        from mainsdk.engine import AsyncSandbox, SandboxDeps

        try:
            AsyncSandbox(SandboxDeps(config=config)).hooks.shutdown()
        except SandboxError:
            pass
        except Exception as exc:  # noqa: BLE001
            return "raw", f"building the sandbox: {type(exc).__name__}: {str(exc)[:200]}"
    return "loaded", ""


def _check(path: Path, empty: Path) -> int | str:
    """``mainsdk check --config FILE`` over an empty folder: its exit status, or the raw exception."""
    from mainsdk_check.command import main as check_main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = check_main(["--config", str(path), str(empty)])
    except Exception as exc:  # noqa: BLE001
        return f"mainsdk check: {type(exc).__name__}: {str(exc)[:200]}"
    for text in (out.getvalue(), err.getvalue()):
        if not all(line.isprintable() for line in text.splitlines()):  # a terminal would act on it, or cannot show it
            return f"mainsdk check: unprintable output {text[:200]!r}"
    return status


def _timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def run_file(index: int, kind: str, text: str, folder: Path, *, build: bool = True, timed: bool = True) -> Outcome:
    """Load and check one file within the budgets; a file still running after ``HANG_ALARM`` seconds is a hang.

    The time is the longer of the two commands' (each is a process of its own in use); memory is the peak
    traced over both. With ``timed=False`` (the tests) the untraced timing run is skipped and the time is 0.
    """
    path = folder / "main.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    empty = folder / "code"
    empty.mkdir(exist_ok=True)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_ALARM)
    tracemalloc.start()
    status: int | None = None
    try:
        verdict, detail = _load(path, build)
        checked = _check(path, empty)
        if isinstance(checked, str):
            verdict, detail = "raw", checked
        else:
            status = checked
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        # Timed without tracemalloc, which slows Python down several times.
        seconds = max(_timed(lambda: _load(path, build)), _timed(lambda: _check(path, empty))) if timed else 0.0
    except _Hang:
        verdict, detail, seconds, peak = "hang", f"still running after {HANG_ALARM}s", float(HANG_ALARM), 0
    except MemoryError:
        verdict, detail, seconds, peak = "raw", "MemoryError", 0.0, 0
    finally:
        tracemalloc.stop()
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return Outcome(
        index, kind, verdict, detail, status, seconds, peak, _names_egress_key(path) if kind == "egress" else True
    )


def _names_egress_key(path: Path) -> bool:
    """Whether the loader's refusal of an egress mistake names its host and its header."""
    from mainsdk.config import load_config
    from mainsdk.errors import ConfigError

    try:
        load_config(path)
    except ConfigError as exc:
        return EGRESS_HOST in str(exc) and EGRESS_HEADER in str(exc)
    return False


@attrs.frozen
class Summary:
    """The counts the fuzz reports."""

    outcomes: tuple[Outcome, ...]

    @property
    def raw(self) -> list[Outcome]:
        """Files that raised something other than a ConfigError."""
        return [o for o in self.outcomes if o.verdict == "raw"]

    @property
    def hangs(self) -> list[Outcome]:
        """Files over the time or memory budget, or interrupted."""
        return [o for o in self.outcomes if o.verdict == "hang" or o.over_budget]

    @property
    def misclassified(self) -> list[Outcome]:
        """Files refused with the wrong code, or where ``mainsdk check`` disagreed with the loader."""
        return [o for o in self.outcomes if o.misclassified]

    def line(self) -> str:
        """``N configs: R raw exceptions, H hangs, M misclassified``."""
        return (
            f"{len(self.outcomes)} configs: {len(self.raw)} raw exceptions, {len(self.hangs)} hangs, "
            f"{len(self.misclassified)} misclassified"
        )


def fuzz(seed: int, count: int, *, build: bool = True, timed: bool = True) -> Summary:
    """Generate, load and check ``count`` files from ``seed``; ``timed=False`` leaves time to the alarm alone."""
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="mainsdk-fuzz-config-") as folder:
        for index, kind, text in generate(seed, count):
            outcomes.append(run_file(index, kind, text, Path(folder), build=build, timed=timed))
    return Summary(tuple(outcomes))


def main(argv: list[str] | None = None) -> int:
    """Run the fuzz and print one line per failure, then the totals; exit 1 on any failure."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=560)
    parser.add_argument("--no-build", action="store_true", help="only load and check; do not build the sandbox")
    parser.add_argument("--show", type=int, help="print the file with this index and exit")
    options = parser.parse_args(argv)
    if options.show is not None:
        for index, _kind, text in generate(options.seed, options.show + 1):
            if index == options.show:
                sys.stdout.write(text)
        return 0
    summary = fuzz(options.seed, options.count, build=not options.no_build)
    for outcome in (*summary.raw, *summary.hangs, *summary.misclassified):
        print(
            f"#{outcome.index} ({outcome.kind}): {outcome.verdict} {outcome.detail} check={outcome.check_exit} "
            f"{outcome.seconds:.2f}s {outcome.peak_bytes / 1e6:.1f}MB"
        )
    kinds: dict[str, int] = {}
    for outcome in summary.outcomes:
        kinds[outcome.verdict] = kinds.get(outcome.verdict, 0) + 1
    slowest = max(summary.outcomes, key=lambda o: o.seconds)
    biggest = max(summary.outcomes, key=lambda o: o.peak_bytes)
    print(f"loaded {kinds.get('loaded', 0)}, refused {kinds.get('refused', 0)}")
    print(
        f"slowest: #{slowest.index} ({slowest.kind}) {slowest.seconds:.2f}s; "
        f"most memory: #{biggest.index} ({biggest.kind}) {biggest.peak_bytes / 1e6:.1f}MB"
    )
    print(summary.line())
    return 1 if summary.raw or summary.hangs or summary.misclassified else 0


if __name__ == "__main__":
    sys.exit(main())
