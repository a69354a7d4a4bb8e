# expect: MAIN-SANDBOX-0010 line 13


def make(source: str) -> None:
    runner = print

    def unsafe() -> None:
        nonlocal runner
        runner = exec

    def go() -> None:
        unsafe()
        runner(source)

    go()
