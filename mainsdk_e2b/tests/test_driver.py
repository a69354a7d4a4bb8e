"""The e2b driver outside the suite: config, policy, price, the key kept secret, a 401 through the real SDK."""

from __future__ import annotations

import asyncio
import io
import json
import re
import socket
import subprocess
import tarfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2b_replay import key, provider
from mainsdk import Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config_text
from mainsdk.driver import Command
from mainsdk.errors import DRIVER_UNAVAILABLE, INVALID_OPTION, NO_SESSION
from mainsdk.plugins import load_driver
from mainsdk_conformance.profiles import E2B, E2B_IDEMPOTENCY_KEY
from mainsdk_conformance.replay import ReplayServer
from mainsdk_e2b.driver import (
    BACKSTOP_GRACE,
    extract_out_archive,
    idempotency_key,
    killer_line,
    resolve_key,
    shell_line,
    signal_of,
)

from mainsdk_e2b import E2BDriver, e2b_network_policy, e2b_sandbox_driver, estimate_price

HERE = Path(__file__).parent
KEY = "e2b_" + "5eed" * 10  # the key replay sends (conformance/conftest.py)


def test_the_policy_allows_the_hosts_and_denies_everything_else() -> None:
    assert e2b_network_policy([]) == {"allow_out": [], "deny_out": ["0.0.0.0/0"]}
    assert e2b_network_policy(["pypi.org", "*.example.com"]) == {
        "allow_out": ["pypi.org", "*.example.com"],
        "deny_out": ["0.0.0.0/0"],
    }


def test_the_price_is_e2bs_per_vcpu_and_per_gib_second() -> None:
    assert estimate_price() == Decimal("0.00003025")  # 2 x 0.000014 + 0.5 x 0.0000045
    assert estimate_price(8, 8192) == Decimal("0.000148")
    assert e2b_sandbox_driver(api_key=KEY).mainsdk_driver_capabilities().price_per_second == Decimal("0.00003025")
    priced = e2b_sandbox_driver(api_key=KEY, price=Decimal("0.0001"))
    assert priced.mainsdk_driver_capabilities().price_per_second == Decimal("0.0001")


def test_main_yaml_loads_the_driver_through_its_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_E2B_KEY", KEY)
    config = load_config_text('sandbox: {driver: e2b, e2b: {key: "secret:MY_E2B_KEY", template: t1}, price: $0.001}\n')
    driver = load_driver("e2b", config)
    assert isinstance(driver, E2BDriver)
    caps = driver.mainsdk_driver_capabilities()
    assert (caps.isolation, caps.network, caps.sessions, caps.memory_limit) == ("microvm", True, True, False)
    assert caps.price_per_second == Decimal("0.001")
    assert KEY not in repr(driver)


def test_a_missing_key_is_0001_naming_the_secret_not_a_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    config = load_config_text("sandbox: {driver: e2b}\n")
    sandbox = Sandbox(SandboxDeps(config=config, load_entrypoints=False))
    with pytest.raises(SandboxError) as caught:
        sandbox.run("print(1)")
    assert (caught.value.code, caught.value.status, caught.value.retryable) == (INVALID_OPTION, 400, False)
    assert "E2B_API_KEY" in caught.value.message
    assert resolve_key("secret:X", {"X": "v"}) == ("v", "sandbox.e2b.key names the secret X, which has no value; set X")


def test_the_command_line_names_variables_and_never_holds_their_values() -> None:
    line = shell_line(Command("python3", ("-c", "print('a  b'); x = '$HOME'"), env={"K": "value-of-k"}))
    assert "value-of-k" not in line and 'K="$K"' in line
    assert "python3 -c 'print('\"'\"'a  b'\"'\"'); x = '\"'\"'$HOME'\"'\"'' 0<&3 3<&- &" in line
    assert "cd /home/user/work" in line and '/usr/bin/setsid "${w8[@]}" /usr/bin/env -i' in line


