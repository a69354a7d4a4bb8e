"""After ``author.py``: set what the stand-in cannot answer, trim the big streams, write the fault cassettes.

    python mainsdk_e2b/tests/authoring/finish.py

- Network: the stand-in has no egress firewall, so the runs that reach a given
  host get the answer E2B's firewall gives, from its source
  (e2b-dev/infra ``packages/orchestrator/pkg/tcpfirewall/proxy.go``): a given
  host is reached by name on port 80 (HTTP Host) and 443 (TLS SNI) only; any
  other host, or another port, is refused. Each such cassette lists the edit
  in ``meta.edited``.
- Output: the 10 MB stream is cut to the first frames past the 1 MB limit (what the driver reads).
- Faults: derived from ``TestRun/test_python_prints``, shaped as E2B answers (sources in each note);
  the orphan cassette is recorded against the stand-in with ``FAKE_E2B_CREATE_502``.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CASSETTES = HERE.parent / "conformance" / "cassettes"
DRIVER_CASSETTES = HERE.parent / "cassettes"
sys.path.insert(0, str(HERE.parents[1] / "src"))
sys.path.insert(0, str(HERE))

from mainsdk.driver import BoxSpec, RunLimits  # noqa: E402
from mainsdk.engine import code_command  # noqa: E402
from mainsdk_conformance.cassette import authored_meta, decode_payload, known_payloads, mark_edited  # noqa: E402
from mainsdk_conformance.profiles import E2B  # noqa: E402
from mainsdk_conformance.replay import ReplayServer  # noqa: E402
from mainsdk_conformance.suite._helpers import reach_code  # noqa: E402
from mainsdk_conformance.target import NetworkHosts  # noqa: E402
from mainsdk_e2b.driver import E2B_NETWORK_REACH, shell_line  # noqa: E402

from mainsdk_e2b import e2b_sandbox_driver  # noqa: E402

AUTHORED_KEY = "e2b_" + "ab" * 20  # what author.py gives the stand-in; scrubbed from every cassette


def load(name: str) -> dict[str, Any]:
    cassette: dict[str, Any] = json.loads((CASSETTES / name).read_text())
    return cassette


def save(name: str, data: dict[str, Any], folder: Path = CASSETTES) -> None:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def frames(interaction: dict[str, Any]) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = interaction["response"]["body"]["connect"]
    return frames


def set_stdout(interaction: dict[str, Any], text: str) -> None:
    """Replace a command's output frames with one stdout frame holding ``text``."""
    kept = [f for f in frames(interaction) if "data" not in (f.get("json") or {}).get("event", {})]
    data = {"flags": 0, "json": {"event": {"data": {"stdout": base64.b64encode(text.encode()).decode()}}}}
    kept.insert(1, data)
    interaction["response"]["body"]["connect"] = kept


def starts_of(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in data["interactions"] if i["request"]["path"] == "/process.Process/Start"]


def start_of(data: dict[str, Any]) -> dict[str, Any]:
    return starts_of(data)[0]


def edited(data: dict[str, Any], what: str) -> None:
    """Say in the cassette's meta what was changed by hand after the stand-in answered."""
    mark_edited(data["meta"], what)


def plain_script(code: str, files: int) -> str:
    """The driver's script for ``TestRun/test_python_prints``'s run of ``code`` (10 s, no env)."""
    return shell_line(code_command("python", code, 10.0, {}), archive_limit=files)


def recorded_files_limit(start: dict[str, Any]) -> int:
    """The files limit ``test_python_prints``'s script was made with. The script is kept by content (a digest past
    4 KiB: conformance's ``cassette.request_payload``), so it is made again with each likely limit until one is
    the recorded one."""
    recorded = start["request"]["body"]["connect"][0]["json"]["process"]["args"][2]
    content = known_payloads().content
    return next(n for n in (1 << 20, 10 << 20, 50 << 20) if content(plain_script("print(1 + 1)", n)) == recorded)


