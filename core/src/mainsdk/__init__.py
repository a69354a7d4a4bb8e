"""mainsdk sandbox: run code nobody reviewed outside your app's process.

``sandbox`` and ``async_sandbox`` are built from ``main.yaml`` on first use;
``Sandbox`` / ``AsyncSandbox`` take explicit ``SandboxDeps`` for tests and
custom wiring.
"""

import logging

from mainsdk.background import AsyncProcess
from mainsdk.cells import CellError, CellResult
from mainsdk.checkpoints import Snapshot
from mainsdk.config import AppConfig, SandboxConfig, load_config, parse_app_config, parse_sandbox_config
from mainsdk.default import async_sandbox, sandbox
from mainsdk.driver import Capabilities, NetworkReach
from mainsdk.engine import AsyncSandbox, SandboxDeps
from mainsdk.errors import ConfigError, SandboxError
from mainsdk.files import FileRef
from mainsdk.interpreters import AsyncInterpreter
from mainsdk.lifecycle import RunResult
from mainsdk.rich import Display, RichResult
from mainsdk.secrets import SecretRef, secret
from mainsdk.session_runtime import CommandResult
from mainsdk.sessions import AsyncSession
from mainsdk.sync import Interpreter, Process, Sandbox, Session, create_sandbox

# The one place the version is written: every distribution's pyproject reads it (hatch's dynamic version).
__version__ = "0.4.0"

# A library never prints to the app's stderr on its own: with no logging configured, Python's last-resort
# handler would show our warnings (a refused host, a driver that failed to stop). The app decides.
logging.getLogger("mainsdk").addHandler(logging.NullHandler())

__all__ = [
    "AppConfig",
    "AsyncInterpreter",
    "AsyncProcess",
    "AsyncSandbox",
    "AsyncSession",
    "Capabilities",
    "CellError",
    "CellResult",
    "CommandResult",
    "ConfigError",
    "Display",
    "FileRef",
    "Interpreter",
    "NetworkReach",
    "Process",
    "RichResult",
    "RunResult",
    "Sandbox",
    "SandboxConfig",
    "SandboxDeps",
    "SandboxError",
    "SecretRef",
    "Session",
    "Snapshot",
    "__version__",
    "async_sandbox",
    "create_sandbox",
    "load_config",
    "parse_app_config",
    "parse_sandbox_config",
    "sandbox",
    "secret",
]
