"""The ``local`` driver of mainsdk sandbox: Linux namespaces, cgroups and an empty root, for development and tests."""

from mainsdk_local.driver import LocalDriver, driver_from_config, local_sandbox_driver

__all__ = ["LocalDriver", "driver_from_config", "local_sandbox_driver"]
