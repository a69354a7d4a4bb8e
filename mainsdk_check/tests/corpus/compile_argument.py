# expect: MAIN-SANDBOX-0010 line 5


def build(source: str) -> object:
    return compile(source, "<plugin>", "exec")
