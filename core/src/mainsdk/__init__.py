"""mainsdk sandbox: run code nobody reviewed outside your app's process.

``sandbox`` and ``async_sandbox`` are built from ``main.yaml`` on first use;
``Sandbox`` / ``AsyncSandbox`` take explicit ``SandboxDeps`` for tests and
custom wiring.
"""

from mainsdk.config import AppConfig, SandboxConfig, load_config, parse_app_config, parse_sandbox_config
from mainsdk.default import async_sandbox, sandbox
from mainsdk.driver import Capabilities, NetworkReach
from mainsdk.engine import AsyncSandbox, RunResult, SandboxDeps
from mainsdk.errors import ConfigError, SandboxError
from mainsdk.files import FileRef
from mainsdk.secrets import SecretRef, secret
from mainsdk.sessions import AsyncSession, CommandResult
from mainsdk.sync import Sandbox, Session, create_sandbox

__all__ = [
    "AppConfig",
    "AsyncSandbox",
    "AsyncSession",
    "Capabilities",
    "CommandResult",
    "ConfigError",
    "FileRef",
    "NetworkReach",
    "RunResult",
    "Sandbox",
    "SandboxConfig",
    "SandboxDeps",
    "SandboxError",
    "SecretRef",
    "Session",
    "async_sandbox",
    "create_sandbox",
    "load_config",
    "parse_app_config",
    "parse_sandbox_config",
    "sandbox",
    "secret",
]
