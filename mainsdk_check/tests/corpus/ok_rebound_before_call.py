# expect: none


def show(text: str) -> None:
    out = eval
    out = print
    out(text)
