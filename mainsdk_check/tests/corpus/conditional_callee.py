# expect: MAIN-SANDBOX-0010 line 5


def run(source: str, unsafe: bool) -> None:
    (exec if unsafe else print)(source)
