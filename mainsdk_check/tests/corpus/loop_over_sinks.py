# expect: MAIN-SANDBOX-0010 line 6


def run_all(source: str) -> None:
    for runner in (eval, exec):
        runner(source)
