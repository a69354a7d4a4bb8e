"""``sandbox.action``: a code-runner an agent can call, with the sandbox's guarantees.

The action takes ``{code, language, files?}``, checks it against its JSON
Schema, asks the app's approval rule (``deps.access``) with its risk, makes sure
the agent's budget (``deps.agents``) covers the worst case, runs the code and
charges what it cost. It presents itself as a tool for the Anthropic and OpenAI
tool-calling formats, and ``mainsdk sandbox mcp`` serves it over MCP.
"""

from __future__ import annotations

import contextlib
import math
import mimetypes
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal, Protocol

from mainsdk import arguments, errors
from mainsdk.action_cells import ConversationSessions, SessionSandbox, cell_action_result
from mainsdk.config import AppConfig
from mainsdk.driver import LANGUAGES
from mainsdk.egress import check_shape as check_egress
from mainsdk.errors import SandboxError
from mainsdk.files import AsyncFiles, FileRef
from mainsdk.hosts import host_covered
from mainsdk.languages import run_language
from mainsdk.lifecycle import RunResult
from mainsdk.limits import Listener
from mainsdk.rich import rich_entry

Risk = Literal["read", "write", "destructive"]
APPROVAL_DENIED = "MAIN-ACCESS-0001"
_TOOL_NAME = re.compile(r"[^a-zA-Z0-9_-]")


class AgentBudget(Protocol):
    """What ``deps.agents`` provides: an agent's remaining budget, and charging it."""

    def remaining(self, agent: str | None) -> Decimal | None:
        """Dollars the agent may still spend; None for no limit."""

    def charge(self, agent: str | None, amount: Decimal) -> None:
        """Count ``amount`` against the agent's budget."""


class AccessRule(Protocol):
    """What ``deps.access`` provides: whether a call of an action of this risk may go ahead."""

    def approve(self, action: str, risk: str, input: Mapping[str, Any], agent: str | None) -> bool:
        """True to let the call run."""


class ActionDeps(Protocol):
    """What an action reads of its sandbox's deps (``SandboxDeps``): the budget and the approval rule."""

    @property
    def agents(self) -> AgentBudget | None:
        """The agents' budget, or None."""

    @property
    def access(self) -> AccessRule | None:
        """The approval rule, or None."""


