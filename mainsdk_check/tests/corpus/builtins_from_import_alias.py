# expect: MAIN-SANDBOX-0010 line 6
from builtins import eval as evaluate


def calculate(expression: str) -> object:
    return evaluate(expression)
