# expect: MAIN-SANDBOX-0010 line 6


def run(source: str) -> None:
    if runner := exec:
        runner(source)
