"""The requests to a running sandbox: commands (run, stream, follow, stdin, kill) and files (write, read).

Every command is ``cmd?wait=true&logs=true`` under ``WRAPPER``, as vercel-sandbox 0.10.0's ``run_process``
runs one: the command, its log lines, the command again with its exit code, in one NDJSON stream; a stream
that breaks after the command started is followed (its logs, then its wait), never sent again. No ``cwd`` is
sent: a command starts in the image's WORKDIR, as the official clients' do (they send one only when their
caller gives it); the wrapper goes to the driver's folder itself.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import attrs
import httpx
from mainsdk.driver import NO_SESSION, InputStream, OutputSink, SandboxError

from mainsdk_vercel._api import NotFound, VercelApi, VercelError
from mainsdk_vercel._archive import UPLOAD_CWD, upload
from mainsdk_vercel._box import ROOT, SESSIONS, VercelBox

log = logging.getLogger("mainsdk.vercel")
LOG_RECONNECTS = 3
PROGRAMS = {"python": "python3", "python3": "python3", "node": "node", "bash": "bash"}
SIGTERM = 15
CAPTURE_LIMIT = 64 * 1024  # bytes kept of each stream of the driver's own commands (probe, install)
# Bytes per stdin write: vercel-sandbox 0.10.0 sends 512 KiB, "keeping the base64 JSON body under the API's 1 MB
# limit" (_internal/process_stdin.py, STDIN_CHUNK_SIZE). The code the API answers a stdin it cannot take with.
STDIN_CHUNK = 512 * 1024
STDIN_GONE = "command_stdin_unavailable"

# Every command runs under this fixed script, started in the image's WORKDIR: it makes the driver's folders
# (``_box.ROOT``: no managed image has them) and goes to work/. The script (no caller text is ever spliced into
# it; everything comes as arguments): the code in its own session and process group (``setsid``), so that its
# whole tree can be killed by group. Vercel's kill reaches one process (the command's, ``cmd/{id}/kill``); the
# driver sends it SIGTERM, which the script traps to SIGKILL the code's group. When the code exits, whatever it left in
# its group is killed too, and in a one-shot run the out folder is archived (``tar`` stores links as links,
# never following them) so one read brings every out file back. Its exit status is the code's (128 + N for
# signal N, the shell's convention).
# Bash itself adds PWD, OLDPWD, SHLVL and _ to what its children get; ``env -u`` takes back those the caller did
# not give, so the code's environment holds only what was given (plus the image's own: with header transforms,
# the variables Vercel sets so every client trusts its firewall's CA, SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
# NODE_EXTRA_CA_CERTS and the like, which the code needs and this script keeps). The script's own tools
# are found with ``command -p`` (the system's default PATH), so a PATH given to the code cannot replace them.
# A stdin file (a cell interpreter's token, long code) is opened, then removed before the code starts: the code
# reads it on its stdin, and nothing in the box can read it from the disk afterwards. A stdin of "-" is the
# command's own live stdin (``attachStdin``), which only the app writes (``cmd/{id}/stdin``).
#   $0 root, $1 stdin file or "-", $2 archive path or "", $3 the names to take back, then the program and its arguments
WRAPPER = (
    'root=$0 stdin=$1 archive=$2 drop=; for n in $3; do drop="$drop -u $n"; done; shift 3\n'
    "trap 'kill -KILL -- -$! 2>/dev/null || kill -KILL $! 2>/dev/null; exit 143' TERM\n"
    'command -p mkdir -p "$root/work" "$root/out" "$root/.mainsdk" 2>/dev/null\n'
    'cd "$root/work" || { echo "mainsdk: cannot make $root/work: the image user may not write there" >&2; exit 125; }\n'
    'case $stdin in -) exec 3<&0;; *) exec 3<"$stdin" || exit 125;; esac\n'
    'case $stdin in "$root"/.mainsdk/stdin-*) command -p rm -f -- "$stdin";; esac\n'
    'command -p setsid "$(command -pv env)" $drop "$@" <&3 3<&- &\n'
    "exec 3<&-\n"
    "wait $!; rc=$?\n"
    "kill -KILL -- -$! 2>/dev/null\n"
    'if [ -n "$archive" ]; then command -p tar -czf "$archive" -C "$root/out" . 2>/dev/null; fi\n'
    "exit $rc\n"
)
# The out folder archived on its own, when the command did not get to it (a timeout, a cancel, the output limit).
ARCHIVE_ONLY = 'command -p tar -czf "$1" -C "$0/out" . 2>/dev/null; exit 0'


class Capture:
    """A command's output, kept (up to ``CAPTURE_LIMIT`` bytes a stream) for the driver's own commands."""

    def __init__(self) -> None:
        self._kept = {"stdout": bytearray(), "stderr": bytearray()}

    def _take(self, stream: str, data: bytes) -> None:
        kept = self._kept[stream]
        kept += data[: max(CAPTURE_LIMIT - len(kept), 0)]

    def stdout(self, data: bytes) -> None:
        """Take stdout."""
        self._take("stdout", data)

    def stderr(self, data: bytes) -> None:
        """Take stderr."""
        self._take("stderr", data)

    def host_refused(self, host: str) -> None:
        """Not reported for the driver's own commands."""

    def text(self, stream: str) -> str:
        """What ``stream`` said, as text."""
        return bytes(self._kept[stream]).decode("utf-8", "replace")


