# expect: MAIN-SANDBOX-0010 line 6


def load(path: str) -> None:
    with open(path) as file:
        exec(file.read())