def test_a_401_is_0006_and_the_key_is_in_no_error(tmp_path: Path) -> None:
    server = ReplayServer.replayer(E2B, HERE / "cassettes" / "test_401_is_0006_without_the_key.json")
    server.start()
    try:
        driver = e2b_sandbox_driver(api_key=KEY, api_url=server.url("api"), sandbox_url=server.url("sandbox"))
        config = load_config_text("sandbox: {driver: e2b, limits: {timeout: 10s}}\n")
        sandbox = Sandbox(SandboxDeps(config=config, driver=driver))
        with pytest.raises(SandboxError) as caught:
            sandbox.run("print('fault')")
        sandbox.close()
    finally:
        server.stop()
    assert server.problems(final=True) == []
    assert (caught.value.code, caught.value.retryable) == (DRIVER_UNAVAILABLE, True)
    assert "authentication failed" in caught.value.message
    chain = [caught.value, caught.value.__cause__, caught.value.__context__]
    assert all(KEY not in str(exc) and KEY not in repr(exc) for exc in chain if exc is not None)


def test_no_cassette_holds_a_key_or_the_replay_key() -> None:
    paths = sorted(HERE.rglob("cassettes/**/*.json"))
    assert len(paths) > 50  # refused calls send no request: record mode writes no cassette for them
    for path in paths:
        text = path.read_text()
        assert KEY not in text and "5eed5eed" not in text, path
        data = json.loads(text)
        assert data["meta"]["made"] == "authored", path
        for interaction in data["interactions"]:
            headers = {k.lower(): v for k, v in (interaction["request"].get("headers") or {}).items()}
            assert headers.get("x-api-key", "[scrubbed]") == "[scrubbed]", path
            assert headers.get("x-access-token", "[scrubbed]") == "[scrubbed]", path


def _requests_per_run(data: dict[str, Any]) -> list[int]:
    """Requests of each sandbox in a cassette, from its create to its kill (the create's answer names it)."""
    counts: dict[str, int] = {}
    for interaction in data["interactions"]:
        body = (interaction["response"].get("body") or {}).get("json")
        if interaction["request"]["path"] == "/v2/sandboxes" and isinstance(body, dict) and "sandboxID" in body:
            counts[body["sandboxID"]] = 0
        lane = E2B.lane(interaction["request"]["path"], interaction["request"].get("headers") or {})
        sandbox = lane or (body["sandboxID"] if isinstance(body, dict) and "sandboxID" in body else "")
        counts[sandbox] = counts.get(sandbox, 0) + 1
    return list(counts.values())


def test_a_run_costs_four_round_trips_five_with_files_in_whatever_its_out_files() -> None:
    # create, [upload], start, read out/'s archive, kill: the figure the README states.
    cassettes = HERE / "conformance" / "cassettes"
    for name, expected in (
        ("TestRun/test_python_prints.json", [4]),
        ("TestIsolation/test_files_passed_in_are_byte_exact.json", [5]),
        ("TestFiles/test_out_files_come_back_as_file_refs.json", [5]),  # one file in, one out
        ("TestFiles/test_nested_and_binary_out_files.json", [4]),  # two out files, nested
        ("TestFiles/test_out_files_past_limits_files_stop_with_output.json", [4]),  # three out files
        ("TestNetwork/test_one_host.json", [4, 4]),
    ):
        data = json.loads((cassettes / name).read_text())
        assert _requests_per_run(data) == expected, name
    sessions = {"TestFaults", "TestSessions", "TestCells", "TestBackground", "TestCheckpoints", "TestPause"}
    for path in sorted(cassettes.glob("Test*/*.json")):  # every one-shot run but the faults and sessions
        if path.parent.name in sessions:
            continue
        for count in _requests_per_run(json.loads(path.read_text())):
            assert count in (4, 5), (path.name, count)
    isolation = json.loads((cassettes / "TestIsolation/test_files_passed_in_are_byte_exact.json").read_text())
    uploads = [i for i in isolation["interactions"] if i["request"]["path"] == "/files"]
    assert len(uploads) == 2 and len(uploads[0]["request"]["body"]["multipart"]) == 2  # the upload, the archive


