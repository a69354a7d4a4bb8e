"""Entry point of the launcher server: ``python -I -S .../launcher/__main__.py --fd N --parent PID [--weak]``.

``-I -S`` keeps the app's environment, site-packages and current directory out of the server, so nothing
on the host can shadow a module it imports. This file loads its own folder as the package ``launcher`` by
path (it is never put on ``sys.path``), so the server imports exactly the files beside it and the
standard library.
"""

import importlib.util
import os
import sys


def _load_launcher() -> None:
    folder = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(
        "launcher", os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules["launcher"] = package
    spec.loader.exec_module(package)


if __name__ == "__main__":
    if not __package__:  # run by path, as the client does; ``python -m mainsdk_local.launcher`` needs nothing
        _load_launcher()
        from launcher import server  # type: ignore[import-not-found]  # loaded by path just above
    else:
        from . import server
    sys.exit(server.main(sys.argv[1:]))
