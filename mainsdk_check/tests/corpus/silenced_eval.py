# expect: MAIN-SANDBOX-0010 line 6 silenced


def calculate(expression: str) -> object:
    # The expression comes from our own config file, reviewed in code review.
    return eval(expression)  # mainsdk: allow MAIN-SANDBOX-0010
