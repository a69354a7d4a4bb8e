"""The data plane: sandboxd in a claimed pod, its gRPC ProcessService and its REST file API.

Both are agent-sandbox's (github kubernetes-sigs/agent-sandbox @ 2fd412d55ecae90861a101a5424a75473de97c36):
``packages/sandboxd/spec/process/v1/process.proto`` (``Start`` streams ``InitEvent``, ``stdout``/``stderr`` bytes,
``ExitEvent``; ``WriteStdin`` sends bytes or EOF; ``SendSignal`` signals the process group, ``-pid``, as
``pkg/processmanager/managed_process.go`` does) and ``packages/sandboxd/spec/filesystem/v1/filesystem.yaml``
(``PUT /v1/files/{path}`` writes atomically with its parents made, ``GET`` reads; paths under the root,
``/workspace``). The REST API goes directly to the pod or through the sandbox-router, which picks the pod from
the ``X-Sandbox-ID``, ``X-Sandbox-Namespace``, ``X-Sandbox-Port`` and ``X-Sandbox-Pod-IP`` headers
(``clients/python/agentic-sandbox-client/sandbox-router/sandbox_router.py``, ``_resolve_target``) and takes a bearer
token (``_check_router_auth``). The router is HTTP/1.1 (FastAPI and httpx): it cannot carry gRPC, so the
ProcessService is always reached directly (the python client's ``connector.py`` says the same).
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import quote

import attrs
import grpc
import grpc.aio
import httpx
from mainsdk.driver import DRIVER_UNAVAILABLE, NO_SESSION, SandboxError

from mainsdk_kubernetes._proto import process_pb2 as pb

START = "/process.v1.ProcessService/Start"
WRITE_STDIN = "/process.v1.ProcessService/WriteStdin"
SEND_SIGNAL = "/process.v1.ProcessService/SendSignal"
STDIN_CHUNK = 1024 * 1024  # under gRPC's default 4 MiB message limit
SIGKILL = pb.SIGNAL_SIGKILL


class StreamBroken(Exception):
    """A ``Start`` stream that ended without its ``ExitEvent`` (or began without its ``InitEvent``)."""


@attrs.frozen
class Route:
    """Where one pod's sandboxd is: its gRPC target, and its REST base URL with the headers it needs."""

    grpc_target: str
    rest_url: str
    headers: dict[str, str] = attrs.field(factory=dict, repr=False)  # the router token may be among them


class Process:
    """One ``Start`` stream: its process id once the ``InitEvent`` came, and its events."""

    def __init__(self, channel: grpc.aio.Channel, request: pb.StartRequest) -> None:
        start = channel.unary_stream(
            START,
            request_serializer=pb.StartRequest.SerializeToString,
            response_deserializer=pb.StartResponse.FromString,
        )
        self.call = start(request)
        self._events = self.call.__aiter__()
        self.channel = channel
        self.pid: int | None = None

    async def next(self) -> pb.StartResponse | None:
        """The stream's next event; None once it ended."""
        event = await anext(self._events, None)
        assert event is None or isinstance(event, pb.StartResponse)
        return event

    async def started(self) -> int:
        """Wait for the ``InitEvent``: the process id sandboxd gives it (its own id, not the OS pid)."""
        event = await self.next()
        if event is None or event.WhichOneof("event") != "init":
            raise StreamBroken("the stream did not begin with an InitEvent")
        self.pid = int(event.init.process_id)
        return self.pid

    async def write(self, data: bytes) -> None:
        """Send ``data`` to the process's stdin, in chunks under the message limit."""
        for at in range(0, len(data), STDIN_CHUNK):
            await self._stdin(pb.WriteStdinRequest(process_id=self.pid, input=data[at : at + STDIN_CHUNK]))

    async def close_stdin(self) -> None:
        """Send EOF."""
        from google.protobuf import empty_pb2

        await self._stdin(pb.WriteStdinRequest(process_id=self.pid, eof=empty_pb2.Empty()))

    async def _stdin(self, request: pb.WriteStdinRequest) -> None:
        write = self.channel.unary_unary(
            WRITE_STDIN,
            request_serializer=pb.WriteStdinRequest.SerializeToString,
            response_deserializer=pb.WriteStdinResponse.FromString,
        )
        await write(request)

    async def kill(self) -> None:
        """SIGKILL the process group; a process already gone (NOT_FOUND) or a pod gone is fine."""
        if self.pid is None:
            self.call.cancel()
            return
        signal = self.channel.unary_unary(
            SEND_SIGNAL,
            request_serializer=pb.SendSignalRequest.SerializeToString,
            response_deserializer=pb.SendSignalResponse.FromString,
        )
        with contextlib.suppress(grpc.aio.AioRpcError, TimeoutError):
            await asyncio.wait_for(signal(pb.SendSignalRequest(process_id=self.pid, signal=SIGKILL)), 10.0)


class Sandboxd:
    """The sandboxd of one pod: a gRPC channel and an HTTP client, closed together."""

    def __init__(self, route: Route, http: httpx.AsyncClient) -> None:
        self.route = route
        self.channel = grpc.aio.insecure_channel(route.grpc_target)
        self.http = http

    def start(self, command: list[str], env: dict[str, str], cwd: str | None = None) -> Process:
        """Start ``command`` (a program and its arguments, never a shell line) with ``env`` over sandboxd's own."""
        config = pb.ProcessConfig(command=command, env_vars=env, cwd=cwd)
        return Process(self.channel, pb.StartRequest(config=config))

    def _url(self, path: str) -> str:
        return f"{self.route.rest_url}/v1/files/{quote(path, safe='/')}"

    async def put(self, path: str, data: bytes) -> None:
        """Write ``path`` (under the root) atomically, its folders made."""
        try:
            answer = await self.http.put(
                self._url(path),
                content=data,
                headers={**self.route.headers, "Content-Type": "application/octet-stream"},
            )
        except httpx.HTTPError as exc:
            raise SandboxError(DRIVER_UNAVAILABLE, "sandboxd: a file write did not get through") from exc
        if answer.status_code != 204:
            raise _rest_error("write", answer)

    async def get(self, path: str) -> bytes:
        """Read ``path``: its bytes; missing, a folder or refused is ``NO_SESSION``."""
        try:
            answer = await self.http.get(self._url(path), headers=self.route.headers)
        except httpx.HTTPError as exc:
            raise SandboxError(DRIVER_UNAVAILABLE, "sandboxd: a file read did not get through") from exc
        if answer.status_code != 200:
            raise _rest_error("read", answer)
        if answer.headers.get("content-type", "").startswith("application/json"):
            raise SandboxError(NO_SESSION, "sandboxd: that path is a folder, not a file", status=404)
        return answer.content

    async def close(self) -> None:
        """Close the channel (the HTTP client is the driver's)."""
        await self.channel.close(None)


def _rest_error(what: str, answer: httpx.Response) -> SandboxError:
    if answer.status_code in (403, 404, 400):
        return SandboxError(NO_SESSION, f"sandboxd: no such file to {what} ({answer.status_code})", status=404)
    return SandboxError(DRIVER_UNAVAILABLE, f"sandboxd: a file {what} was answered {answer.status_code}")
