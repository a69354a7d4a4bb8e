"""Finding drivers and plugins through entry points, and the plugin manager of a sandbox.

Drivers live in the ``mainsdk.drivers`` group, one entry point per driver id
(the id ``main.yaml`` names), pointing at a factory that takes the parsed
``AppConfig`` and returns the driver plugin. Only the driver a sandbox uses is
imported. Other plugins (audit sinks) live in ``mainsdk.plugins`` and are all
loaded.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, cast

import attrs
import pluggy

from mainsdk import hookspecs
from mainsdk.errors import INVALID_OPTION, SandboxError

if TYPE_CHECKING:
    from mainsdk.audit import AuditEvent
    from mainsdk.config import AppConfig
    from mainsdk.driver import Box, BoxSpec, Capabilities, Collected, Command, ExecOutcome, OutputSink
    from mainsdk.secrets import SecretResolver

log = logging.getLogger("mainsdk")

DRIVER_GROUP = "mainsdk.drivers"
PLUGIN_GROUP = "mainsdk.plugins"

# Where our own drivers come from, for the "install it" hint.
KNOWN_DRIVER_PACKAGES = {"local": "mainsdk-local", "e2b": "mainsdk-e2b", "vercel-sandbox": "mainsdk-vercel"}


@attrs.frozen
class InstalledDriver:
    """A driver found through its entry point (not imported)."""

    id: str
    distribution: str
    version: str
    target: str


def installed_drivers() -> list[InstalledDriver]:
    """The drivers installed in this environment, by id, without importing any of them."""
    found = []
    for ep in metadata.entry_points(group=DRIVER_GROUP):
        dist = ep.dist
        found.append(InstalledDriver(ep.name, dist.name if dist else "?", dist.version if dist else "?", ep.value))
    return sorted(found, key=lambda d: d.id)


def load_driver(driver_id: str, config: AppConfig, *, secret: SecretResolver | None = None) -> object:
    """Import the driver ``driver_id`` through its entry point and build it from ``config``.

    A factory that takes a ``secret`` keyword gets the app's secret resolver, for its own credentials
    (``sandbox.e2b.key: secret:E2B_API_KEY``); one that does not is called with the config alone.
    """
    matches = list(metadata.entry_points(group=DRIVER_GROUP, name=driver_id))
    if not matches:
        installed = ", ".join(d.id for d in installed_drivers()) or "none"
        package = KNOWN_DRIVER_PACKAGES.get(driver_id)
        fix = f"install {package} (pip install {package})" if package else "install the package that provides it"
        raise SandboxError(
            INVALID_OPTION,
            f"sandbox.driver {driver_id!r} is not installed (installed drivers: {installed}); {fix}",
        )
    entry = matches[0]
    try:
        factory = entry.load()
    except Exception as exc:  # an import failure names the plugin, not just the missing module
        raise SandboxError(INVALID_OPTION, f"the {driver_id!r} driver ({entry.value}) failed to import: {exc}") from exc
    if secret is not None and "secret" in inspect.signature(factory).parameters:
        return factory(config, secret=secret)
    return factory(config)


def make_plugin_manager(
    driver: object, *, plugins: Sequence[object] = (), load_entrypoints: bool = True
) -> pluggy.PluginManager:
    """A plugin manager holding one driver, the installed plugins and ``plugins``.

    A hook implementation whose name matches no hook is an error here, not silence.
    """
    check_driver(driver)
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(driver, name="driver")
    if load_entrypoints:
        for entry in metadata.entry_points(group=PLUGIN_GROUP):
            if pm.get_plugin(entry.name) is not None or pm.is_blocked(entry.name):
                continue
            try:
                plugin = entry.load()
            except Exception as exc:
                raise SandboxError(
                    INVALID_OPTION, f"the plugin {entry.name!r} ({entry.value}) failed to import: {exc}"
                ) from exc
            pm.register(plugin, name=entry.name)
    for plugin in plugins:
        pm.register(plugin)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise SandboxError(INVALID_OPTION, f"plugin {exc.plugin!r} has a hook that does not exist: {exc}") from exc
    return pm


# The hooks every driver implements; the others are optional (sessions need write_file and read_file).
REQUIRED_DRIVER_HOOKS = (
    "mainsdk_driver_capabilities",
    "mainsdk_driver_start",
    "mainsdk_driver_exec",
    "mainsdk_driver_collect",
    "mainsdk_driver_stop",
)
_HOOKIMPL_ATTRIBUTE = f"{hookspecs.PROJECT}_impl"  # where pluggy's HookimplMarker leaves its mark


def check_driver(driver: object) -> None:
    """Refuse a driver that lacks a required hook, or has a ``mainsdk_*`` method not marked ``@hookimpl``.

    Checked when the driver is registered, so a driver that cannot work is a load-time error
    naming the driver and the hook, never a run-time outage (``MAIN-SANDBOX-0006``) on every run.
    """
    name = getattr(driver, "__name__", None) or type(driver).__name__
    unmarked = sorted(
        attribute
        for attribute in dir(driver)
        if attribute.startswith("mainsdk_")
        and callable(getattr(driver, attribute, None))
        and not hasattr(getattr(driver, attribute), _HOOKIMPL_ATTRIBUTE)
    )
    known = {hook for hook in dir(hookspecs) if hook.startswith("mainsdk_")}
    unknown = sorted(
        attribute
        for attribute in dir(driver)
        if attribute.startswith("mainsdk_")
        and attribute not in known
        and hasattr(getattr(driver, attribute, None), _HOOKIMPL_ATTRIBUTE)
    )
    if unknown:
        raise SandboxError(
            INVALID_OPTION,
            f"driver {name}: {', '.join(unknown)} is marked @hookimpl but is no hook of mainsdk.hookspecs; "
            "check its spelling",
        )
    if unmarked:
        raise SandboxError(
            INVALID_OPTION,
            f"driver {name}: {', '.join(unmarked)} is not marked as a hook; decorate it with @hookimpl "
            "(from mainsdk.hookspecs import hookimpl), or rename it if it is not one",
        )
    missing = [hook for hook in REQUIRED_DRIVER_HOOKS if not callable(getattr(driver, hook, None))]
    if missing:
        raise SandboxError(
            INVALID_OPTION,
            f"driver {name} lacks the required hook{'s' if len(missing) > 1 else ''} {', '.join(missing)}; "
            "a driver implements every hook in mainsdk.hookspecs.REQUIRED_DRIVER_HOOKS, each marked @hookimpl "
            "(pass a driver plugin such as local_sandbox_driver(...), or None to load sandbox.driver)",
        )


class Hooks:
    """Typed calls into the hooks of one plugin manager, so call sites are checked."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self._hook = pm.hook

    def capabilities(self) -> Capabilities:
        """The driver's capabilities."""
        return cast("Capabilities", self._hook.mainsdk_driver_capabilities())

    def start(self, spec: BoxSpec) -> Awaitable[Box]:
        """Start a box."""
        return cast("Awaitable[Box]", self._hook.mainsdk_driver_start(spec=spec))

    def exec(self, box: Box, command: Command, output: OutputSink) -> Awaitable[ExecOutcome]:
        """Run a command in a box."""
        return cast("Awaitable[ExecOutcome]", self._hook.mainsdk_driver_exec(box=box, command=command, output=output))

    def check(self, command: Command) -> None:
        """Let the driver refuse a command before anything starts (an optional hook)."""
        self._hook.mainsdk_driver_check(command=command)

    def write_file(self, box: Box, path: str, data: bytes) -> Awaitable[None]:
        """Write a file into a box's work folder."""
        self._require("mainsdk_driver_write_file")
        return cast("Awaitable[None]", self._hook.mainsdk_driver_write_file(box=box, path=path, data=data))

    def read_file(self, box: Box, path: str) -> Awaitable[bytes]:
        """Read a file from a box."""
        self._require("mainsdk_driver_read_file")
        return cast("Awaitable[bytes]", self._hook.mainsdk_driver_read_file(box=box, path=path))

    def _require(self, hook: str) -> None:
        if not getattr(self._hook, hook).get_hookimpls():
            raise SandboxError(INVALID_OPTION, f"the driver does not implement {hook}, which sessions need", ran=False)

    def collect(self, box: Box, max_bytes: int) -> Awaitable[Collected]:
        """Collect a box's out folder."""
        return cast("Awaitable[Collected]", self._hook.mainsdk_driver_collect(box=box, max_bytes=max_bytes))

    def reconnect(self, spec: BoxSpec) -> Awaitable[Box | None] | None:
        """A session's box started by another process; None when the driver has no such hook."""
        return cast("Awaitable[Box | None] | None", self._hook.mainsdk_driver_reconnect(spec=spec))

    def stop(self, box: Box) -> Awaitable[None]:
        """Stop a box."""
        return cast("Awaitable[None]", self._hook.mainsdk_driver_stop(box=box))

    def network_policy(self, hosts: Sequence[str]) -> Any:
        """The driver's egress policy for ``hosts``."""
        return self._hook.mainsdk_network_policy(hosts=list(hosts))

    def audit(self, event: AuditEvent, config: AppConfig) -> None:
        """Send an event to every audit sink; one failing sink neither stops the others nor the run."""
        args = {"event": event, "config": config}
        for impl in self._hook.mainsdk_audit_event.get_hookimpls():
            try:
                impl.function(*(args[name] for name in impl.argnames))
            except Exception:
                log.exception("audit sink %s failed", impl.plugin_name)

    def shutdown(self) -> None:
        """Let the driver release what it holds."""
        self._hook.mainsdk_driver_shutdown()
