"""One Python run on a launcher's warm pool, as the driver makes it: shared by test_warm_pool.py and
test_warm_pool_leaks_nothing.py (a helper module: test modules import from here, never from each other).
"""

from __future__ import annotations

from collections.abc import Mapping

from mainsdk_local.launcher_client import ExecSpec, Launcher
from mainsdk_local.programs import Program
from pool_runs import MiB, Ran, run_in_box, wait_ready

FLAGS = ("-E", "-s", "-c")  # what core runs python code with


async def run(
    launcher: Launcher,
    python: Program,
    code: str,
    *,
    warm: bool = True,
    args: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
    files: Mapping[str, bytes] | None = None,
    memory: int = 256 * MiB,
    timeout: float = 20.0,
    max_processes: int = 64,
    disk: int = 16 * MiB,
    session: bool = False,
    flags: tuple[str, ...] = FLAGS,
    overlays: tuple[tuple[str, str], ...] = (),
) -> Ran:
    """One run in a fresh box, as the driver does it: open, write files, exec python -E -s -c, close."""
    spec = ExecSpec(
        argv=(python.executable, *flags, code, *args),
        env=dict(env or {}),
        timeout=timeout,
        memory_bytes=memory,
        max_processes=max_processes,
        readonly_paths=python.readonly_paths,
        hidden_paths=python.hidden_paths,
        overlays=overlays,
        warm="python" if warm else None,
    )
    return await run_in_box(launcher, spec, files=files, disk=disk, session=session)


async def until_ready(
    launcher: Launcher,
    python: Program,
    env: Mapping[str, str] | None = None,
    overlays: tuple[tuple[str, str], ...] = (),
) -> None:
    """Ask for a warm interpreter of this shape once (a run), then wait until one is ready."""
    await wait_ready(launcher, "python", lambda: run(launcher, python, "pass", env=env, overlays=overlays), 60)


async def warm_run(launcher: Launcher, python: Program, code: str, **kwargs: object) -> Ran:
    """``code`` on a warm interpreter (asserted): waits for one to be ready first."""
    await until_ready(launcher, python, kwargs.get("env"), kwargs.get("overlays", ()))  # type: ignore[arg-type]
    ran = await run(launcher, python, code, **kwargs)  # type: ignore[arg-type]
    assert ran.result.warm_kind == "python", f"expected a run on a warm interpreter: {ran.result} {ran.seen()}"
    return ran
