# expect: MAIN-SANDBOX-0010 line 6


def calculate(expression: str) -> object:
    evaluate = eval
    return evaluate(expression)
