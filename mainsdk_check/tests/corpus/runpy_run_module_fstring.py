# expect: MAIN-SANDBOX-0010 line 6
import runpy


def run_plugin(name: str) -> dict[str, object]:
    return runpy.run_module(f"plugins.{name}")
