# expect: none


class Calculator:
    def eval(self, expression: str) -> int:
        return len(expression)


def size(expression: str) -> int:
    return Calculator().eval(expression)
