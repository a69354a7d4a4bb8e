# expect: none
from typing import Any


def analyse(sandbox: Any, code: str) -> Any:
    return sandbox.run(code=code, language="python", feature="notebook")