def test_no_request_asks_e2b_for_a_sandbox_past_an_hour_not_even_the_cell_kernels() -> None:
    # E2B refuses a timeout past the team's maximum with a 400 (1 h on Hobby; e2b-dev/infra timeout_helper.go).
    # Core's cell kernel is a command with a day's deadline: it must not push the sandbox's end to a day.
    # The driver's own cassettes too: their keep-alives are refreshes ({"duration": N}), never /timeout.
    cassettes = sorted((HERE / "conformance" / "cassettes").rglob("*.json")) + sorted(
        (HERE / "cassettes").rglob("*.json")
    )
    asked = []
    for path in cassettes:
        for interaction in json.loads(path.read_text())["interactions"]:
            request = interaction["request"]
            body = (request.get("body") or {}).get("json")
            assert not request["path"].endswith("/timeout"), (path.name, "POST /timeout may shorten a sandbox's end")
            for field in ("timeout", "duration"):
                if request["method"] == "POST" and isinstance(body, dict) and field in body:
                    assert 0 < body[field] <= 3600, (path.name, body)
                    asked.append(f"{path.parent.name}:{field}")
    assert "TestCells:timeout" in asked  # the cells' sandboxes were created, and with a bounded timeout
    assert "lifetime:duration" in asked  # and kept alive by bounded refreshes


def test_e2b_declares_where_its_firewall_filters_and_the_nameserver_it_opens() -> None:
    reach = e2b_sandbox_driver(api_key=KEY).mainsdk_driver_capabilities().network_reach
    assert reach is not None and reach.filtered == (("http", 80), ("https", 443))
    assert not reach.filters("http", 8080) and not reach.filters("https", 8443)
    assert any("8.8.8.8" in extra for extra in reach.extra)


def test_a_create_that_answered_502_leaves_no_sandbox() -> None:
    # Each of the SDK's four tries made a sandbox and answered 502: the driver lists them by the run's id
    # (metadata) and kills every one. The cassette fails the test if any recorded kill never comes.
    server = ReplayServer.replayer(E2B, HERE / "cassettes" / "test_a_create_that_answered_502_leaves_no_sandbox.json")
    server.start()
    try:
        driver = e2b_sandbox_driver(api_key=KEY, api_url=server.url("api"), sandbox_url=server.url("sandbox"))
        config = load_config_text("sandbox: {driver: e2b, limits: {timeout: 10s, files: 1KB}}\n")
        sandbox = Sandbox(SandboxDeps(config=config, driver=driver))
        with pytest.raises(SandboxError) as caught:
            sandbox.run("print(1)")
        sandbox.close()
    finally:
        server.stop()
    assert server.problems(final=True) == []
    assert caught.value.code == DRIVER_UNAVAILABLE
    creates = [r for r in server.received if r.method == "POST" and r.path == "/v2/sandboxes"]
    kills = [r for r in server.received if r.method == "DELETE"]
    assert len(creates) == 4 and len(kills) == 4


