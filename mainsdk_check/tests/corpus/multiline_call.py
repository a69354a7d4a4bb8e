# expect: MAIN-SANDBOX-0010 line 6


def calculate(expression: str) -> object:
    names: dict[str, object] = {}
    return eval(
        expression,
        names,
    )
