"""Loading the driver and the plugins, checking them, and the one boundary core calls every driver hook through.

The entry points are found by ``mainsdk.entry_points``; the hooks are specified in
``mainsdk.driver`` and ``mainsdk.hookspecs``.
"""

from __future__ import annotations

import difflib
import inspect
import logging
from collections.abc import Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, cast

import pluggy

from mainsdk import hookspecs
from mainsdk.config import AppConfig, resolve_credentials
from mainsdk.driver import PROJECT
from mainsdk.entry_points import (
    DRIVER_GROUP,
    KNOWN_DRIVER_PACKAGES,
    PLUGIN_GROUP,
    driver_section_name,
    installed_drivers,
    load_config_section,
)
from mainsdk.errors import DEFAULT_OUTAGE_REMEDY, DRIVER_UNAVAILABLE, INVALID_OPTION, SandboxError
from mainsdk.hookspecs import REQUIRED_DRIVER_HOOKS, SYNC_DRIVER_HOOKS
from mainsdk.secrets import SecretResolver, environment_secrets

if TYPE_CHECKING:
    from mainsdk.audit import AuditEvent
    from mainsdk.driver import (
        Box,
        BoxSpec,
        Capabilities,
        Collected,
        Command,
        ExecOutcome,
        Folder,
        FoundSnapshot,
        NetworkPolicy,
        OutputSink,
    )

log = logging.getLogger("mainsdk")


def load_driver(driver_id: str, config: AppConfig, *, secret: SecretResolver | None = None) -> object:
    """Import the driver ``driver_id`` through its entry point and build it from ``config``.

    The driver's own section (``sandbox.<name>``, declared in ``mainsdk.driver_configs``) reaches the
    factory checked, with its ``Credential`` fields (``key: secret:E2B_API_KEY``) resolved through
    ``secret``. A factory that takes a ``secret`` keyword also gets the resolver itself.
    """
    matches = list(metadata.entry_points(group=DRIVER_GROUP, name=driver_id))
    if not matches:
        ids = [d.id for d in installed_drivers()]
        installed = ", ".join(ids) or "none"
        package = KNOWN_DRIVER_PACKAGES.get(driver_id)
        fix = f"install {package} (pip install {package})" if package else "install the package that provides it"
        # A likely typo of a known driver (``lcoal``) says which one it means before anything about installing.
        close = difflib.get_close_matches(driver_id, [*dict.fromkeys([*ids, *KNOWN_DRIVER_PACKAGES])], n=1, cutoff=0.6)
        if close and not package:
            fix = f"did you mean {close[0]!r}?"
        raise SandboxError(
            INVALID_OPTION,
            f"sandbox.driver {driver_id!r} is not installed (installed drivers: {installed}); {fix}",
        )
    entry = matches[0]
    try:
        factory = entry.load()
    except Exception as exc:  # an import failure names the plugin, not just the missing module
        raise SandboxError(INVALID_OPTION, f"the {driver_id!r} driver ({entry.value}) failed to import: {exc}") from exc
    config = _with_credentials(driver_id, config, secret)
    if secret is not None and "secret" in inspect.signature(factory).parameters:
        return factory(config, secret=secret)
    return factory(config)


def _with_credentials(driver_id: str, config: AppConfig, secret: SecretResolver | None) -> AppConfig:
    """``config`` with the driver's own section checked and its ``Credential`` fields resolved, in one place.

    Every driver gets its ``secret:NAME`` settings looked up the same way: through the app's resolver
    (``SandboxDeps.secret``), else the environment.
    """
    name = driver_section_name(driver_id)
    cls = load_config_section(name) if name is not None else None
    if name is None or cls is None:
        return config
    return resolve_credentials(config, name, cls, secret or environment_secrets)


def make_plugin_manager(
    driver: object, *, plugins: Sequence[object] = (), load_entrypoints: bool = True
) -> pluggy.PluginManager:
    """A plugin manager holding one driver, the installed plugins and ``plugins``.

    A hook implementation whose name matches no hook is an error here, not silence.
    """
    check_driver(driver)
    pm = pluggy.PluginManager(PROJECT)
    hookspecs.add_hookspecs(pm)
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
    isolate_audit_sinks(pm)
    return pm


_HOOKIMPL_ATTRIBUTE = f"{PROJECT}_impl"  # where pluggy's HookimplMarker leaves its mark


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
    known = hookspecs.hook_specs()
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
            f"driver {name}: {', '.join(unknown)} is marked @hookimpl but is no hook of mainsdk "
            "(mainsdk.driver, mainsdk.hookspecs); check its spelling",
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
            "a driver implements every hook of mainsdk.driver.Driver, each marked @hookimpl "
            "(pass a driver plugin such as local_sandbox_driver(...), or None to load sandbox.driver)",
        )
    # An async def here returns a coroutine core never awaits: every run would fail on it, far from the cause.
    awaitable = [hook for hook in SYNC_DRIVER_HOOKS if _is_async(getattr(driver, hook, None))]
    if awaitable:
        raise SandboxError(
            INVALID_OPTION,
            f"driver {name}: {', '.join(awaitable)} is async def, but core calls it without awaiting (it returns "
            "its value at once); write it as a plain def",
        )