def network() -> None:
    """The network tests' cassettes, derived from ``TestRun/test_python_prints``: recording cannot make them.

    The stand-in has no egress firewall, so those tests fail while recording
    and record mode saves nothing for them. Each run here is the plain run's
    requests with the network policy the driver sends for the hosts, the
    probe's code in the command line (quoted as the driver quotes it) and its
    own sandbox id; its stdout is what E2B's firewall answers (e2b-dev/infra
    ``packages/orchestrator/pkg/tcpfirewall/proxy.go``): the given host is
    reached by name on 80 (Host) and 443 (SNI) only, everything else refused.
    """
    base = load("TestRun/test_python_prints.json")
    hosts = NetworkHosts()
    plain = shlex.quote("print(1 + 1)")
    files_limit = recorded_files_limit(start_of(base))

    def run(number: int, given: str | None, tried: list[str], scheme: str, port: int) -> list[dict[str, Any]]:
        code = reach_code(tried, port, scheme)
        text = json.dumps(base["interactions"]).replace(json.dumps(plain)[1:-1], json.dumps(shlex.quote(code))[1:-1])
        sandbox_id = base["interactions"][0]["response"]["body"]["json"]["sandboxID"]
        interactions: list[dict[str, Any]] = json.loads(text.replace(sandbox_id, f"i9{number:02d}fakee2b"))
        create = interactions[0]["request"]["body"]["json"]
        if given is not None:
            create["network"] = {"allowOut": [given], "denyOut": ["0.0.0.0/0"]}
        reached = given is not None and E2B_NETWORK_REACH.filters(scheme, port)  # type: ignore[arg-type]
        start = start_of({"interactions": interactions})
        # The script is a digest in the cassette: the probe's own script, kept as the recorder keeps it.
        start["request"]["body"]["connect"][0]["json"]["process"]["args"][2] = known_payloads().content(
            plain_script(code, files_limit)
        )
        set_stdout(
            start, "".join(f"{h} {'reached' if reached and i == 0 else 'refused'}\n" for i, h in enumerate(tried))
        )
        return interactions

    how = (
        "derived from TestRun/test_python_prints: the network policy for the hosts, the probe's code, and the "
        "stdout E2B's egress firewall gives (tcpfirewall/proxy.go: names on 80 by Host, 443 by SNI)"
    )
    plans: dict[str, list[tuple[str | None, list[str], str, int]]] = {
        "test_one_host": [
            (hosts.allowed, [hosts.allowed, hosts.denied], "http", 80),
            (hosts.allowed, [hosts.allowed, hosts.denied], "https", 443),
        ],
        "test_a_wildcard_host": [(hosts.wildcard, [hosts.under_wildcard, hosts.denied], "https", 443)],
        # No hosts: nothing out, the suite's origin on 127.0.0.1 included (deny_out 0.0.0.0/0; the stand-in
        # reaches this machine's loopback, E2B's sandbox never does).
        "test_no_host_is_reachable_without_network": [(None, [hosts.allowed, "127.0.0.1"], "http", 8080)],
        "test_a_given_host_is_refused_where_the_driver_does_not_filter": [
            (hosts.allowed, [hosts.allowed], "http", 8080),
            (hosts.allowed, [hosts.allowed], "https", 8443),
        ],
    }
    number = 0
    for test, runs in plans.items():
        interactions: list[dict[str, Any]] = []
        for given, tried, scheme, port in runs:
            number += 1
            interactions += run(number, given, tried, scheme, port)
        meta = authored_meta(base["meta"], test=test, how=how, edited=["stdout: what E2B's egress firewall gives"])
        save(f"TestNetwork/{test}.json", {"format": base["format"], "meta": meta, "interactions": interactions})


def trim_output() -> None:
    for name in (
        "TestLimits/test_output_is_cut_exactly_at_the_limit_and_the_code_stopped.json",
        "TestLimits/test_stdout_and_stderr_share_the_output_limit.json",
    ):
        data = load(name)
        stream = frames(start_of(data))
        kept, total, limit = [], 0, 1024 * 1024 + 65536
        for frame in stream:
            # A large frame is kept gzipped (conformance's cassette.response_payload): read it as what it says.
            said = frame.get("json") or (json.loads(decode_payload(frame)) if "gzip" in frame else {})
            event = said.get("event", {})
            if "data" in event:
                if total > limit:
                    continue
                total += len(base64.b64decode(next(iter(event["data"].values()))))
            kept.append(frame)
        start_of(data)["response"]["body"]["connect"] = kept
        edited(data, "output frames past the first 1 MB + 64 KB dropped (the driver stops reading there)")
        save(name, data)


