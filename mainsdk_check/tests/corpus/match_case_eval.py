# expect: MAIN-SANDBOX-0010 line 7


def apply(mode: str, text: str) -> object:
    match mode:
        case "python":
            return eval(text)
        case _:
            return text
