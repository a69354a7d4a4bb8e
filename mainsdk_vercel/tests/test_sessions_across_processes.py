"""A session opened in one process is reachable by ``sandbox.get(id)`` in another, within its tenant only.

Worker A is this process; the other workers are real separate processes (a
web app's other workers), each with its own driver and nothing shared but the
provider: the loopback stand-in (``conformance/simulator.py``), spoken to
over real HTTP.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mainsdk import Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config_text
from mainsdk.errors import NO_SESSION

from mainsdk_vercel import vercel_sandbox_driver

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "conformance"))
Simulator: Any = importlib.import_module("simulator").Simulator
CONFIG = "sandbox: {driver: vercel-sandbox, limits: {timeout: 10s}}\n"

# Another worker: its own process, its own driver; prints what it got.
WORKER = """
import json, sys
from mainsdk import Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config_text
from mainsdk_vercel import vercel_sandbox_driver
url, token, tenant, session_id = sys.argv[1:5]
driver = vercel_sandbox_driver(token=token, project="prj_x", base_url=url)
sandbox = Sandbox(SandboxDeps(config=load_config_text(sys.argv[5]), driver=driver, load_entrypoints=False,
                              tenancy=lambda: tenant))
try:
    session = sandbox.get(session_id)
    result = session.run("bash", ["-c", "cat shared.txt; echo from-b > from_b.txt"])
    print(json.dumps({"stdout": result.stdout, "exit_code": result.exit_code}))
except SandboxError as exc:
    print(json.dumps({"code": exc.code, "message": exc.message}))
finally:
    sandbox.close()
"""


@pytest.fixture
def standin() -> Iterator[Any]:
    sim = Simulator()
    sim.start()
    yield sim
    sim.stop()


def worker(standin: Any, tenant: str, session_id: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, standin.url, standin.token, tenant, session_id, CONFIG],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def sandbox_for(standin: Any, tenant: str) -> Sandbox:
    driver = vercel_sandbox_driver(token=standin.token, project="prj_x", base_url=standin.url)
    deps = SandboxDeps(config=load_config_text(CONFIG), driver=driver, load_entrypoints=False, tenancy=lambda: tenant)
    return Sandbox(deps)


def test_another_worker_reaches_the_session_within_its_tenant_only(standin: Any) -> None:
    a = sandbox_for(standin, "acme")
    try:
        session = a.create()
        session.write("shared.txt", "from-a\n")
        # Worker B, same tenant, another process: reaches the very box (A's file, and B's file back to A).
        assert worker(standin, "acme", session.id) == {"stdout": "from-a\n", "exit_code": 0}
        assert session.read("from_b.txt") == b"from-b\n"
        # Worker C, another tenant: the same 0008 as an id that does not exist, and nothing ran.
        other = worker(standin, "globex", session.id)
        unknown = worker(standin, "acme", "ses_" + "0" * 24)
        assert other["code"] == unknown["code"] == NO_SESSION
        assert other["message"].replace(session.id, "ID") == unknown["message"].replace("ses_" + "0" * 24, "ID")
        sandbox = next(iter(standin.sandboxes.values()))
        assert len(sandbox.commands) == 1  # only B's command: C never ran anything
        # The sandbox carries the tenant and the session in its tags, and only those.
        assert sandbox.body["tags"] == {"mainsdk-session": session.id, "mainsdk-tenant": "acme"}
        session.close()
        # Closed by A: closed for every worker.
        assert worker(standin, "acme", session.id)["code"] == NO_SESSION
    finally:
        a.close()


def test_a_malformed_id_never_reaches_the_provider(standin: Any) -> None:
    a = sandbox_for(standin, "acme")
    try:
        for bad in ("../../etc", "ses_" + "g" * 24, "ses_" + "0" * 25, ""):
            with pytest.raises(SandboxError) as caught:
                a.get(bad)
            assert caught.value.code == NO_SESSION
        assert [r for r in standin.requests if r["path"].startswith("/v2/sandboxes/mainsdk")] == []
    finally:
        a.close()


def test_a_take_over_never_shortens_the_end_its_opener_extended(standin: Any) -> None:
    """README "A take-over": the taking worker extends (``extend-timeout`` adds to the timeout), never sets an end."""
    a = sandbox_for(standin, "acme")
    try:
        session = a.create()
        sandbox = next(iter(standin.sandboxes.values()))
        sandbox.body["timeout"] = 40 * 60_000  # the opener extended it near the plan's cap (45 min on Hobby)
        before = sandbox.body["timeout"]
        session.write("shared.txt", "from-a\n")
        assert worker(standin, "acme", session.id) == {"stdout": "from-a\n", "exit_code": 0}
        assert sandbox.body["timeout"] >= before  # the take-over's first use extended it, or left it
        # Only ever additions, and none past the plan's cap (which Vercel refuses: the take-over would fail).
        asked = [json.loads(r["body"]) for r in standin.requests if r["path"].endswith("/extend-timeout")]
        assert all(body["duration"] > 0 for body in asked)
        assert sandbox.body["timeout"] <= standin.max_duration * 1000
        assert not [r for r in standin.requests if r["path"].endswith(("/timeout", "/set-timeout"))]
        session.close()
    finally:
        a.close()
