# expect: MAIN-SANDBOX-0010 line 6
run_code = exec


def load(source: str) -> None:
    run_code(source)
