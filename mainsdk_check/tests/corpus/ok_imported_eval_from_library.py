# expect: none
from decimal import Decimal as eval


def money(text: str) -> object:
    return eval(text)
