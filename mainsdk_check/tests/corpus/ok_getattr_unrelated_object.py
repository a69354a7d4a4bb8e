# expect: none
from typing import Any


def call(obj: Any, expression: str) -> Any:
    return getattr(obj, "eval")(expression)  # noqa: B009
