# expect: none


def setup() -> None:
    exec(compile("x = 1", "<setup>", "exec"))
