"""The ``e2b`` driver of mainsdk sandbox: code runs in E2B microVMs, through the official ``e2b`` SDK."""

from mainsdk_e2b.driver import (
    E2BDriver,
    driver_from_config,
    e2b_network_policy,
    e2b_sandbox_driver,
    estimate_price,
)

__all__ = ["E2BDriver", "driver_from_config", "e2b_network_policy", "e2b_sandbox_driver", "estimate_price"]
