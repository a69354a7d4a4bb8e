"""Our requests against those of Vercel's current official Python client (``vercel-sandbox`` 0.10.0), not circular.

Vercel's own client is driven through its public API (``SandboxClient``:
create a sandbox, write a file, run a process with its output, start a
process, read its logs, signal it, wait for it, read a file, extend the
timeout, stop; snapshot, destroy the stopped sandbox, create from the
snapshot, delete it) against the loopback stand-in (``conformance/simulator.py``),
which logs every request. Nothing of ours goes into those requests: they
are what Vercel's code builds. Our driver's requests are every request of
every cassette (strict replay proves the driver makes exactly those).

For each operation our driver uses, kill included, the two must agree in
method, path, query and body shape (the JSON keys and the types of their
values, recursively); the network policy must be the very value Vercel's
client serializes for the same hosts. Test only:
``pip install 'mainsdk-vercel[sdk-check]'``.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import importlib
import io
import json
import posixpath
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mainsdk.driver import EgressHeader, EgressRule
from mainsdk_conformance.cassette import decode_payload, load
from mainsdk_vercel.driver import ROOT, vercel_injection_policy, vercel_network_policy

# Vercel's client is a test-only extra (pip install 'mainsdk-vercel[sdk-check]', which tox installs): without
# it this module fails to import rather than skipping, so the check cannot silently not run.
from vercel.sandbox import NetworkPolicy, SandboxClient, SandboxResources, SnapshotSource
from vercel.sandbox._internal.models import NetworkPolicyRule, NetworkPolicyTransform, _serialize_network_policy
from vercel.sandbox._internal.options import SandboxCredentials, SandboxServiceOptions

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "conformance"))
# The stand-in, by path (the tests are no package).
Simulator: Any = importlib.import_module("simulator").Simulator

CASSETTES = sorted(HERE.rglob("cassettes/**/*.json"))
TEAM = "team_conformance"
PROJECT = "prj_conformance"
TOKEN = "sdk-check-token-not-a-secret"

# Operations by method and path; ids become placeholders.
OPERATIONS = (
    ("create", "POST", re.compile(r"^/v3/sandboxes$")),
    ("get", "GET", re.compile(r"^/v2/sandboxes/(?!sessions$|snapshots$)[^/]+$")),
    ("destroy", "DELETE", re.compile(r"^/v2/sandboxes/(?!sessions$|snapshots$)[^/]+$")),
    ("snapshot", "POST", re.compile(r"^/v2/sandboxes/sessions/[^/]+/snapshot$")),
    ("delete-snapshot", "DELETE", re.compile(r"^/v2/sandboxes/snapshots/[^/]+$")),
    ("write", "POST", re.compile(r"^/v2/sandboxes/sessions/[^/]+/fs/write$")),
    ("read", "POST", re.compile(r"^/v2/sandboxes/sessions/[^/]+/fs/read$")),
    ("run", "POST", re.compile(r"^/v2/sandboxes/sessions/[^/]+/cmd$")),
    ("wait", "GET", re.compile(r"^/v2/sandboxes/sessions/[^/]+/cmd/[^/]+$")),
    ("logs", "GET", re.compile(r"^/v2/sandboxes/sessions/[^/]+/cmd/[^/]+/logs$")),
    ("kill", "POST", re.compile(r"^/v2/sandboxes/sessions/[^/]+/cmd/[^/]+/kill$")),
    ("extend", "POST", re.compile(r"^/v2/sandboxes/sessions/[^/]+/extend-timeout$")),
    ("stop", "POST", re.compile(r"^/v2/sandboxes/sessions/[^/]+/stop$")),
    ("stdin", "POST", re.compile(r"^/v2/sandboxes/sessions/[^/]+/cmd/[^/]+/stdin$")),
)
# Every operation the driver uses; the check must cover each (the issue: "kill included"). A session's
# extend-timeout comes only after a whole lease (minutes), so no cassette holds one: checked on its own below.
OURS = {"create", "get", "write", "read", "run", "wait", "logs", "kill", "stop", "stdin"}
# The checkpoints' (issue 33, _checkpoints.py): a snapshot, the stopped source's delete, a snapshot's delete.
OURS |= {"snapshot", "destroy", "delete-snapshot"}


def operation(method: str, path: str) -> str | None:
    return next((name for name, m, pattern in OPERATIONS if m == method and pattern.match(path)), None)


# Mappings keyed by data (variable names), not by field names: their shape is their values' types.
DATA_MAPPINGS = frozenset({"env", "tags"})


def shape(value: Any) -> Any:
    """What a JSON value looks like: mappings by key, everything else by type."""
    if isinstance(value, dict):
        return {
            key: ("mapping", sorted({type(v).__name__ for v in item.values()}) or ["str"])
            if key in DATA_MAPPINGS and isinstance(item, dict)
            else shape(item)
            for key, item in sorted(value.items())
        }
    return type(value).__name__


def tar_paths(data: bytes, cwd: str) -> list[str]:
    """Where an fs/write archive's files land: each member's path under ``x-cwd``."""
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as archive:
        return sorted(posixpath.normpath(posixpath.join(cwd, m.name)) for m in archive.getmembers() if m.isfile())


@pytest.fixture(scope="module")
def theirs() -> Iterator[dict[str, list[dict[str, Any]]]]:
    """Vercel's client through every operation we use, against the stand-in; its requests by operation."""
    sim = Simulator(token=TOKEN)
    sim.start()

    async def credentials() -> SandboxCredentials:
        return SandboxCredentials(token=TOKEN, team_id=TEAM, project_id=PROJECT)

    async def main() -> None:
        client = SandboxClient.create(options=SandboxServiceOptions(base_url=sim.url, credentials_factory=credentials))
        try:
            sandbox = await client.create_sandbox(
                execution_time_limit=70,
                resources=SandboxResources(vcpus=2),
                persistent=False,
                network_policy=NetworkPolicy.deny_all(),
            )
            await sandbox.fs.write_bytes(f"{ROOT}/work/a.txt", b"hello")
            done = await sandbox.run_process("bash", ["-c", "echo ran"], env={"A": "1"}, capture_output=True)
            assert (done.returncode, done.stdout) == (0, "ran\n")
            started = await sandbox.create_process("bash", ["-c", "echo started; sleep 30"], env={"A": "1"})
            assert started.stdout is not None
            first = await started.stdout.readline()
            assert first == "started\n"
            await started.send_signal(15)
            await started.wait()
            # A live stdin: started with it attached, written while it runs, then closed.
            cat = await sandbox.create_process("bash", ["-c", "cat"], env={"A": "1"}, stdin=subprocess.PIPE)
            assert cat.stdin is not None and cat.stdout is not None
            await cat.stdin.send(b"fed\n")
            assert await cat.stdout.readline() == "fed\n"
            await cat.stdin.aclose()
            await cat.wait()
            # The same, waited on with its output in one stream, as our driver runs every command.
            fed = await sandbox.run_process("bash", ["-c", "cat"], env={"A": "1"}, input=b"fed\n", capture_output=True)
            assert (fed.returncode, fed.stdout) == (0, "fed\n")
            assert await sandbox.fs.read_bytes(f"{ROOT}/work/a.txt") == b"hello"
            await sandbox.extend_execution_time_limit(60)
            await sandbox.stop()
            # A session's sandbox: named and tagged, then found by its name (another worker's sandbox.get).
            named = await client.create_sandbox(
                name="mainsdk-ses-0123456789abcdef01234567",
                tags={"mainsdk-session": "ses_0123456789abcdef01234567", "mainsdk-tenant": "t1"},
                execution_time_limit=70,
                resources=SandboxResources(vcpus=2),
                persistent=False,
                network_policy=NetworkPolicy.deny_all(),
            )
            await client.get_sandbox(name=named.name)
            await named.stop()
            # A snapshot (which stops its sandbox), the stopped sandbox destroyed once it is stopped, the same name
            # created again from the snapshot, and the snapshot deleted: as _checkpoints.py opens a source again.
            kept = await client.create_sandbox(
                name="mainsdk-ses-0123456789abcdef01234568",
                tags={"mainsdk-session": "ses_0123456789abcdef01234568", "mainsdk-tenant": "t1"},
                execution_time_limit=70,
                resources=SandboxResources(vcpus=2),
                persistent=False,
                network_policy=NetworkPolicy.deny_all(),
            )
            await kept.fs.write_bytes(f"{ROOT}/work/a.txt", b"kept")
            snapshot = await kept.snapshot()
            while (await client.get_sandbox(name=kept.name)).status != "stopped":
                await asyncio.sleep(0.1)
            await kept.destroy()
            again = await client.create_sandbox(
                name=kept.name,
                tags={"mainsdk-session": "ses_0123456789abcdef01234568", "mainsdk-tenant": "t1"},
                source=SnapshotSource(snapshot_id=snapshot.id),
                execution_time_limit=70,
                resources=SandboxResources(vcpus=2),
                persistent=False,
                network_policy=NetworkPolicy.deny_all(),
            )
            assert await again.fs.read_bytes(f"{ROOT}/work/a.txt") == b"kept"
            await again.stop()
            await snapshot.delete()
        finally:
            await client.aclose()

    try:
        asyncio.run(main())
    finally:
        sim.stop()
    by_op: dict[str, list[dict[str, Any]]] = {}
    for request in sim.requests:
        name = operation(request["method"], request["path"])
        if name is not None:
            by_op.setdefault(name, []).append(request)
    yield by_op


