# expect: none
from typing import Any


def predict(model: Any, frame: Any, expression: str) -> Any:
    model.eval()
    return frame.eval(expression)
