# expect: none
import os


def clear() -> int:
    return os.system("clear")