class ActionSandbox(SessionSandbox, Protocol):
    """What an action uses of its sandbox: ``AsyncSandbox`` is one, and the action needs no more of it."""

    @property
    def deps(self) -> ActionDeps:
        """The sandbox's deps."""

    @property
    def config(self) -> AppConfig:
        """The sandbox's config."""

    @property
    def files(self) -> AsyncFiles:
        """The sandbox's FileRefs."""

    async def run(
        self,
        code: str,
        language: str = "python",
        *,
        files: Mapping[str, str | bytes] | None = None,
        feature: str | None = None,
        limits: Mapping[str, Any] | None = None,
        max_cost: object = None,
        on_output: Listener | None = None,
        network: Sequence[str] = (),
        egress: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> RunResult:
        """Run code in a new box (``AsyncSandbox.run``)."""


@arguments.checked_calls("action")
class CodeRunAction:
    """A code-runner action. Call ``await action.arun(input)`` (or ``action.run(input)`` from sync code)."""

    def __init__(
        self,
        sandbox: ActionSandbox,
        *,
        name: str,
        intent: str,
        languages: Sequence[str],
        risk: Risk = "write",
        feature: str | None = None,
        session: bool = False,
        network: Sequence[str] = (),
        egress: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        name = arguments.text(name, "name", max_bytes=arguments.MAX_LABEL_CHARS)
        session = arguments.boolean(session, "session")
        intent = arguments.text(intent, "intent", max_bytes=4096)
        feature = arguments.optional_text(feature, "feature")
        if isinstance(languages, (str, bytes)) or not isinstance(languages, Sequence):
            raise arguments.invalid(
                "languages", f"must be a list like ['python'], not {arguments.type_name(languages)}"
            )
        if not languages:
            raise SandboxError(errors.INVALID_OPTION, f"action {name!r}: languages must be some of {list(LANGUAGES)}")
        # Any name or alias (mainsdk.languages), kept by the run's name: ["js"] is ["node"].
        languages = list(dict.fromkeys(run_language(lang, f"action {name!r}: languages") for lang in languages))
        if not isinstance(risk, str) or risk not in ("read", "write", "destructive"):
            raise SandboxError(errors.INVALID_OPTION, f"action {name!r}: risk must be read, write or destructive")
        self.name = name
        self.intent = intent
        self.languages = tuple(languages)
        self.risk = risk
        self.feature = feature or name
        self.sandbox = sandbox  # what it runs in (an MCP server opens its kept session there)
        self.session = session
        # What every run of the action is given: hosts (checked at each run, as a call's) and headers set at the
        # egress for them, whose values the code never sees (``mainsdk.egress``).
        self.network = arguments.hosts(network, "network")
        # An egress host outside the action's own network would be refused at every run: refuse it once, here.
        for host in check_egress(egress):
            if not host_covered(host, self.network):
                raise SandboxError(
                    errors.HOST_NOT_ALLOWED,
                    f"action {name!r}: egress host {host!r} is not in its network={list(self.network)!r}; add it "
                    "to network=[...] (and to sandbox.network and network.allow), or drop it from egress",
                )
        self.egress = egress
        self._conversations: ConversationSessions | None = None
        if session:
            if self.languages != ("python",):
                raise SandboxError(
                    errors.INVALID_OPTION,
                    f"action {name!r}: session=True keeps a Python interpreter; languages must be ['python']",
                )
            self._conversations = ConversationSessions(sandbox, self.feature, self.network, egress)

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the input."""
        return {
            "type": "object",
            "properties": {
                "code": {"type": "string", "minLength": 1, "description": "The source code to run."},
                # The names a model is offered; an alias of one (js, py) is taken too (check_input).
                "language": {"type": "string", "enum": list(self.languages), "default": self.languages[0]},
                "files": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "Files to put in the working folder, by relative path.",
                },
                "timeout": {
                    "type": ["number", "string"],
                    "description": "A time limit for this run, in seconds or like '5s'; it can only lower the "
                    "configured limit.",
                },
            },
            "required": ["code"],
            "additionalProperties": False,
        }

    @property
    def description(self) -> str:
        """What the tool does, for a model."""
        reach = f"reaching only {', '.join(self.network)}" if self.network else "with no network"
        keys = ""
        if self.egress:
            keys = f" (requests to {', '.join(self.egress)} are authenticated for you: send them without credentials)"
        return (
            f"{self.intent}. Runs {', '.join(self.languages)} code in an isolated sandbox {reach}{keys} and "
            "no secrets; files passed in are in the working folder, files written to ../out/ come back as files."
        )

    def tool_name(self) -> str:
        """The name in tool-calling formats, which allow only letters, digits, _ and - (``code.run`` → ``code_run``)."""
        return _TOOL_NAME.sub("_", self.name)[:64]

    def anthropic_tool(self) -> dict[str, Any]:
        """The action as an Anthropic Messages API tool definition."""
        return {"name": self.tool_name(), "description": self.description, "input_schema": self.input_schema}

    def openai_tool(self) -> dict[str, Any]:
        """The action as an OpenAI Chat Completions tool definition."""
        return {
            "type": "function",
            "function": {"name": self.tool_name(), "description": self.description, "parameters": self.input_schema},
        }

    def check_input(self, input: object) -> tuple[str, str, dict[str, str]]:
        """The input's code, language and files, or MAIN-SANDBOX-0001 saying what is wrong."""
        if not isinstance(input, Mapping):
            raise SandboxError(errors.INVALID_OPTION, f"{self.name}: input must be an object with code and language")
        extra = {str(key) for key in input} - {"code", "language", "files", "timeout"}
        if extra:
            raise SandboxError(
                errors.INVALID_OPTION, f"{self.name}: unknown input {sorted(extra)}; use code, language, files, timeout"
            )
        code = input.get("code")
        if not isinstance(code, str) or not code.strip():
            raise SandboxError(errors.INVALID_OPTION, f"{self.name}: code must be a non-empty string")
        language = input.get("language", self.languages[0])
        with contextlib.suppress(SandboxError):
            language = run_language(language)  # "js" is "node"; a name no language has is refused just below
        if not isinstance(language, str) or language not in self.languages:
            raise SandboxError(
                errors.INVALID_OPTION,
                f"{self.name}: language {language!r} is not allowed for this action; use one of {list(self.languages)}",
            )
        files = input.get("files") or {}
        if not isinstance(files, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()
        ):
            raise SandboxError(errors.INVALID_OPTION, f"{self.name}: files must map relative paths to text")
        # Every path at once, before anything is written: a session writes the files one by one, and a path
        # that is both a file and a folder ({"a": ..., "a/b": ...}) is a mistake, refused as the one-shot run does.
        arguments.files(files, f"{self.name}: files")
        return code, str(language), dict(files)

    def input_limits(self, input: Mapping[str, Any]) -> dict[str, Any] | None:
        """The run's limits from the input: its ``timeout``, which may only lower the configured one."""
        timeout = input.get("timeout")
        if timeout is None:
            return None
        finite = not isinstance(timeout, float) or math.isfinite(timeout)  # NaN is no number of seconds ("nans")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float, str)) or not finite:
            raise SandboxError(errors.INVALID_OPTION, f"{self.name}: timeout must be seconds or a duration like '5s'")
        return {"timeout": f"{timeout}s" if isinstance(timeout, (int, float)) else timeout}

    async def arun(
        self,
        input: Mapping[str, Any],
        *,
        agent: str | None = None,
        on_output: Listener | None = None,
        conversation: str | None = None,
    ) -> dict[str, Any]:
        """Run the input in the sandbox; return a JSON-able result (stdout, stderr, exit code, signal, stop, files).

        ``on_output`` sees the redacted output as it arrives, as in ``sandbox.run``. With ``session=True``
        the code is the next cell of the conversation's interpreter (``conversation``, else ``agent``; see
        ``mainsdk.action_cells``) and the result has ``results``, ``error``, ``state_kept`` and ``restarted``.
        """
        code, language, files = self.check_input(input)
        agent = arguments.optional_text(agent, "agent")
        limits = self.input_limits(input)
        deps = self.sandbox.deps
        access: AccessRule | None = deps.access
        if access is not None and not access.approve(self.name, self.risk, input, agent):
            raise SandboxError(
                APPROVAL_DENIED, f"{self.name}: the app's approval rule refused this {self.risk} action", status=403
            )
        budget: AgentBudget | None = deps.agents
        max_cost = budget.remaining(agent) if budget is not None else None
        ceiling = self.sandbox.config.sandbox.limits.max_cost
        if max_cost is not None and ceiling is not None:
            max_cost = min(max_cost, ceiling)  # the budget may be larger than one run is allowed to cost
        if self._conversations is not None:
            cell, restarted = await self._conversations.run_cell(
                code,
                files,
                conversation=conversation,
                agent=agent,
                max_cost=max_cost,
                limits=limits,
                on_output=on_output,
            )
            if budget is not None:
                budget.charge(agent, cell.cost)
            return cell_action_result(cell, restarted)
        result = await self.sandbox.run(
            code,
            language,
            files=files,
            feature=self.feature,
            max_cost=max_cost,
            limits=limits,
            on_output=on_output,
            network=self.network,
            egress=self.egress,
        )
        if budget is not None:
            budget.charge(agent, result.cost)
        return action_result(result)

    async def aclose(self, conversation: str | None = None, *, agent: str | None = None) -> None:
        """With ``session=True``: close the conversation's session (``conversation``, else ``agent``'s)."""
        if self._conversations is not None:
            await self._conversations.close(conversation, agent)

    async def aread(self, file_id: str) -> bytes:
        """The bytes of an out file a run of this action returned (``result["files"][i]["id"]``).

        Read from the sandbox's file store for the current tenant; ``MAIN-SANDBOX-0008`` for an id it does not own.
        """
        return await self.sandbox.files.read(file_id)


def file_entry(ref: FileRef) -> dict[str, Any]:
    """An out file as an agent's result lists it: its FileRef, and its MIME type guessed from the name."""
    mime = mimetypes.guess_type(ref.name, strict=False)[0] or "application/octet-stream"
    return {"id": ref.id, "name": ref.name, "size": ref.size, "sha256": ref.sha256, "mime": mime}


def action_result(result: RunResult) -> dict[str, Any]:
    """The JSON-able part of a run an agent sees."""
    return {
        "stdout": result.stdout,
        "stderr": result.stderr,
        "exit_code": result.exit_code,
        "signal": result.signal,
        "stop": result.stop,
        "files": [file_entry(f) for f in result.files],
        "files_dropped": list(result.files_dropped),
        "results": [rich_entry(r) for r in result.results],
        "cost": str(result.cost),
    }
