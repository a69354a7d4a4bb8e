# expect: MAIN-SANDBOX-0010 line 5


def run(source: str) -> None:
    __builtins__["exec"](source)
