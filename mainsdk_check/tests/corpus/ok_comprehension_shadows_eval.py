# expect: none
from collections.abc import Callable


def apply(functions: list[Callable[[str], object]], text: str) -> list[object]:
    return [eval(text) for eval in functions]
