"""The authoring stand-in (``authoring/fake_e2b.py``) on loopback, for tests of a rule a cassette cannot hold.

A replay answers as recorded, at once: it cannot be slower than loopback, or tell a refresh that keeps a later
end from a timeout that cuts it. These tests run the real e2b SDK against the stand-in itself, which enforces
those rules as E2B's sources state them (each cited there): a link's bandwidth (``STATE.uplink``,
``STATE.downlink``), the two calls that move a sandbox's end (``/timeout`` may shorten, ``/refreshes`` never
does), and the network rules each API release takes (``STATE.release``, ``STATE.max_rule_domains``). None of
them runs a command: a create, transfers, the lifetime calls, a kill. A helper module, as ``e2b_replay.py``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

AUTHORING = Path(__file__).parent / "authoring"
_served: dict[str, str] = {}


def fake_e2b() -> ModuleType:
    """The stand-in's module, loaded once by its path (it is a script of the authoring folder, not a package)."""
    if "fake_e2b" not in sys.modules:
        spec = importlib.util.spec_from_file_location("fake_e2b", AUTHORING / "fake_e2b.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["fake_e2b"] = module
        spec.loader.exec_module(module)
    return sys.modules["fake_e2b"]


@contextlib.contextmanager
def stand_in(**state: Any) -> Iterator[tuple[str, str, Any]]:
    """Serve the stand-in (once a process) with ``state`` set on its ``STATE`` for the block: (api, sandbox, STATE).

    Every sandbox the block left is killed after it, and the test fails on it: the driver must leave none.
    """
    module = fake_e2b()
    if not _served:
        _served["api"], _served["sandbox"] = module.serve()
    kept = {name: getattr(module.STATE, name) for name in state}
    for name, value in state.items():
        setattr(module.STATE, name, value)
    try:
        yield _served["api"], _served["sandbox"], module.STATE
    finally:
        for name, value in kept.items():
            setattr(module.STATE, name, value)
        left = list(module.STATE.boxes.values())
        for box in left:
            module.STATE.boxes.pop(box.id, None)
            box.kill()
    assert not left, f"the driver left sandboxes running: {[box.id for box in left]}"
