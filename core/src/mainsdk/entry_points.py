"""Finding drivers, their config sections and plugins through entry points, without importing any of them.

Drivers live in the ``mainsdk.drivers`` group, one entry point per driver id
(the id ``main.yaml`` names), pointing at a factory that takes the parsed
``AppConfig`` and returns the driver plugin. Only the driver a sandbox uses is
imported (``mainsdk.plugins.load_driver``). Other plugins (audit sinks) live in
``mainsdk.plugins`` and are all loaded.

A driver declares its own ``sandbox.<name>:`` section in the ``mainsdk.driver_configs``
group: the entry point's name is the section's key, its object an attrs class (see
``mainsdk.config``). A section belongs to the driver of the same distribution.
"""

from __future__ import annotations

from importlib import metadata

import attrs

from mainsdk.errors import INVALID_OPTION, SandboxError

DRIVER_GROUP = "mainsdk.drivers"
PLUGIN_GROUP = "mainsdk.plugins"
DRIVER_CONFIG_GROUP = "mainsdk.driver_configs"

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


def _distribution(entry: metadata.EntryPoint) -> str | None:
    return entry.dist.name if entry.dist is not None else None


def config_section_names() -> list[str]:
    """The ``sandbox.<name>`` sections installed drivers declare, without importing any of them."""
    return sorted({entry.name for entry in metadata.entry_points(group=DRIVER_CONFIG_GROUP)})


def driver_section_name(driver_id: str) -> str | None:
    """The section the driver ``driver_id`` declares (from the same distribution), or None; imports nothing."""
    drivers = list(metadata.entry_points(group=DRIVER_GROUP, name=driver_id))
    if not drivers:
        return None
    owner = _distribution(drivers[0])
    for entry in metadata.entry_points(group=DRIVER_CONFIG_GROUP):
        if owner is not None and _distribution(entry) == owner:
            return entry.name
    return None


def load_config_section(name: str) -> type[attrs.AttrsInstance] | None:
    """Import the attrs class of the section ``sandbox.<name>``; None when no installed driver declares it."""
    matches = list(metadata.entry_points(group=DRIVER_CONFIG_GROUP, name=name))
    if not matches:
        return None
    entry = matches[0]
    try:
        cls = entry.load()
    except Exception as exc:  # an import failure names the section and its package
        raise SandboxError(
            INVALID_OPTION, f"the config section sandbox.{name} ({entry.value}) failed to import: {exc}"
        ) from exc
    if not (isinstance(cls, type) and attrs.has(cls)):
        raise SandboxError(
            INVALID_OPTION,
            f"the config section sandbox.{name} ({entry.value}) is not an attrs class; "
            "a driver declares its section as an @attrs.frozen class in the mainsdk.driver_configs entry point group",
        )
    return cls