@attrs.define
class Run:
    """What a command's stream told so far: its id, and its exit code once it ended."""

    cmd_id: str | None = None
    exit_code: int | None = None
    started: Callable[[], None] | None = None  # called once Vercel named the command (it runs)


class SessionApi:
    """A sandbox session's commands and files, through ``api``; ``stop`` ends a sandbox a command got away in."""

    def __init__(self, api: VercelApi, stop: Callable[[VercelBox], Awaitable[None]]) -> None:
        self._api = api
        self._stop = stop

    async def run(
        self,
        box: VercelBox,
        program: str,
        args: list[str],
        env: dict[str, str],
        run: Run,
        output: OutputSink | None,
        stdin: bool = False,
    ) -> None:
        """Run a command and stream its output until it exits, in one request (``cmd?wait=true&logs=true``).

        The answer is NDJSON: the command, its log lines, then the command with
        its ``exitCode`` (vercel-sandbox 0.10.0, ``SandboxApiClient.run_process``).
        If the stream breaks after the command started, it is followed with its
        logs and its wait, never sent again; ``run`` tells the caller what is known.
        """
        body = {
            "command": program,
            "args": args,
            "env": env,
            "sudo": False,
            "wait": True,
            "logs": True,
        }
        if stdin:
            body["attachStdin"] = True  # a live stdin, written with cmd/{id}/stdin (vercel-sandbox 0.10.0 run_process)
        delivered = {"stdout": 0, "stderr": 0}
        seen = {"stdout": 0, "stderr": 0}
        try:
            async with self._api.stream(
                "POST",
                f"{SESSIONS}/{box.session_id}/cmd",
                "cmd",
                json_body=body,
                query={"wait": "true", "logs": "true"},
            ) as answer:
                async for entry in _ndjson(answer):
                    if "command" in entry:
                        command = entry.get("command") or {}
                        if run.cmd_id is None:
                            run.cmd_id = str(command.get("id") or "") or None
                            if run.cmd_id is None:
                                raise self._api.error("cmd", None, cause="the answer names no command id")
                            if run.started is not None:
                                run.started()
                        else:
                            run.exit_code = _exit_code(command, self._api)
                        continue
                    self._deliver(entry, output, seen, delivered)
        except VercelError as exc:
            # A break mid-stream after the command started is followed below; anything else is the answer.
            if run.cmd_id is None or not exc.broken:
                raise
        if run.exit_code is not None:
            return
        if run.cmd_id is None:
            raise self._api.error("cmd", None, cause="the stream ended before the command started")
        # Started, but the stream ended early: follow it, as vercel-sandbox's run_process does (RunProcessInterrupted).
        await self._follow_logs(box, run.cmd_id, output, delivered)
        run.exit_code = await self._wait(box, run.cmd_id)

    async def feed(
        self, box: VercelBox, cmd_id: str, first: bytes | None, chunks: InputStream, ending: Callable[[], bool]
    ) -> None:
        """Write a running command's live stdin: ``first`` (``Command.stdin``), each chunk as it comes, then close.

        ``POST .../cmd/{cmdId}/stdin`` {data (base64), offset, close} (docs "Write to command stdin";
        vercel-sandbox 0.10.0 ``api_client.write_command_stdin``): one write at a time, in order, each at
        most ``STDIN_CHUNK`` bytes, each carrying its ``offset`` so a resend after a 5xx, a 504 (the command
        not reading within 30 s) or a broken connection skips what the command already has. A command that
        ended or closed its stdin (400 ``command_stdin_unavailable``, 404) takes nothing more: the rest is
        dropped, as ``InputStream`` says; so is all of it once the command is being ended (``ending``).
        """
        offset = 0
        path = f"{SESSIONS}/{box.session_id}/cmd/{cmd_id}/stdin"

        async def write(data: bytes, close: bool = False) -> bool:
            nonlocal offset
            body: dict[str, Any] = {"offset": offset}
            if data:
                body["data"] = base64.b64encode(data).decode("ascii")
            if close:
                body["close"] = True
            try:
                async with box.sending:  # in the order of the sandbox's other requests
                    answer = await self._api.json("POST", path, "stdin", json_body=body, idempotent=True)
            except VercelError as exc:
                if exc.vercel_status == 404 or (exc.vercel_status == 400 and exc.vercel_code == STDIN_GONE):
                    return False
                raise
            written = answer.get("bytesWritten") if isinstance(answer, dict) else None
            offset = written if isinstance(written, int) else offset + len(data)
            return True

        try:
            if first and not await self._write_chunks(write, first):
                return
            async for chunk in chunks:
                if ending() or not await self._write_chunks(write, chunk):
                    return
            if not ending():
                await write(b"", close=True)
        except SandboxError as exc:
            # The command runs on without its input; its own end (or its timeout) reports the run.
            log.warning("could not write the stdin of a Vercel command: %s", exc.message)

    @staticmethod
    async def _write_chunks(write: Callable[[bytes], Awaitable[bool]], data: bytes) -> bool:
        for start in range(0, len(data), STDIN_CHUNK):
            if not await write(data[start : start + STDIN_CHUNK]):
                return False
        return True

    def _deliver(
        self, entry: dict[str, Any], output: OutputSink | None, seen: dict[str, int], delivered: dict[str, int]
    ) -> None:
        """One log line to ``output``, skipping what an earlier connection already delivered (Vercel replays)."""
        stream = entry.get("stream")
        if stream == "error":
            detail = entry.get("data") or {}
            raise self._api.error("logs", None, cause=f"{detail.get('code')}: {detail.get('message')}")
        if stream not in ("stdout", "stderr"):
            return
        data = str(entry.get("data", "")).encode("utf-8")
        start = seen[stream]
        seen[stream] += len(data)
        fresh = data[max(delivered[stream] - start, 0) :]
        if fresh and output is not None:
            delivered[stream] += len(fresh)
            (output.stdout if stream == "stdout" else output.stderr)(fresh)
        elif fresh:
            delivered[stream] += len(fresh)

    async def _follow_logs(
        self, box: VercelBox, cmd_id: str, output: OutputSink | None, delivered: dict[str, int]
    ) -> None:
        """Read a started command's logs until it ends; reconnect when the stream breaks (replayed from the start)."""
        path = f"{SESSIONS}/{box.session_id}/cmd/{cmd_id}/logs"
        for attempt in range(LOG_RECONNECTS + 1):
            seen = {"stdout": 0, "stderr": 0}
            try:
                async with self._api.stream("GET", path, "logs") as answer:
                    async for entry in _ndjson(answer):
                        self._deliver(entry, output, seen, delivered)
                return
            except VercelError as exc:
                # A break, or a network failure to reach the stream, is retried; an answer from Vercel is not.
                if not exc.broken or attempt == LOG_RECONNECTS:
                    raise

    async def _wait(self, box: VercelBox, cmd_id: str) -> int:
        answer = await self._api.json(
            "GET",
            f"{SESSIONS}/{box.session_id}/cmd/{cmd_id}",
            "cmd wait",
            query={"wait": "true"},
            idempotent=True,
        )
        return _exit_code(answer.get("command") if isinstance(answer, dict) else None, self._api)

    async def kill(self, box: VercelBox, cmd_id: str | None) -> None:
        """Kill a command's whole tree: SIGTERM to its wrapper, which SIGKILLs the code's group; else stop the box."""
        if box.gone or box.session_id is None:
            return
        if cmd_id is None:
            # The command request got no answer: it may run, and has no id to kill by. Only stopping reaches it.
            await self._stop(box)
            return
        try:
            await self._api.request(
                "POST",
                f"{SESSIONS}/{box.session_id}/cmd/{cmd_id}/kill",
                "kill",
                json_body={"signal": SIGTERM},
                idempotent=True,
            )
        except SandboxError:
            # The command could not be killed: stop the sandbox rather than leave it running.
            await self._stop(box)

    async def write(self, box: VercelBox, files: Mapping[str, bytes], level: int = 9) -> None:
        """Write files (paths relative to ``ROOT``) as one gzipped tar of their absolute names, extracted at ``/``.

        As the official clients write (``_archive.upload``): the folders the names need are made by the
        extraction, so nothing assumes ``ROOT`` is there.
        """
        await self._api.request(
            "POST",
            f"{SESSIONS}/{box.session_id}/fs/write",
            "fs/write",
            content=upload({f"{ROOT}/{name}": data for name, data in files.items()}, level),
            headers={"content-type": "application/gzip", "x-cwd": UPLOAD_CWD},
            idempotent=True,  # the same bytes to the same paths
        )

    async def read(self, box: VercelBox, path: str, shown: str) -> bytes:
        try:
            answer = await self._api.request(
                "POST", f"{SESSIONS}/{box.session_id}/fs/read", "fs/read", json_body={"path": path}, idempotent=True
            )
        except NotFound:
            raise SandboxError(NO_SESSION, f"no file {shown!r} in the box", status=404, retryable=False) from None
        return answer.content

    async def read_capped(self, box: VercelBox, path: str, cap: int) -> bytes:
        """A file's first ``cap`` bytes (an out archive can be as large as the code made it)."""
        chunks: list[bytes] = []
        size = 0
        async with self._api.stream(
            "POST", f"{SESSIONS}/{box.session_id}/fs/read", "fs/read", json_body={"path": path}
        ) as answer:
            async for chunk in answer.aiter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size >= cap:
                    break
        return b"".join(chunks)[:cap]


def bash_added(env: Mapping[str, str]) -> str:
    """The variables bash adds that the caller did not give, for the wrapper to take back (fixed names only)."""
    return " ".join(name for name in ("OLDPWD", "PWD", "SHLVL", "_") if name not in env)


async def _ndjson(answer: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of an NDJSON answer, one per non-empty line."""
    async for line in answer.aiter_lines():
        if line.strip():
            entry = json.loads(line)
            if isinstance(entry, dict):
                yield entry


def _exit_code(command: Any, api: VercelApi) -> int:
    try:
        return int(command["exitCode"])
    except (KeyError, TypeError, ValueError):
        raise api.error("cmd", None, cause="the answer has no exitCode") from None
