"""The pluggy hooks of mainsdk sandbox.

Drivers implement the ``mainsdk_driver_*`` hooks and ``mainsdk_network_policy``;
exactly one driver is registered with a sandbox's plugin manager, so each of
these is ``firstresult``. Audit sinks implement ``mainsdk_audit_event``; every
sink is called. Driver hooks return awaitables: core awaits them, so one
implementation serves the sync and the async API.

Hooks are called with keyword arguments only, and an implementation may take
fewer arguments than its spec: a spec can grow without breaking plugins.

The same hooks as types, for mypy to check a driver's signatures against, are
``mainsdk.driver.Driver`` (the required ones, which core checks for when a
driver is registered) and ``SessionDriver`` (with the two file hooks).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from mainsdk.audit import AuditEvent
    from mainsdk.config import AppConfig
    from mainsdk.driver import (
        Box,
        BoxSpec,
        Capabilities,
        Collected,
        Command,
        ExecOutcome,
        Folder,
        NetworkPolicy,
        OutputSink,
    )

PROJECT = "mainsdk"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec(firstresult=True)
def mainsdk_driver_capabilities() -> Capabilities:
    """Say what the driver can do. Called by core before every run, so it may probe lazily."""
    raise NotImplementedError


@hookspec(firstresult=True)
def mainsdk_driver_start(spec: BoxSpec) -> Awaitable[Box]:
    """Start a box with ``spec.files`` in its work folder and ``spec.network_policy`` in force.

    Raise ``SandboxError(DRIVER_UNAVAILABLE)`` when the backend cannot be reached.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def mainsdk_driver_check(command: Command, spec: BoxSpec) -> None:
    """Refuse ``command`` before anything starts, by raising ``SandboxError`` (optional hook).

    Called for every run before its box starts, and for every session command and
    cell before it is sent, so a refusal (a program the config does not permit is
    ``MAIN-SANDBOX-0001``) is audited as ``refused`` and nothing runs. ``spec`` is
    the plan of the box the command runs in: for a run, the box about to start
    (limits, files, hosts, the egress policy, packages); for a session, its box as
    it was started. A driver may refuse on either; it may also take ``command`` alone.
    """


@hookspec(firstresult=True)
def mainsdk_driver_exec(box: Box, command: Command, output: OutputSink) -> Awaitable[ExecOutcome]:
    """Run ``command`` in ``box``, sending its output to ``output`` as it arrives.

    The driver enforces ``command.timeout`` and reports ``stop="timeout"`` (and
    ``"memory"`` when it killed the code at its memory limit). When the awaiting
    task is cancelled, the driver kills the command's whole process tree before
    re-raising: core cancels to enforce the output limit and its own deadline.
    A command must never be sent twice.

    Core judges every error escaping this hook as raised after the command may
    have been sent (``SandboxError.ran=None``, not retryable). Steps before the
    send (creating a backend box, uploading stdin) go through
    ``mainsdk.errors.before_command``, which says nothing ran, so an outage there
    stays retryable.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def mainsdk_driver_reconnect(spec: BoxSpec) -> Awaitable[Box | None]:
    """The running box of session ``spec.id`` that another process started, if it belongs to ``spec.tenant``.

    Called by ``sandbox.get(id)`` for a session this process does not hold
    (a web app's other worker). Return None when there is no such running
    box, or it is another tenant's: core then answers ``MAIN-SANDBOX-0008``,
    the same as for an unknown id. ``spec`` carries the id, the tenant and
    the limits of the ``main.yaml`` defaults, which the reconnected session
    uses (never more than the config allows). A driver without this hook
    keeps its sessions to the process that made them.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def mainsdk_driver_write_file(box: Box, folder: Folder, path: str, data: bytes) -> Awaitable[None]:
    """Write ``data`` to ``path`` in ``folder`` (``Folder.WORK`` or ``Folder.OUT``).

    ``path`` is relative to that folder and already checked by core: no leading ``/``, no empty, ``.`` or
    ``..`` segment, no NUL. Folders on the way are made; a file there is replaced, never written through.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def mainsdk_driver_read_file(box: Box, folder: Folder, path: str) -> Awaitable[bytes]:
    """Read ``path`` in ``folder`` (relative to it, checked by core as for ``write_file``).

    A path that is missing or not a regular file raises ``SandboxError(NO_SESSION)`` (404), not an outage.
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def mainsdk_driver_collect(box: Box, max_bytes: int) -> Awaitable[Collected]:
    """Return the regular files of the out folder, at most ``max_bytes`` in all, never following links."""
    raise NotImplementedError


@hookspec(firstresult=True)
def mainsdk_driver_stop(box: Box) -> Awaitable[None]:
    """Stop the box and remove everything it held. Called always, also after errors and cancels."""
    raise NotImplementedError


@hookspec(firstresult=True)
def mainsdk_network_policy(hosts: Sequence[str]) -> NetworkPolicy:
    """Translate the hosts a run may reach into the backend's egress policy (no hosts: nothing out).

    Core calls it once per run and per session, at the end of its plan, shows the result to the
    driver's check (``spec.network_policy`` of ``mainsdk_driver_check``), hands it to
    ``mainsdk_driver_start`` as ``spec.network_policy`` and copies it into the run's audit event, so
    an auditor sees what the backend was asked to enforce. The start hook enforces exactly that
    policy, never one recomputed from ``spec.hosts``. Return plain JSON-able data holding no secret.
    """
    raise NotImplementedError


@hookspec
def mainsdk_audit_event(event: AuditEvent, config: AppConfig) -> None:
    """Record one audit event. Called once per run, per session command or cell, and per refused call.

    ``config`` is the app config, for sinks that read their settings from it (read them once per
    config, not on every event). The event never holds code, output or secret values. The hook is
    called as pluggy calls any hook, so a ``wrapper=True`` sink runs around the others. A sink must
    not raise; if a plain one does, core logs the failure and the other sinks and the run go on.
    """


@hookspec
def mainsdk_driver_shutdown() -> None:
    """Release what the driver holds for the whole process (helper processes, clients). May be called twice."""
