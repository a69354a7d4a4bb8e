# expect: MAIN-SANDBOX-0010 line 5


def build(text: str) -> object:
    return compile(source=text, filename="<x>", mode="eval")
