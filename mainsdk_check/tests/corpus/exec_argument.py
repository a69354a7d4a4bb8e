# expect: MAIN-SANDBOX-0010 line 5


def run_plugin(source: str) -> None:
    exec(source)