def _is_async(function: object) -> bool:
    return inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)


_ISOLATED = "_mainsdk_isolated_sink"


def isolate_audit_sinks(pm: pluggy.PluginManager) -> None:
    """Make each plain audit sink catch and log its own failure, so pluggy's call loop goes on to the next.

    The hook is then called as pluggy intends (``wrapper=True`` sinks run around the others); only a
    failing plain sink is contained: it neither stops the other sinks nor the run.
    """
    for impl in pm.hook.mainsdk_audit_event.get_hookimpls():
        if impl.wrapper or impl.hookwrapper or getattr(impl.function, _ISOLATED, False):
            continue
        # pluggy's call loop calls ``impl.function(*args)`` (HookImpl is public; ``function`` is Final only to
        # type checkers). Wrapping it here is what keeps a wrapper sink's view of a plain call; the tests
        # (tests/test_driver_contract.py) fail if a pluggy release changes that.
        impl.function = _isolated(impl.function, impl.plugin_name)  # type: ignore[misc]


def _isolated(function: Any, plugin_name: str) -> Any:
    def sink(*args: Any) -> None:
        try:
            function(*args)
        except Exception:
            log.exception("audit sink %s failed", plugin_name)

    setattr(sink, _ISOLATED, True)
    return sink


class DriverHookError(SandboxError):
    """A driver hook raised something other than ``SandboxError``: an outage (``MAIN-SANDBOX-0006``).

    ``driver`` and ``hook`` name where it came from; the driver's own exception is the ``__cause__``
    (kept for logs, never in the message: a provider's message may carry a URL, a token or a value).
    """

    def __init__(self, driver: str, hook: str, exc: BaseException, remedy: str) -> None:
        super().__init__(
            DRIVER_UNAVAILABLE,
            f"the {driver!r} driver failed in {hook} ({type(exc).__name__}); {remedy}",
        )
        self.driver = driver
        self.hook = hook


