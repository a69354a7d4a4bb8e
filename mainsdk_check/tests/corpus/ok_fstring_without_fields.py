# expect: none


def two() -> object:
    return eval(f"1 + 1")  # noqa: F541
