# expect: MAIN-SANDBOX-0010 line 6
import builtins


def calculate(expression: str) -> object:
    return builtins.eval(expression)