@functools.cache
def our_requests() -> tuple[tuple[str, str, dict[str, Any]], ...]:
    """Every request of every cassette: (cassette, operation, request); read once (every test here reads them)."""
    found = []
    for path in CASSETTES:
        for interaction in load(path).interactions:
            request = interaction["request"]
            name = operation(request["method"], request["path"])
            assert name is not None, f"{path.name}: {request['method']} {request['path']} is no operation we know"
            found.append((path.name, name, request))
    return tuple(found)


def test_vercels_client_went_through_every_operation_we_use(theirs: dict[str, list[dict[str, Any]]]) -> None:
    assert OURS | {"extend"} <= set(theirs), f"not exercised with Vercel's client: {sorted(OURS - set(theirs))}"
    assert {name for _, name, _ in our_requests()} == OURS


@pytest.mark.parametrize("name", sorted(OURS))
def test_our_requests_agree_with_vercels_client(name: str, theirs: dict[str, list[dict[str, Any]]]) -> None:
    reference = theirs[name][0]
    their_query = dict(reference["query"])
    their_body = _their_body(reference)
    # Create: a one-shot run's sandbox is plain, a session's named and tagged; each must be one of Vercel's.
    their_creates = [
        shape({k: v for k, v in _their_body(r).items() if k != "networkPolicy"}) for r in theirs.get("create", [])
    ]
    checked = 0
    for cassette, op, request in our_requests():
        if op != name:
            continue
        checked += 1
        where = f"{cassette}: {request['method']} {request['path']}"
        assert request["method"] == reference["method"], where
        assert dict(request.get("query") or []) == their_query, f"{where}: query"
        ours = _our_body(request)
        if name == "create":
            # The policy by value, from the same hosts; the rest by shape.
            assert ours.pop("networkPolicy") in _policies(), f"{where}: networkPolicy"
            assert shape(ours) in their_creates, where
        elif name == "run" and ours.get("attachStdin"):
            # A command with a live stdin (a cell's kernel): as Vercel's run_process with input sends it.
            attached = [r for r in theirs["run"] if _their_body(r).get("attachStdin") and r["query"].get("wait")]
            assert attached and shape(ours) == shape(_their_body(attached[0])), where
        elif name == "stdin":
            # Each write carries its offset, as every one of Vercel's client's writes but its first offset read.
            assert shape(ours) in [shape(_their_body(r)) for r in theirs["stdin"]], where
            assert "offset" in ours, where
        elif name == "write":
            headers = {k.lower(): v for k, v in (request.get("headers") or {}).items()}
            assert headers.get("content-type") == reference["headers"]["content-type"] == "application/gzip", where
            members = request["body"]["targz"]
            # Absolute names under x-cwd "/" (as session.ts writes them), in the driver's folders only.
            assert all(m["name"].startswith(("vercel/sandbox/work/", "vercel/sandbox/.mainsdk/")) for m in members), (
                where
            )
            assert headers["x-cwd"] == reference["headers"]["x-cwd"] == "/", where
        else:
            assert shape(ours) == shape(their_body), where
    assert checked, f"no cassette holds a {name} request"


