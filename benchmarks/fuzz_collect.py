"""Fuzz the local driver's /out collection: random trees built by real code in a real box, collected by the
real launcher server, checked against the model in ``mainsdk_local/tests/collect_model.py``.

``test_launcher.py`` runs seeds 0-11; this runs as many as you like, each reproducible by its seed.

    python benchmarks/fuzz_collect.py [--seeds 500] [--first 12]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent / "mainsdk_local" / "tests"))

import collect_model
from mainsdk_local.launcher_client import ExecSpec, Launcher
from mainsdk_local.programs import resolve_program

MiB = 1 << 20


async def fuzz(first: int, seeds: int) -> int:
    """Run ``seeds`` seeds from ``first``; return how many disagreed with the model."""
    program = resolve_program("python", "python3")
    launcher = Launcher()
    failures = 0
    try:
        for seed in range(first, first + seeds):
            rng = random.Random(seed)
            tree = collect_model.random_tree(rng)
            max_bytes = rng.choice([MiB, 5000, 200, 0])
            async with await launcher.open_box(disk_bytes=64 * MiB) as box:
                await box.write_file("tree.json", collect_model.tree_json(tree))
                spec = ExecSpec(
                    argv=(program.executable, "-I", "-c", collect_model.BUILD),
                    env={},
                    timeout=30,
                    memory_bytes=256 * MiB,
                    readonly_paths=program.readonly_paths,
                    hidden_paths=program.hidden_paths,
                )
                errors: list[bytes] = []
                result = await box.exec(spec, on_stdout=errors.append, on_stderr=errors.append)
                if result.exit_code != 0:
                    print(f"seed {seed}: building the tree failed: {b''.join(errors)[-500:]!r}")
                    failures += 1
                    continue
                want = collect_model.expected(tree, max_bytes)
                found = await box.collect_out(max_bytes=max_bytes)
                wrong = collect_model.disagreement(found, want)
                if wrong is not None:
                    print(f"seed {seed}: {wrong}")
                    failures += 1
    finally:
        launcher.close()
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=500)
    parser.add_argument("--first", type=int, default=12, help="the first seed (0-11 already run in the tests)")
    args = parser.parse_args()
    started = time.monotonic()
    failures = asyncio.run(fuzz(args.first, args.seeds))
    print(
        f"{args.seeds} seeds from {args.first}: {failures} disagreed with the model ({time.monotonic() - started:.0f}s)"
    )
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
