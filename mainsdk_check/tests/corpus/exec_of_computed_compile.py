# expect: MAIN-SANDBOX-0010 line 6
# expect: MAIN-SANDBOX-0010 line 6


def run(source: str) -> None:
    exec(compile(source, "<plugin>", "exec"))
