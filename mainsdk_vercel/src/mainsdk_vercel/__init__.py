"""mainsdk-vercel: the ``vercel-sandbox`` driver of mainsdk sandbox (Vercel Sandbox microVMs: v3 create, v2 API)."""

from mainsdk_vercel.driver import (
    VercelDriver,
    default_price,
    driver_from_config,
    vercel_network_policy,
    vercel_sandbox_driver,
)

__all__ = ["VercelDriver", "default_price", "driver_from_config", "vercel_network_policy", "vercel_sandbox_driver"]
