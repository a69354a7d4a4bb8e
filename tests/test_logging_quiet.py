"""The library prints nothing to the app's stderr unless the app configures logging (a NullHandler on ``mainsdk``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A real refused host: the run is given api.example.test (resolved to loopback for the proxy alone) and asks
# the proxy for evil.example.test, which it refuses and logs as a warning on the ``mainsdk`` logger.
REFUSED_HOST_APP = textwrap.dedent(
    """
    import logging
    from mainsdk import Sandbox, SandboxDeps
    from mainsdk.config import load_config_text
    from mainsdk_local import local_sandbox_driver

    config = load_config_text(
        "sandbox:\\n  network: [api.example.test]\\n"
        "network:\\n  allow: [api.example.test, evil.example.test]\\n"
        "permissions:\\n  processes: [python3]\\n"
    )
    driver = local_sandbox_driver(permissions=config.permissions, resolve={"api.example.test": "127.0.0.1"})
    sandbox = Sandbox(SandboxDeps(config=config, driver=driver, load_entrypoints=False))
    code = (
        "import urllib.request\\n"
        "try:\\n    urllib.request.urlopen('http://evil.example.test/', timeout=5)\\n"
        "except Exception:\\n    print('refused')\\n"
    )
    result = sandbox.run(code, network=["api.example.test"])
    sandbox.close()
    print(result.stdout.strip(), list(result.hosts_refused))
    # Our loggers and the drivers' (children of ``mainsdk``) at the levels the last-resort handler shows.
    for name in ("mainsdk", "mainsdk.audit", "mainsdk.e2b", "mainsdk.vercel"):
        logging.getLogger(name).warning("a warning from %s", name)
        logging.getLogger(name).error("an error from %s", name)
    """
)


def run_app(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)


def test_a_refused_host_and_other_warnings_print_nothing_without_logging_configured() -> None:
    done = run_app(REFUSED_HOST_APP)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "refused ['evil.example.test']\n"
    assert done.stderr == ""


def test_an_app_that_configures_logging_still_sees_the_warnings() -> None:
    done = run_app("import logging; logging.basicConfig()\n" + REFUSED_HOST_APP)
    assert done.returncode == 0, done.stderr
    assert "evil.example.test" in done.stderr and "a warning from mainsdk.e2b" in done.stderr
