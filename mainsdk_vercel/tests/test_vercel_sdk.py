"""Our cassettes, replayed through Vercel's own v1 client (``vercel`` 0.5.9): our shapes are the shapes it speaks.

Each recorded request is made again by ``AsyncSandboxOpsClient`` pointed at the
strict replay server, with the arguments the recorded request carries. Replay
matches method, path, query (``teamId``) and body by value, so a request their
client builds differently from ours fails; every answer goes through their
pydantic models (``SandboxAndRoutesResponse``, ``CommandResponse``,
``CommandFinishedResponse``, ``LogLine``, ``SandboxResponse``), so an answer we
authored in a shape their client refuses fails too. Test only:
``pip install 'mainsdk-vercel[sdk-check]'``.
"""

from __future__ import annotations

import asyncio
import io
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest

# Vercel's client is a test-only extra (pip install 'mainsdk-vercel[sdk-check]', which tox installs):
# without it this module fails to import rather than skipping, so the check cannot silently not run.
import vercel._internal.http.transport as transport
import vercel._internal.sandbox.core as core
import vercel._internal.sandbox.errors as sandbox_errors
import vercel._internal.sandbox.models as models
from mainsdk_conformance.cassette import load, parse_targz
from mainsdk_conformance.profiles import VERCEL
from mainsdk_conformance.replay import ReplayServer
from mainsdk_vercel.driver import _targz

HERE = Path(__file__).parent
CASSETTES = HERE / "conformance" / "cassettes"
TEAM = "team_conformance"
TOKEN = "sdk-check-token-not-a-secret"
SANDBOX = re.compile(r"^/v1/sandboxes/([^/]+)")


def _plain(path: Path) -> bool:
    """A cassette their client can replay one request at a time: no faults, no answer held for a later request."""
    for interaction in load(path).interactions:
        response = interaction.get("response") or {}
        frames = (response.get("body") or {}).get("ndjson") or []
        if interaction.get("fault") or response.get("after") or any(f.get("after") for f in frames):
            return False
    return True


PLAIN = [p for p in sorted(CASSETTES.rglob("*.json")) if load(p).interactions and _plain(p)]


def test_most_cassettes_are_checked() -> None:
    assert len(PLAIN) >= 40


async def _send(client: Any, interaction: dict[str, Any]) -> None:
    """Make one recorded request with their client, and check its answer parses as their model."""
    request = interaction["request"]
    method, path = request["method"], request["path"]
    body = (request.get("body") or {}).get("json")
    status = (interaction.get("response") or {}).get("status", 200)
    match = SANDBOX.match(path)
    sandbox_id = match.group(1) if match else ""
    rest = path[len(match.group(0)) :] if match else ""
    if status >= 400:
        with pytest.raises(sandbox_errors.APIError) as caught:
            await _call(client, method, path, rest, sandbox_id, body, request)
        assert caught.value.response.status_code == status
        return
    answer = await _call(client, method, path, rest, sandbox_id, body, request)
    if rest == "/cmd":
        assert answer.command.id and answer.command.exit_code is None
    elif method == "GET" and rest.startswith("/cmd/") and not rest.endswith("/logs"):
        assert isinstance(answer.command.exit_code, int)  # CommandFinished: an int exit code is required


async def _call(
    client: Any, method: str, path: str, rest: str, sandbox_id: str, body: Any, request: dict[str, Any]
) -> Any:
    if path == "/v1/sandboxes" and method == "POST":
        policy = models.ApiNetworkPolicy.model_validate(body["networkPolicy"])
        answer = await client.create_sandbox(
            project_id=body["projectId"],
            runtime=body["runtime"],
            resources=models.Resources(vcpus=body["resources"]["vcpus"]),
            timeout=body["timeout"],
            network_policy=policy,
        )
        assert answer.sandbox.id
        return answer
    if rest == "/fs/write":
        # Their write_files makes no folder entries; ours does (work/, out/): send our archive through their client.
        members = parse_targz(_stored_targz(request))
        assert members is not None
        headers = {k.lower(): v for k, v in (request.get("headers") or {}).items()}
        return await client._request_client.request(
            "POST",
            path,
            headers={"x-cwd": headers["x-cwd"]},
            body=transport.BytesBody(_stored_targz(request), "application/gzip"),
        )
    if rest == "/fs/read":
        return await client.read_file(sandbox_id=sandbox_id, path=body["path"])
    if rest == "/cmd":
        return await client.run_command(
            sandbox_id=sandbox_id,
            command=body["command"],
            args=body["args"],
            cwd=body["cwd"],
            env=body["env"],
            sudo=body["sudo"],
        )
    if rest.endswith("/logs"):
        cmd_id = rest.split("/")[2]
        return [line async for line in client.get_logs(sandbox_id=sandbox_id, cmd_id=cmd_id)]
    if rest.endswith("/kill"):
        cmd_id = rest.split("/")[2]
        return await client.kill_command(sandbox_id=sandbox_id, command_id=cmd_id, signal=body["signal"])
    if rest.startswith("/cmd/") and method == "GET":
        query = dict(request.get("query") or [])
        return await client.get_command(
            sandbox_id=sandbox_id, cmd_id=rest.split("/")[2], wait=query.get("wait") == "true"
        )
    if rest == "/stop":
        return await client.stop_sandbox(sandbox_id=sandbox_id)
    if rest == "/extend-timeout":
        from datetime import timedelta

        return await client.extend_timeout(sandbox_id=sandbox_id, duration=timedelta(milliseconds=body["duration"]))
    raise AssertionError(f"no client call for {method} {path}")


def _stored_targz(request: dict[str, Any]) -> bytes:
    members = request["body"]["targz"]
    folders = [m["name"] for m in members if m["kind"] == "dir"]
    from mainsdk_conformance.cassette import decode_payload

    files = {m["name"]: decode_payload(m) for m in members if m["kind"] == "file"}
    return _targz(files, folders)


@pytest.mark.parametrize("path", PLAIN, ids=lambda p: str(p.relative_to(CASSETTES)))
def test_the_cassette_replays_through_vercels_client(path: Path) -> None:
    server = ReplayServer.replayer(VERCEL, path)
    server.start()

    async def main() -> None:
        async with core.AsyncSandboxOpsClient(host=server.url("api"), team_id=TEAM, token=TOKEN) as client:
            for interaction in server.cassette.interactions:
                await _send(client, interaction)

    try:
        asyncio.run(main())
    finally:
        server.stop()
    assert server.problems(final=True) == []


def test_their_archive_of_files_has_the_members_of_ours() -> None:
    files = {"work/a.txt": b"hello", "work/sub/b.bin": bytes(range(256))}
    theirs = core._build_tarball(
        [{"path": f"/vercel/sandbox/{name}", "content": data} for name, data in files.items()],
        "/vercel/sandbox",
        "/vercel/sandbox",
    )
    ours = _targz(files, ())

    def members(data: bytes) -> list[tuple[str, bytes]]:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            return sorted(
                (m.name, archive.extractfile(m).read())  # type: ignore[union-attr]
                for m in archive.getmembers()
            )

    assert members(theirs) == members(ours)
