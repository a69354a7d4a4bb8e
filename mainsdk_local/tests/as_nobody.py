"""Running an app as another user (nobody) in a test: a copy of its imports that user can read.

Shared by test_isolation_choice.py and test_crash_signals.py (a helper module: test modules import from here,
never from each other).
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile


def readable_copy_of_imports(purelib: str, *modules: str) -> str:
    """A world-readable copy of the third-party packages that importing ``modules`` loads, with their metadata.

    tox makes its envs mode 0700, a CI clone may sit under root's home, and editable installs live in the
    checkout: nobody can read none of them. The copy sits in a fresh folder under /tmp, removed at exit.
    """
    stdlib = sysconfig.get_paths()["stdlib"]
    listing = subprocess.run(
        [sys.executable, "-c",
         "import sys, importlib\n"
         f"for name in {list(modules)!r}: importlib.import_module(name)\n"
         "for name, m in list(sys.modules.items()):\n"
         "    where = getattr(m, '__file__', None) or next(iter(getattr(m, '__path__', None) or ()), None)\n"
         "    if '.' not in name and where: print(name, where)"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    target = tempfile.mkdtemp(prefix="mainsdk-nobody-")
    atexit.register(shutil.rmtree, target, True)
    names = set()
    for line in listing:
        name, path = line.split(" ", 1)
        if path.startswith(stdlib + os.sep) and not path.startswith(purelib + os.sep):
            continue
        names.add(name.lower())
        if os.path.isdir(path):  # a namespace package (ruamel)
            shutil.copytree(path, os.path.join(target, name), dirs_exist_ok=True)
        elif os.path.basename(path) == "__init__.py":
            shutil.copytree(os.path.dirname(path), os.path.join(target, name), dirs_exist_ok=True)
        else:
            shutil.copy(path, target)
    for entry in os.listdir(purelib):
        if entry.endswith(".dist-info") and entry.split("-")[0].lower().replace(".", "_") in names:
            shutil.copytree(os.path.join(purelib, entry), os.path.join(target, entry))
    for folder, _dirs, files in os.walk(target):
        os.chmod(folder, 0o755)
        for file in files:
            os.chmod(os.path.join(folder, file), 0o644)
    return target
