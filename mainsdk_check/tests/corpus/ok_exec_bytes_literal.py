# expect: none


def setup() -> None:
    exec(b"x = 1")
