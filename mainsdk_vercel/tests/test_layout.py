"""The driver's shape: no class over 500 lines, and one boundary where provider errors become the driver's.

The boundary is ``VercelApi.errors`` (``_api.py``), as httpx maps httpcore's exceptions in one context manager
(``map_httpcore_exceptions``): every request and stream passes through it, and no other code of the driver
catches an httpx exception (nor a bare ``Exception``), so a failure is mapped one way wherever it happens.
"""

from __future__ import annotations

import ast
from pathlib import Path

import httpx
import pytest
from mainsdk_vercel._api import VercelApi, VercelError

SOURCE = Path(__file__).parent.parent / "src" / "mainsdk_vercel"
MAX_CLASS_LINES = 500


def _trees() -> dict[str, ast.Module]:
    return {path.name: ast.parse(path.read_text()) for path in sorted(SOURCE.glob("*.py"))}


def test_no_class_of_the_driver_is_over_500_lines() -> None:
    sizes = {
        f"{name}:{node.name}": (node.end_lineno or node.lineno) - node.lineno + 1
        for name, tree in _trees().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    }
    assert sizes and {cls: size for cls, size in sizes.items() if size > MAX_CLASS_LINES} == {}


def _caught(handler: ast.ExceptHandler) -> list[str]:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return [ast.unparse(kind) for kind in kinds if kind is not None] or ["<bare>"]


def test_httpx_failures_are_caught_in_one_place() -> None:
    sites = [
        f"{name} {kind}"
        for name, tree in _trees().items()
        for handler in ast.walk(tree)
        if isinstance(handler, ast.ExceptHandler)
        for kind in _caught(handler)
        if kind.startswith("httpx.") or kind in ("Exception", "BaseException", "<bare>")
    ]
    # The boundary's own handlers, and the create's cleanup (which stops the sandbox and re-raises as it was).
    assert sites == ["_api.py httpx.TransportError", "driver.py BaseException"]


@pytest.mark.parametrize(
    ("raised", "cause"),
    [
        (httpx.ConnectError("refused"), "network: ConnectError"),
        (httpx.ReadError("reset"), "network: ReadError"),
    ],
)
def test_the_boundary_makes_a_network_failure_a_broken_0006_without_the_token(raised: Exception, cause: str) -> None:
    api = VercelApi(token="vcp_secret_value", team=None, base_url="http://127.0.0.1:9", client=None)
    with pytest.raises(VercelError) as caught, api.errors("cmd"):
        raise raised
    error = caught.value
    assert (error.code, error.retryable, error.broken, error.vercel_status) == ("MAIN-SANDBOX-0006", True, True, None)
    assert cause in error.message and "vcp_secret_value" not in error.message


def test_the_boundary_lets_vercels_own_answer_through_as_it_is() -> None:
    api = VercelApi(token="t", team=None, base_url="http://127.0.0.1:9", client=None)
    answer = api.error("cmd", 410, b'{"error": {"code": "sandbox_stopped", "message": "Sandbox is stopped"}}')
    with pytest.raises(VercelError) as caught, api.errors("cmd"):
        raise answer
    assert caught.value is answer and not answer.broken
