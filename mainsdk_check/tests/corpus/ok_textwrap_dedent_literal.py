# expect: none
import textwrap


def setup() -> None:
    exec(
        textwrap.dedent(
            """
            x = 1
            """
        )
    )