def _their_body(request: dict[str, Any]) -> Any:
    raw: bytes = request["body"]
    if not raw or request["headers"].get("content-type") == "application/gzip":
        return {} if not raw else "gzip"
    return json.loads(raw)


def _our_body(request: dict[str, Any]) -> Any:
    body = request.get("body")
    if not body:
        return {}
    if "targz" in body:
        return "gzip"
    return json.loads(decode_payload(body))


def _policies() -> list[Any]:
    """The network policies Vercel's client serializes for the hosts the suite uses: none, one, a wildcard, and
    one with egress headers (the suite's, and test_egress.py's weather key), their values as cassettes hold them."""
    from mainsdk_conformance.suite.secrets import EGRESS_HEADER
    from mainsdk_conformance.target import SECRET, NetworkHosts

    def injecting(header: str, secret: str) -> NetworkPolicyRule:
        return NetworkPolicyRule(transform=[NetworkPolicyTransform(headers={header: f"[scrubbed:{secret}]"})])

    hosts = NetworkHosts()
    return [
        _serialize_network_policy(NetworkPolicy.deny_all()),
        _serialize_network_policy(NetworkPolicy.custom({hosts.allowed: ()})),
        _serialize_network_policy(NetworkPolicy.custom({hosts.wildcard: ()})),
        _serialize_network_policy(NetworkPolicy.custom({hosts.allowed: (injecting(EGRESS_HEADER, SECRET),)})),
        _serialize_network_policy(
            NetworkPolicy.custom({"api.openweathermap.org": (injecting("X-Api-Key", "OPENWEATHER_KEY"),)})
        ),
    ]