class Hooks:
    """Typed calls into the hooks of one plugin manager: the one boundary between core and a driver.

    Every driver hook is called through here. A ``SandboxError`` the driver raises passes through as it
    is; any other exception, from a synchronous hook (``capabilities``, ``network_policy``) or an async
    one, becomes ``DriverHookError`` (``MAIN-SANDBOX-0006``) naming the driver and the hook. The types
    of each hook's spec reach the caller.
    """

    def __init__(self, pm: pluggy.PluginManager, driver_id: str = "driver") -> None:
        self._hook = pm.hook
        self._driver_id = driver_id

    def _failed(self, hook: str, exc: Exception) -> DriverHookError:
        return DriverHookError(self._driver_id, hook, exc, self.outage_remedy())

    def _call(self, hook: str, **kwargs: Any) -> Any:
        """Call a synchronous hook (or start an async one) inside the boundary."""
        try:
            return getattr(self._hook, hook)(**kwargs)
        except SandboxError:
            raise
        except Exception as exc:
            raise self._failed(hook, exc) from exc

    async def _await(self, hook: str, **kwargs: Any) -> Any:
        """Call an async hook and await it inside the boundary."""
        try:
            result = getattr(self._hook, hook)(**kwargs)
            if not inspect.isawaitable(result):
                # A plain def where the spec says awaitable: a bug in the driver, not an outage to retry. Whether
                # the command ran is core's to judge for exec (it may have, synchronously); nothing else ran.
                raise SandboxError(
                    INVALID_OPTION,
                    f"the {self._driver_id!r} driver's {hook} returned {type(result).__name__}, not an awaitable; "
                    "write it as async def, as its spec in mainsdk.driver is",
                )
            return await result
        except SandboxError:
            raise
        except Exception as exc:
            raise self._failed(hook, exc) from exc

    def outage_remedy(self) -> str:
        """What the driver says to check when it fails (``Capabilities.outage_remedy``), or core's default."""
        try:
            return cast("Capabilities", self._hook.mainsdk_driver_capabilities()).outage_remedy
        except Exception:  # noqa: BLE001 - the driver cannot even say what it can do; the outage stands
            return DEFAULT_OUTAGE_REMEDY

    def capabilities(self) -> Capabilities:
        """The driver's capabilities."""
        return cast("Capabilities", self._call("mainsdk_driver_capabilities"))

    async def start(self, spec: BoxSpec) -> Box:
        """Start a box."""
        return cast("Box", await self._await("mainsdk_driver_start", spec=spec))

    async def exec(self, box: Box, command: Command, output: OutputSink) -> ExecOutcome:
        """Run a command in a box."""
        return cast("ExecOutcome", await self._await("mainsdk_driver_exec", box=box, command=command, output=output))

    def check(self, command: Command, spec: BoxSpec) -> None:
        """Let the driver refuse a command in the box ``spec`` plans before anything starts (an optional hook)."""
        self._call("mainsdk_driver_check", command=command, spec=spec)

    async def write_file(self, box: Box, folder: Folder, path: str, data: bytes) -> None:
        """Write a file into one of a box's folders."""
        self._require("mainsdk_driver_write_file")
        await self._await("mainsdk_driver_write_file", box=box, folder=folder, path=path, data=data)

    async def read_file(self, box: Box, folder: Folder, path: str) -> bytes:
        """Read a file from one of a box's folders."""
        self._require("mainsdk_driver_read_file")
        return cast(bytes, await self._await("mainsdk_driver_read_file", box=box, folder=folder, path=path))

    def _require(self, hook: str) -> None:
        if not getattr(self._hook, hook).get_hookimpls():
            message = f"the {self._driver_id!r} driver does not implement {hook}, which this call needs"
            raise SandboxError(INVALID_OPTION, message, ran=False)

    async def collect(self, box: Box, max_bytes: int) -> Collected:
        """Collect a box's out folder."""
        return cast("Collected", await self._await("mainsdk_driver_collect", box=box, max_bytes=max_bytes))

    async def reconnect(self, spec: BoxSpec) -> Box | None:
        """A session's box started by another process; None when the driver has no such hook or no such box."""
        if not self._hook.mainsdk_driver_reconnect.get_hookimpls():
            return None
        return cast("Box | None", await self._await("mainsdk_driver_reconnect", spec=spec))

    async def paused(self, box: Box) -> bool:
        """Whether a reconnected box is paused; False when the driver has no such hook."""
        if not self._hook.mainsdk_driver_paused.get_hookimpls():
            return False
        return await self._await("mainsdk_driver_paused", box=box) is True

    async def find_snapshot(self, snapshot_id: str, tenant: str) -> FoundSnapshot | None:
        """A snapshot of ``tenant`` another process made, where the driver reaches it; else None."""
        if not self._hook.mainsdk_driver_find_snapshot.get_hookimpls():
            return None
        found = await self._await("mainsdk_driver_find_snapshot", snapshot_id=snapshot_id, tenant=tenant)
        return cast("FoundSnapshot | None", found)

    async def kernel_site(self, box: Box, language: str) -> str | None:
        """The in-box folder of the cell kernel's packages for ``language``; None when the driver has no such hook."""
        if not self._hook.mainsdk_driver_kernel_site.get_hookimpls():
            return None
        site = await self._await("mainsdk_driver_kernel_site", box=box, language=language)
        return site if isinstance(site, str) else None

    async def snapshot(self, box: Box, snapshot_id: str, kind: str) -> float | None:
        """Keep a box's state as a snapshot; when it expires (epoch seconds) or None."""
        self._require("mainsdk_driver_snapshot")
        expires = await self._await("mainsdk_driver_snapshot", box=box, snapshot_id=snapshot_id, kind=kind)
        return float(expires) if isinstance(expires, (int, float)) and not isinstance(expires, bool) else None

    async def delete_snapshot(self, snapshot_id: str) -> None:
        """Forget a snapshot."""
        self._require("mainsdk_driver_delete_snapshot")
        await self._await("mainsdk_driver_delete_snapshot", snapshot_id=snapshot_id)

    async def pause(self, box: Box) -> None:
        """Pause a box."""
        self._require("mainsdk_driver_pause")
        await self._await("mainsdk_driver_pause", box=box)

    async def resume(self, box: Box) -> None:
        """Resume a paused box."""
        self._require("mainsdk_driver_resume")
        await self._await("mainsdk_driver_resume", box=box)

    async def stop(self, box: Box) -> None:
        """Stop a box."""
        await self._await("mainsdk_driver_stop", box=box)

    def network_policy(self, hosts: Sequence[str]) -> NetworkPolicy:
        """The driver's egress policy for ``hosts``: what core hands to its start hook and writes in the audit."""
        return cast("NetworkPolicy", self._call("mainsdk_network_policy", hosts=list(hosts)))

    def audit(self, event: AuditEvent, config: AppConfig) -> None:
        """Send an event to every audit sink, through pluggy's own call loop (wrappers run).

        Each sink was isolated when registered (``isolate_audit_sinks``): one failing sink neither
        stops the others nor the run.
        """
        try:
            self._hook.mainsdk_audit_event(event=event, config=config)
        except Exception:
            # A sink wrapper raised (plain sinks are isolated): the event stands, the run goes on.
            log.exception("an audit sink wrapper failed")

    def shutdown(self) -> None:
        """Let the driver release what it holds."""
        self._call("mainsdk_driver_shutdown")