def _tar(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            archive.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


def test_the_out_archive_is_untrusted_input() -> None:
    data = _tar(
        [
            (_member("out/a.txt"), b"a"),
            (_member("out/s/t/b.bin"), bytes(range(256))),
            (_member("out/../../etc/passwd"), b"escape"),
            (_member("/etc/shadow"), b"absolute"),
            (_member("work/x"), b"not out"),
            (_member("out/l", tarfile.SYMTYPE, "/etc/hostname"), b""),
            (_member("out/h", tarfile.LNKTYPE, "out/a.txt"), b""),
            (_member("out/a.txt"), b"twice"),
            (_member("out/big"), b"x" * 2000),
            (_member("out/z"), b"z"),
        ]
    )
    collected = extract_out_archive(data, 1024)
    assert [(f.name, f.data) for f in collected.files] == [
        ("a.txt", b"a"),
        ("s/t/b.bin", bytes(range(256))),
        ("z", b"z"),
    ]
    assert collected.truncated  # "big" did not fit
    reasons = dict(collected.skipped)
    assert (
        reasons["out/../../etc/passwd"] == reasons["/etc/shadow"] == reasons["work/x"] == "not a plain name under out/"
    )
    assert reasons["l"] == reasons["h"] == "not a regular file" and reasons["big"] == "past limits.files"


def test_a_cut_or_broken_archive_keeps_what_came_and_says_truncated() -> None:
    data = _tar([(_member("out/a.txt"), b"a"), (_member("out/b.txt"), b"b" * 600)])
    whole = extract_out_archive(data, 1 << 20)
    assert [f.name for f in whole.files] == ["a.txt", "b.txt"] and not whole.truncated
    cut = extract_out_archive(data[:1100], 1 << 20, cut=True)
    assert [f.name for f in cut.files] == ["a.txt"] and cut.truncated
    marked = extract_out_archive(_tar([(_member("truncated"), b"")]), 1 << 20)
    assert marked.files == () and marked.truncated


def _processes_in_session(sid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def test_the_killer_kills_the_whole_session_of_the_command_and_nothing_else() -> None:
    # Real processes on this host: a parent (envd's child, the script) whose child leads a session holding a
    # tree, a process that left the group (setpgid) but not the session, and a bystander in another session.
    leaving = 'python3 -c "import os, time; os.setpgid(0, 0); time.sleep(300)"'
    script = f"setsid bash -c 'sleep 300 & (sleep 300 &) ; {leaving} & wait' & wait"
    parent = subprocess.Popen(["bash", "-c", script])
    bystander = subprocess.Popen(["setsid", "sleep", "300"])
    try:
        deadline = time.monotonic() + 10
        leader = None
        while time.monotonic() < deadline:
            children = [p for p in Path("/proc").glob("[0-9]*/stat") if f") S {parent.pid} " in _read(p)]
            leaders = [int(p.parent.name) for p in children if _session_of(p) == int(p.parent.name)]
            if leaders and len(_processes_in_session(leaders[0])) >= 4:
                leader = leaders[0]
                break
            time.sleep(0.05)
        assert leader is not None, "the test's process tree did not come up"
        subprocess.run(["bash", "-c", killer_line(parent.pid)], check=True, timeout=30)
        deadline = time.monotonic() + 10
        while _processes_in_session(leader) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _processes_in_session(leader) == []
        parent.wait(timeout=10)  # its child was killed, so the script goes on and ends
        assert bystander.poll() is None, "a process of another session was killed"
    finally:
        for proc in (parent, bystander):
            proc.kill()
            proc.wait()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _session_of(stat: Path) -> int:
    text = _read(stat)
    return int(text.rsplit(") ", 1)[1].split()[3]) if ") " in text else -1


def across_workers(key: str, api_url: str, sandbox_url: str) -> tuple[str, str, str]:
    """One worker opens a session and writes a file; another takes it up by id; a third, of another tenant, cannot.

    Each worker is its own ``Sandbox`` (its own session registry), as each
    process of a web app would be. Returns the second worker's output, the
    third's error code, and the opener's output after the second worker ran.
    """
    config = load_config_text("sandbox: {driver: e2b, limits: {timeout: 10s}}\n")
    tenant = {"id": "tenant-a"}

    def worker() -> Sandbox:
        driver = e2b_sandbox_driver(api_key=key, api_url=api_url, sandbox_url=sandbox_url)
        return Sandbox(SandboxDeps(config=config, driver=driver, tenancy=lambda: tenant["id"]))

    opener, other, foreign = worker(), worker(), worker()
    read = ["-c", "print(open('a.txt').read())"]
    try:
        with opener.create(feature="notebook") as session:
            session.write("a.txt", "from the opener")
            taken = other.get(session.id)
            seen = taken.run("python3", read).stdout
            taken.write("b.txt", "from the other worker")
            tenant["id"] = "tenant-b"
            with pytest.raises(SandboxError) as caught:
                foreign.get(session.id)
            tenant["id"] = "tenant-a"
            back = session.run("python3", ["-c", "print(open('b.txt').read())"]).stdout
    finally:
        for sandbox in (opener, other, foreign):
            sandbox.close()
    return seen, caught.value.code, back


def test_a_session_is_reachable_from_another_worker_of_its_tenant_only() -> None:
    name = "test_a_session_is_reachable_from_another_worker_of_its_tenant_only"
    with provider(name, folder=HERE / "cassettes") as server:  # replayed, or recorded in record mode
        seen, refused_code, back = across_workers(key(), server.url("api"), server.url("sandbox"))
    assert server.problems(final=True) == []
    assert seen == "from the opener\n"  # the other worker ran in the opener's box
    assert refused_code == NO_SESSION  # another tenant: the same 0008 as an unknown id
    assert back == "from the other worker\n"
    lists = [r for r in server.received if r.method == "GET" and r.path == "/v2/sandboxes"]
    assert len(lists) == 2  # one per worker that did not open it; the opener never looks
    # The taking worker knows the session's end from the listing: no keep-alive moved it, let alone shortened it.
    assert not [r for r in server.received if r.path.endswith(("/timeout", "/refreshes"))]


def test_envds_end_event_names_the_signal_the_script_died_of() -> None:
    # handler.go: cmd.Wait's error, as Go words it (syscall.Signal.String()).
    assert signal_of("signal: segmentation fault") == 11 and signal_of("signal: killed") == 9
    assert signal_of("signal: signal 34") == 34  # a real-time signal, which Go names by number
    assert signal_of("exit status 139") is None and signal_of(None) is None
    assert e2b_sandbox_driver(api_key=KEY).mainsdk_driver_capabilities().reports_signals


@pytest.mark.parametrize(("timeout", "seconds"), [(0.2, 1), (1.0, 1), (1.2, 2), (30.0, 30), (30.5, 31)])
def test_the_in_vm_backstop_fires_its_grace_past_the_deadline_rounded_up(timeout: float, seconds: int) -> None:
    # The replay takes this number as volatile (a session's cost ceiling makes it depend on timing), so it is
    # checked here: never before the deadline, and BACKSTOP_GRACE seconds past it at most a second more.
    line = shell_line(Command("python3", ("-c", "1"), timeout=timeout))
    assert f"( sleep {seconds + BACKSTOP_GRACE} & s=$!;" in line
    assert re.search(E2B.volatile[-1], line) is not None  # the pattern the replay treats as volatile


def test_every_create_key_is_one_e2bs_api_accepts() -> None:
    # The server's rule (profiles.E2B_IDEMPOTENCY_KEY, from the API's idempotency middleware), not the SDK's:
    # core's ids are run_<16 hex> and ses_<24 hex>, and "run-5d41..." was refused with a 400.
    for box_id in ("run_5d410ddcfccb12ac", "ses_335790250fecfc952b1da004", "RUN_X", "_", "a" * 300):
        key = idempotency_key(box_id)
        assert not E2B_IDEMPOTENCY_KEY.broken_by([key]), (box_id, key)
    assert idempotency_key("run_5d410ddcfccb12ac") != idempotency_key("ses_5d410ddcfccb12ac")
    creates = 0
    for path in sorted(HERE.rglob("cassettes/**/*.json")):
        for interaction in json.loads(path.read_text())["interactions"]:
            request = interaction["request"]
            if not E2B_IDEMPOTENCY_KEY.applies(request["method"], request["path"]):
                continue
            headers = {k.lower(): v for k, v in (request.get("headers") or {}).items()}
            value = headers.get("idempotency-key")
            assert value is not None and not E2B_IDEMPOTENCY_KEY.broken_by([value]), (path.name, value)
            creates += 1
    assert creates > 50


def test_the_replay_refuses_a_key_e2bs_api_refuses_as_the_api_does() -> None:
    # Through the real SDK, whose own check lets hyphens through: the API's 400, and the replay fails the test.
    # Then keys the SDK would stop itself, sent as raw HTTP: the replay holds them to the server's rule too.
    from e2b import AsyncSandbox
    from e2b.exceptions import SandboxException

    server = ReplayServer.replayer(E2B, HERE / "conformance" / "cassettes" / "TestRun" / "test_python_prints.json")
    server.start()
    try:
        with pytest.raises(SandboxException) as caught:
            asyncio.run(
                AsyncSandbox.create(
                    api_key=KEY,
                    api_url=server.url("api"),
                    sandbox_url=server.url("sandbox"),
                    idempotency_key="run-5d410ddcfccb12ac",
                )
            )
        refused = []
        bad: list[list[tuple[str, str]]] = [
            [("Idempotency-Key", "ABC")],
            [("Idempotency-Key", "")],
            [("Idempotency-Key", "a" * 256)],
            [("Idempotency-Key", "abc_123")],
            [("Idempotency-Key", "a"), ("Idempotency-Key", "a")],  # one value, not two
        ]
        for headers in bad:
            answer = httpx.post(f"{server.url('api')}/v2/sandboxes", headers=headers, json={"templateID": "base"})
            refused.append((answer.status_code, answer.json()["message"]))
    finally:
        server.stop()
    message = "Idempotency-Key must contain one value of 1 to 255 lowercase ASCII letters or digits"
    assert "400" in str(caught.value) and message in str(caught.value)
    assert refused == [(400, message)] * len(bad)
    problems = server.problems(final=False)
    assert len(problems) == 1 + len(bad)
    assert all("Idempotency-Key" in p and "idempotency/middleware.go" in p for p in problems)
    assert not E2B_IDEMPOTENCY_KEY.broken_by(None) and not E2B_IDEMPOTENCY_KEY.broken_by(["a" * 255])


def test_an_unreachable_api_is_0006_saying_to_check_e2bs_status_and_the_key() -> None:
    # A real loopback port that refuses: bound, never listening, so a connect gets ECONNREFUSED (and no other
    # process can take the port while the test runs).
    refusing = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    refusing.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{refusing.getsockname()[1]}"
    try:
        driver = e2b_sandbox_driver(api_key=KEY, api_url=url, sandbox_url=url)
        config = load_config_text("sandbox: {driver: e2b, limits: {timeout: 10s}}\n")
        sandbox = Sandbox(SandboxDeps(config=config, driver=driver))
        with pytest.raises(SandboxError) as caught:
            sandbox.run("print(1)")
        sandbox.close()
    finally:
        refusing.close()
    error = caught.value
    assert (error.code, error.status, error.retryable, error.ran) == (DRIVER_UNAVAILABLE, 503, True, False)
    assert "E2B could not create a sandbox: unreachable" in error.message
    assert "check E2B's status and the API key (sandbox.e2b.key" in error.message
    assert KEY not in error.message


def test_a_long_outage_reason_is_cut_between_words_and_after_the_key_is_redacted() -> None:
    # Issue 35: the reason was cut at 200 characters mid-word, and before the redaction: a key across the cut
    # would have left its first part in the message.
    driver = e2b_sandbox_driver(api_key=KEY)
    words = "abcdefghij " * 17  # 187 characters: the key starts before the 200th and ends after it
    error = driver._unavailable("create a sandbox", RuntimeError(words + KEY + " and more words after it"))
    reason = error.message.split("E2B could not create a sandbox: ", 1)[1].split("; check E2B", 1)[0]
    assert reason.endswith(" …"), reason
    assert all(word in ("abcdefghij", "[redacted]", "…", "RuntimeError:") for word in reason.split()[1:]), reason
    assert KEY[:8] not in error.message
