# expect: MAIN-SANDBOX-0010 line 10
import ast


def parse(text: str, trusted: bool) -> object:
    if trusted:  # noqa: SIM108
        reader = eval
    else:
        reader = ast.literal_eval
    return reader(text)
