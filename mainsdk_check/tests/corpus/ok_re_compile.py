# expect: none
import re
from re import compile as regex


def matcher(pattern: str) -> re.Pattern[str]:
    re.compile(pattern)
    return regex(pattern)
