# expect: none
from .code import InteractiveInterpreter


def run(source: str) -> object:
    return InteractiveInterpreter().runsource(source)
