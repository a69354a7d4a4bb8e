# expect: none


def setup() -> None:
    exec(
        """
x = 1
y = x + 1
"""
    )
