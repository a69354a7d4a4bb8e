# expect: MAIN-SANDBOX-0010 line 9


class Formula:
    def __init__(self, text: str) -> None:
        self.text = text

    def value(self) -> object:
        return eval(self.text, {"__builtins__": {}})
