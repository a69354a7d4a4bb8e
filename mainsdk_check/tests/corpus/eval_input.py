# expect: MAIN-SANDBOX-0010 line 5


def ask() -> object:
    return eval(input("> "))
