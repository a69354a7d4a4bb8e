# expect: MAIN-SANDBOX-0010 line 5


def run(*args: str) -> None:
    exec(*args)