@pytest.mark.parametrize("hosts", [(), ("example.com",), ("*.example.com", "api.example.org")])
def test_our_network_policy_is_the_one_vercels_client_sends(hosts: tuple[str, ...]) -> None:
    expected = NetworkPolicy.custom({host: () for host in hosts}) if hosts else NetworkPolicy.deny_all()
    assert vercel_network_policy(hosts) == _serialize_network_policy(expected)


def test_our_egress_headers_are_the_injection_rules_vercels_client_sends() -> None:
    # One host with headers, one without, one wildcard: each as vercel-sandbox 0.10.0 serializes them.
    rules = (
        EgressRule(
            "api.example.com", (EgressHeader("X-Api-Key", "K", "v1", "v1"), EgressHeader("X-B", "B", "v2", "v2"))
        ),
    )
    ours = vercel_injection_policy(vercel_network_policy(["api.example.com", "example.org", "*.example.net"]), rules)
    transform = NetworkPolicyTransform(headers={"X-Api-Key": "v1", "X-B": "v2"})
    expected = NetworkPolicy.custom(
        {"api.example.com": (NetworkPolicyRule(transform=[transform]),), "example.org": (), "*.example.net": ()}
    )
    assert ours == _serialize_network_policy(expected)


def test_vercels_client_reads_the_simulators_injection_readback_as_names_only() -> None:
    """The stand-in takes the policy Vercel's client sends with header injection, and answers with what the
    client parses as ``NetworkPolicyInjectionRuleSummary`` (the header's name): the value is in no answer."""
    sim = Simulator(token=TOKEN)
    sim.start()
    value = "v-sdk-check-not-a-secret"

    async def credentials() -> SandboxCredentials:
        return SandboxCredentials(token=TOKEN, team_id=TEAM, project_id=PROJECT)

    async def main() -> Any:
        client = SandboxClient.create(options=SandboxServiceOptions(base_url=sim.url, credentials_factory=credentials))
        try:
            rule = NetworkPolicyRule(transform=[NetworkPolicyTransform(headers={"X-Api-Key": value})])
            sandbox = await client.create_sandbox(
                execution_time_limit=70,
                resources=SandboxResources(vcpus=2),
                persistent=False,
                network_policy=NetworkPolicy.custom({"api.example.com": (rule,), "example.org": ()}),
            )
            session = sandbox.current_session
            assert session is not None
            return session.id, session.network_policy
        finally:
            await client.aclose()

    try:
        session_id, readback = asyncio.run(main())
        # The session read back as the API answers it, raw: the header's name, never its value.
        answer = httpx.get(
            f"{sim.url}/v2/sandboxes/sessions/{session_id}", headers={"authorization": f"Bearer {TOKEN}"}
        )
    finally:
        sim.stop()
    assert readback.mode == "custom" and set(readback.allowed_domains) == {"api.example.com", "example.org"}
    assert [(r.domain, r.header_names) for r in readback.injection_rules] == [("api.example.com", ("X-Api-Key",))]
    [create] = [r for r in sim.requests if r["path"] == "/v3/sandboxes"]
    assert value in create["body"].decode()  # the client sent it to the API, which keeps it to itself
    assert answer.status_code == 200 and "headerNames" in answer.text and value not in answer.text


def test_the_written_files_land_where_vercels_client_puts_them(theirs: dict[str, list[dict[str, Any]]]) -> None:
    from mainsdk_vercel._archive import UPLOAD_CWD, upload

    reference = theirs["write"][0]
    their_paths = tar_paths(reference["body"], reference["headers"]["x-cwd"])
    ours = tar_paths(upload({f"{ROOT}/work/a.txt": b"hello"}), UPLOAD_CWD)
    assert ours == their_paths == [f"{ROOT}/work/a.txt"]
    assert reference["headers"]["x-cwd"] == UPLOAD_CWD  # "/": names absolute, as our driver sends them


