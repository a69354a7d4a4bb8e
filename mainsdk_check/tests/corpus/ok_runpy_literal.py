# expect: none
import runpy


def serve() -> dict[str, object]:
    return runpy.run_module("http.server", run_name="__main__")
