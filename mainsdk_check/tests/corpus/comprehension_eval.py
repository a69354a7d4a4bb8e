# expect: MAIN-SANDBOX-0010 line 5


def values(lines: list[str]) -> list[object]:
    return [eval(line) for line in lines]
