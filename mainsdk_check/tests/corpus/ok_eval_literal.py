# expect: none


def two() -> object:
    return eval("1 + 1")