def faults() -> None:
    base = load("TestRun/test_python_prints.json")
    base["interactions"] = [copy.deepcopy(i) for i in base["interactions"]]
    start = start_of(base)
    files_limit = recorded_files_limit(start)
    content = known_payloads().content
    limits = RunLimits(timeout=10.0, memory=0, output=0, files=files_limit, disk=0)
    line = content(plain_script("print('fault')", limits.files))
    start["request"]["body"]["connect"][0]["json"]["process"]["args"][2] = line
    set_stdout(start, "fault\n")
    create, _, archive, kill = base["interactions"]
    sandbox_id = create["response"]["body"]["json"]["sandboxID"]

    def cassette(test: str, interactions: list[dict[str, Any]], note: str) -> None:
        # Authored, whatever the base was made by: never the base's labels (a recording's "recorded").
        how = "derived by hand from TestRun/test_python_prints: " + note
        meta = authored_meta(base["meta"], test=test, how=how, edited=["fault: written by hand (see how)"])
        save(f"TestFaults/{test}.json", {"format": base["format"], "meta": meta, "interactions": interactions})

    def answer(of: dict[str, Any], status: int, body: Any, headers: dict[str, str] | None = None) -> dict[str, Any]:
        out = copy.deepcopy(of)
        out["response"] = {"status": status, "headers": {"content-type": "application/json", **(headers or {})}}
        out["response"]["body"] = {"json": body}
        return out

    def listing(of: dict[str, Any], status: int, body: Any) -> dict[str, Any]:
        """The driver's look for sandboxes a failed create left (GET /v2/sandboxes?metadata=...)."""
        out = answer(of, status, body)
        metadata = "mainsdk_box=" + create["request"]["body"]["json"]["metadata"]["mainsdk_box"]
        out["request"] = {"method": "GET", "path": "/v2/sandboxes", "query": [["metadata", metadata]]}
        return out

    limited = answer(create, 429, {"code": 429, "message": "rate limit exceeded"}, {"Retry-After": "1"})
    cassette(
        "test_429_with_retry_after_is_retried_after_the_wait",
        [limited, create, start, archive, kill],
        "a 429 with Retry-After (packages/api/internal/middleware/ratelimit/ratelimit.go), then the run",
    )

    busy = answer(create, 503, {"code": 503, "message": "service temporarily unavailable"})
    # The SDK retries a 503 three times itself (e2b retry.py): four answers; then the driver looks once for what a
    # create may have left (no retries), and the service is still busy.
    cassette(
        "test_503_is_0006_and_retryable",
        [copy.deepcopy(busy) for _ in range(4)] + [listing(create, 503, busy["response"]["body"]["json"])],
        "four 503s to the create (the SDK's three retries), then the look for orphans answered 503",
    )

    gone = {"sandboxId": sandbox_id, "message": "The sandbox was not found", "code": 502}
    reset = copy.deepcopy(start)
    reset["fault"] = {"kind": "reset", "after_frames": 1}
    # After a transport failure the SDK probes envd's /health; E2B's proxy answers 502 for a sandbox it lost.
    health = answer(start, 502, gone)
    health["request"] = {k: v for k, v in health["request"].items() if k != "body"} | {
        "method": "GET",
        "path": "/health",
    }
    cassette(
        "test_a_reset_mid_stream_is_0006_and_the_command_is_not_sent_again",
        [create, reset, health, kill],
        "the stream reset after its first frame; /health then answers the proxy's 502 "
        "(packages/shared/pkg/proxy/template/sandbox_not_found.go)",
    )

    vanished = answer(start, 502, gone)
    kill_gone = answer(kill, 404, {"code": 404, "message": f'sandbox "{sandbox_id}" doesn\'t exist'})
    cassette(
        "test_a_sandbox_that_vanished_mid_run_is_0006",
        [create, vanished, kill_gone],
        "the proxy's 502 'The sandbox was not found' to the Start "
        "(packages/shared/pkg/proxy/template/sandbox_not_found.go); the API's 404 to the kill",
    )

    late = copy.deepcopy(start)
    late["fault"] = {"kind": "delay", "seconds": 5}
    delayed_create = copy.deepcopy(create)
    delayed_create["request"]["body"]["json"]["timeout"] = 61
    late["request"]["body"]["connect"][0]["json"]["process"]["args"][2] = content(
        shell_line(code_command("python", "print('fault')", 1.0, {}), archive_limit=limits.files)
    )
    cassette(
        "test_a_response_past_the_deadline_stops_the_run_at_its_time_limit",
        [delayed_create, late, kill],
        "the Start's answer held 5 s, past the 1 s deadline: no pid, so nothing to kill or read but the sandbox",
    )


