"""The code-runner action with ``session=True``: one interpreter per agent conversation, kept across calls.

Each conversation (``conversation=``, else the agent id) of each tenant gets its own session, opened on its
first call with the agent's remaining budget as its ``max_cost``; each call is one cell. A conversation
whose session closed (idle expiry, a kill) gets a new one on its next call, and the result says
``restarted``. ``close`` ends a conversation's session.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Protocol

from mainsdk import arguments
from mainsdk.cells import CellResult
from mainsdk.limits import Listener
from mainsdk.rich import rich_entry
from mainsdk.sessions import AsyncSession

DEFAULT_CONVERSATION = "default"


class SessionSandbox(Protocol):
    """What the conversations of an action use of its sandbox (``mainsdk.engine.AsyncSandbox`` is one)."""

    def create(
        self,
        *,
        feature: str | None = None,
        max_cost: object = None,
        network: Sequence[str] = (),
        egress: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Awaitable[AsyncSession]:
        """Open a session (``AsyncSandbox.create``)."""

    def tenant(self) -> str:
        """The current tenant (``AsyncSandbox.tenant``)."""


class ConversationSessions:
    """The open sessions of one action, by (tenant, conversation)."""

    def __init__(
        self,
        sandbox: SessionSandbox,
        feature: str,
        network: Sequence[str] = (),
        egress: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self._sandbox = sandbox
        self._feature = feature
        self._network = tuple(network)
        self._egress = egress
        self._sessions: dict[tuple[str, str], AsyncSession] = {}

    def _key(self, conversation: str | None, agent: str | None) -> tuple[str, str]:
        name = arguments.optional_text(conversation, "conversation") or agent or DEFAULT_CONVERSATION
        return self._sandbox.tenant(), name

    async def run_cell(
        self,
        code: str,
        files: dict[str, str],
        *,
        conversation: str | None,
        agent: str | None,
        max_cost: Decimal | None,
        limits: dict[str, Any] | None,
        on_output: Listener | None,
    ) -> tuple[CellResult, bool]:
        """Run ``code`` as the conversation's next cell; also whether its session is new after a closed one."""
        key = self._key(conversation, agent)
        session = self._sessions.get(key)
        restarted = False
        if session is None or session.closed:
            restarted = session is not None
            session = await self._sandbox.create(
                feature=self._feature, max_cost=max_cost, network=self._network, egress=self._egress
            )
            self._sessions[key] = session
        for path, text in files.items():
            await session.write(path, text)
        timeout = (limits or {}).get("timeout")
        return await session.run_code(code, timeout=timeout, on_output=on_output), restarted

    async def close(self, conversation: str | None = None, agent: str | None = None) -> None:
        """Close a conversation's session (its interpreter and files go with it)."""
        session = self._sessions.pop(self._key(conversation, agent), None)
        if session is not None:
            await session.close()


def cell_action_result(result: CellResult, restarted: bool) -> dict[str, Any]:
    """The JSON-able part of a cell an agent sees."""
    error = result.error
    return {
        "stdout": result.stdout,
        "stderr": result.stderr,
        "results": [rich_entry(r) for r in result.results],
        "error": None if error is None else {"name": error.name, "value": error.value, "traceback": error.traceback},
        "stop": result.stop,
        "state_kept": result.state_kept,
        "restarted": restarted or result.restarted,
        "cell": result.number,
        "cost": str(result.cost),
    }
