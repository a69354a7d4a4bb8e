# expect: MAIN-SANDBOX-0010 line 11
runner = print


def enable_scripts() -> None:
    global runner  # noqa: PLW0603
    runner = exec


def run(source: str) -> None:
    runner(source)