def the_401() -> None:
    """The 401 to a create (tests/cassettes): its request is the create the driver sends now, metadata and all."""
    path = DRIVER_CASSETTES / "test_401_is_0006_without_the_key.json"
    data = json.loads(path.read_text())
    recorded = load("TestRun/test_python_prints.json")["interactions"][0]["request"]
    data["interactions"][0]["request"]["body"]["json"]["metadata"] = recorded["body"]["json"]["metadata"]
    edited(data, "the create's request body given the driver's metadata (run id and tenant)")
    # The SDK's headers for that create, Idempotency-Key included (the run id in the API's alphabet).
    data["interactions"][0]["request"]["headers"] = recorded["headers"]
    edited(data, "the create's request headers: those the SDK sent for TestRun/test_python_prints's create")
    save(path.name, data, DRIVER_CASSETTES)


def orphans() -> None:
    """Record a create that made its sandbox but answered 502, four times (the SDK's retries), against the stand-in."""
    import fake_e2b

    fake_e2b.STATE.creates_to_fail = 4
    api, sandbox = fake_e2b.serve()
    path = DRIVER_CASSETTES / "test_a_create_that_answered_502_leaves_no_sandbox.json"
    server = ReplayServer.recorder(E2B, path, upstreams={"api": api, "sandbox": sandbox}, secrets=[AUTHORED_KEY])
    server.start()
    driver = e2b_sandbox_driver(api_key=AUTHORED_KEY, api_url=server.url("api"), sandbox_url=server.url("sandbox"))
    limits = RunLimits(timeout=10.0, memory=0, output=0, files=1024, disk=0)
    spec = BoxSpec(id="run_0123456789abcdef", limits=limits, tenant="default")
    try:
        asyncio.run(driver.mainsdk_driver_start(spec))
    except Exception as exc:  # noqa: BLE001 - the 0006 is what the test expects
        print("create failed as it should:", exc)
    finally:
        server.stop()
    server.save()
    assert not fake_e2b.STATE.boxes, f"the stand-in still runs {sorted(fake_e2b.STATE.boxes)}"
    data = json.loads(path.read_text())
    how = (
        "the real e2b SDK's requests, recorded against fake_e2b.py with FAKE_E2B_CREATE_502=4 "
        "(each create makes its sandbox, then answers 502)"
    )
    data["meta"] = authored_meta(data["meta"], test=path.stem, how=how)
    save(path.name, data, DRIVER_CASSETTES)


def across_workers() -> None:
    """Record a session one worker opens and another takes up (``sandbox.get``), against the stand-in.

    The scenario is ``test_driver.across_workers``, the very code its test replays.
    """
    import fake_e2b

    sys.path.insert(0, str(HERE.parent))
    from test_driver import across_workers as scenario

    fake_e2b.STATE.creates_to_fail = 0
    api, sandbox = fake_e2b.serve()
    path = DRIVER_CASSETTES / "test_a_session_is_reachable_from_another_worker_of_its_tenant_only.json"
    server = ReplayServer.recorder(E2B, path, upstreams={"api": api, "sandbox": sandbox}, secrets=[AUTHORED_KEY])
    server.start()
    try:
        print("across workers:", scenario(AUTHORED_KEY, server.url("api"), server.url("sandbox")))
    finally:
        server.stop()
    server.save()
    data = json.loads(path.read_text())
    how = "the real e2b SDK's requests, recorded against fake_e2b.py: two workers, two tenants, one session"
    data["meta"] = authored_meta(data["meta"], test=path.stem, how=how)
    save(path.name, data, DRIVER_CASSETTES)


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("E2B_API_KEY", AUTHORED_KEY)
    network()
    trim_output()
    faults()
    the_401()
    orphans()
    across_workers()
