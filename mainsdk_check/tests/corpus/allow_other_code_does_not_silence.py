# expect: MAIN-SANDBOX-0010 line 5


def calculate(expression: str) -> object:
    return eval(expression)  # mainsdk: allow MAIN-SANDBOX-0012
