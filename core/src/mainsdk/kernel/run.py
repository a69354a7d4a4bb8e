# The wrapper of one-shot Python runs, ``python3 -E -s -c <this text + core's call> [code]`` (mainsdk.figures): it runs
# the code as ``python -c`` (``python -``) would: the same ``__main__`` globals, argv, lines and tracebacks. It runs
# ``hook`` (``figures_hook.py``) once a matplotlib name is imported. Under 8 KiB (the warm pool compiles it ahead); no
# docstring (the code's ``__doc__``), no import but os and sys, no name left in ``__main__``, no annotation evaluated.


def _mainsdk_run(hook: str, figures: str) -> None:
    import os
    import sys

    TYPE_CHECKING = False
    if TYPE_CHECKING:
        from importlib.machinery import ModuleSpec
        from types import CodeType
        from typing import Any

    main = sys.modules["__main__"].__dict__
    del main["_mainsdk_run"]
    code: str | bytes | CodeType
    if len(sys.argv) > 1:
        code, name = sys.argv.pop(1), "<string>"
        cache = getattr(sys.modules.get("linecache"), "cache", None)
        if cache is not None and name in cache:  # 3.13 caches ``-c`` text: the code's lines, not ours
            cache[name] = (len(code), None, [line + "\n" for line in code.splitlines()], name)
    else:
        code, name = sys.stdin.buffer.read(), "<stdin>"
        sys.argv[0] = "-"
        main["__file__"], main["__cached__"] = name, None
    folder = os.path.join(os.path.dirname(os.getcwd()), "out", figures)

    def waiting(fullname: str, path: object = None, target: object = None) -> "ModuleSpec | None":
        # Until a matplotlib name is imported: one name check per import.
        if fullname not in ("matplotlib", "matplotlib.pyplot", "mainsdk_figures"):
            return None
        scope: dict[str, Any] = {"__name__": "mainsdk_figures_hook"}
        woken = compile(hook, "<mainsdk_figures_hook>", "exec", dont_inherit=True)  # mainsdk: allow MAIN-SANDBOX-0010
        exec(woken, scope)  # mainsdk: allow MAIN-SANDBOX-0010
        scope["wake"](finder, folder)
        found: ModuleSpec | None = finder.find_spec(fullname, path, target)
        return found

    namespace: Any = type(sys.implementation)  # SimpleNamespace, without an import
    finder: Any = namespace(find_spec=waiting)
    sys.meta_path.insert(0, finder)
    here = sys._getframe()
    inner, outer = here.f_code, here.f_back.f_code if here.f_back is not None else None
    del here  # no cycle through the frame
    try:
        if name == "<stdin>":
            code = compile(code, name, "exec", dont_inherit=True)  # mainsdk: allow MAIN-SANDBOX-0010
        exec(code, main)  # mainsdk: allow MAIN-SANDBOX-0010
    except SystemExit:
        raise
    except BaseException:
        if name == "<stdin>":
            for stream in (sys.stderr, sys.stdout):
                try:  # noqa: SIM105 - contextlib: an import each run pays
                    stream.flush()
                except Exception:  # noqa: BLE001 - a closed stream
                    pass
        excepthook: Any = sys.excepthook

        def trimmed(kind: "type[BaseException]", value: "BaseException | None", tb: "Any") -> None:
            while tb is not None and (tb.tb_frame.f_code is inner or tb.tb_frame.f_code is outer):
                tb = tb.tb_next
            excepthook(kind, value.with_traceback(tb) if value is not None else value, tb)

        sys.excepthook = trimmed
        raise
