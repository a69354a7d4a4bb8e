# expect: none


def setup() -> None:
    exec("a = 1\n" + "b = a + 1\n")
