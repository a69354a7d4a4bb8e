# expect: none
from typing import Any


def describe(node: Any) -> str:
    return str(node.eval)