def test_extend_timeout_is_the_request_vercels_client_sends(theirs: dict[str, list[dict[str, Any]]]) -> None:
    # What the driver sends (driver.py, _ensure): POST {SESSIONS}/{id}/extend-timeout {"duration": ms}.
    [reference] = theirs["extend"]
    assert reference["method"] == "POST" and reference["query"] == {"teamId": TEAM}
    assert shape(json.loads(reference["body"])) == shape({"duration": 60000})


def test_reconnecting_a_session_is_the_get_vercels_client_sends(theirs: dict[str, list[dict[str, Any]]]) -> None:
    # Our driver's reconnect (sandbox.get from another worker), against the stand-in: GET /v2/sandboxes/{name}.
    from mainsdk import Sandbox, SandboxDeps
    from mainsdk.config import load_config_text

    from mainsdk_vercel import vercel_sandbox_driver

    sim = Simulator(token=TOKEN)
    sim.start()
    config = load_config_text("sandbox: {driver: vercel-sandbox, vercel: {team: team_conformance}}\n")

    def sandbox() -> Sandbox:
        driver = vercel_sandbox_driver(token=TOKEN, project=PROJECT, team=TEAM, base_url=sim.url)
        return Sandbox(SandboxDeps(config=config, driver=driver, load_entrypoints=False, tenancy=lambda: "t1"))

    opener, other = sandbox(), sandbox()
    try:
        session = opener.create()
        other.get(session.id)
        session.close()
    finally:
        opener.close()
        other.close()
        sim.stop()
    # The opener's create answered pending, so both it and Vercel's client polled the session by name too (the
    # same request); the last get is the other worker's reconnect.
    ours = [r for r in sim.requests if operation(r["method"], r["path"]) == "get"][-1]
    reference = theirs["get"][-1]
    assert len({json.dumps(r["query"], sort_keys=True) for r in theirs["get"]}) == 1
    assert ours["method"] == reference["method"] == "GET"
    assert ours["query"] == reference["query"] == {"projectId": PROJECT, "resume": "false", "teamId": TEAM}
    assert ours["body"] == reference["body"] == b""


def test_a_live_stdin_is_written_as_vercels_client_writes_it(theirs: dict[str, list[dict[str, Any]]]) -> None:
    # Our driver's live stdin (Command.input) against the stand-in: the command's attachStdin and each write.
    from mainsdk.driver import BoxSpec, Command, InputStream, RunLimits

    from mainsdk_vercel import vercel_sandbox_driver

    sim = Simulator(token=TOKEN)
    sim.start()

    class Sink:
        def stdout(self, data: bytes) -> None:
            pass

        def stderr(self, data: bytes) -> None:
            pass

        def host_refused(self, host: str) -> None:
            pass

    async def main() -> None:
        driver = vercel_sandbox_driver(token=TOKEN, project=PROJECT, team=TEAM, base_url=sim.url)
        limits = RunLimits(timeout=20.0, memory=64 << 20, output=1 << 20, files=1 << 20, disk=64 << 20)
        box = await driver.mainsdk_driver_start(BoxSpec(id="ses_0123456789abcdef01234567", limits=limits, idle=60.0))
        try:
            stream = InputStream()
            stream.send(b"fed\n")
            stream.close()
            await driver.mainsdk_driver_exec(box, Command("bash", ("-c", "cat"), input=stream), Sink())
        finally:
            await driver.mainsdk_driver_stop(box)

    try:
        asyncio.run(main())
    finally:
        sim.stop()
    ours = [r for r in sim.requests if operation(r["method"], r["path"]) == "stdin"]
    assert len(ours) == 2  # the chunk, then the close
    their_shapes = [shape(json.loads(r["body"])) for r in theirs["stdin"]]
    for request in ours:
        assert request["query"] == theirs["stdin"][0]["query"] == {"teamId": TEAM}
        assert shape(json.loads(request["body"])) in their_shapes, request["body"]
    [our_run] = [r for r in sim.requests if operation(r["method"], r["path"]) == "run"]
    attached = [r for r in theirs["run"] if json.loads(r["body"]).get("attachStdin") and r["query"].get("wait")]
    assert attached and json.loads(our_run["body"])["attachStdin"] is True
    assert shape(json.loads(our_run["body"])) == shape(json.loads(attached[0]["body"]))
