# expect: MAIN-SANDBOX-0010 line 6
import importlib


def calculate(expression: str) -> object:
    return importlib.import_module("builtins").eval(expression)
