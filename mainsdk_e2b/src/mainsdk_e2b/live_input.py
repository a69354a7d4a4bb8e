"""A command's live stdin (``Command.input``): its first bytes, each chunk the app sends, then EOF, over envd."""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
from mainsdk.driver import Command

from mainsdk_e2b.box import E2BBox, in_turn, raise_if_cancelled
from mainsdk_e2b.lifetime import SANDBOX_MARGIN, Lifetimes
from mainsdk_e2b.provider import ProviderErrors


@attrs.frozen
class LiveInput:
    """Feeds one command's input, in the box's turn, keeping the sandbox alive as a write does."""

    lifetimes: Lifetimes
    provider: ProviderErrors
    request_timeout: float

    async def feed(self, box: E2BBox, pid: int, command: Command, ended: asyncio.Future[Any]) -> None:
        """Deliver a command's live stdin until EOF or its end: ``Command.stdin``, each chunk the app sends, EOF.

        One envd ``SendInput`` per chunk, in order, each in the box's turn; ``CloseStdin`` when the app closes
        the stream (envd 0.5.2+, e2b-dev/infra ``packages/envd/internal/services/process/input.go``). envd
        refuses input to a process started without stdin, or whose stdin is closed (``handler.go``
        ``WriteStdin``): the driver starts such a command with ``stdin: true``. A chunk the command can no longer
        take is dropped. It runs in the exec's own task, so a cancel (core closes the stream and cancels the
        kernel's exec at once) stops it before it sends anything more: no EOF races the killer.
        """
        assert command.input is not None
        chunks = aiter(command.input)
        pending = [command.stdin] if command.stdin else []
        getter: asyncio.Future[bytes | None] | None = None
        try:
            # The command ended (or envd is gone): the rest is dropped.
            with self.provider.best_effort("deliver a command's input; what follows is dropped", box):
                while True:
                    for data in pending:
                        await self._send(box, pid, data)
                        raise_if_cancelled()
                    getter = asyncio.ensure_future(anext(chunks, None))
                    done, _ = await asyncio.wait({getter, ended}, return_when=asyncio.FIRST_COMPLETED)
                    if getter not in done:
                        return  # the command ended: what the app sends now is dropped
                    chunk, getter = getter.result(), None
                    if chunk is None:
                        break
                    pending = [chunk]
                with await in_turn(box):
                    raise_if_cancelled()
                    await box.sandbox.commands.close_stdin(pid, request_timeout=self.request_timeout)
        finally:
            if getter is not None and not getter.done():
                getter.cancel()

    async def _send(self, box: E2BBox, pid: int, data: bytes) -> None:
        # Input may start up to a command's timeout of work (a cell), then idle time: as a write does.
        with await in_turn(box):
            self.lifetimes.check_cap(box)
            await self.lifetimes.keep_alive(box, box.lifetime - SANDBOX_MARGIN, self.provider)
            await box.sandbox.commands.send_stdin(pid, data, request_timeout=self.request_timeout)
