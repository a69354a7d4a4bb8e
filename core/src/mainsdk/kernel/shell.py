"""Cells run as IPython runs them (when the kernel's package set brings IPython): the shell, %pip, inline figures."""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import sys
import traceback
import types
from collections.abc import Callable, Sequence
from typing import Any

from . import forms
from .cell import Cell, str_of
from .protocol import TEXT_LIMIT

INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
PIP_TARGET = os.path.join("~", ".mainsdk", "pip-packages")  # where %pip installs in a session (expanded at start)
NO_INDEX = (
    "pip: this box has no route to the package index (pypi.org and files.pythonhosted.org are not among the "
    "session's hosts), so nothing was installed. Add the package as name==version to sandbox.packages.python "
    "in main.yaml (for example `packages: {{python: [{example}]}}`) and create the session with it, or allow "
    "both hosts for the session to install here.\n"
)


class InlineBackend:
    """Makes matplotlib's default backend IPython's inline one when a cell first imports matplotlib.

    Set in ``rcParams``, not as ``MPLBACKEND`` in the environment, which every child process would inherit
    without the kernel's packages on its path (``!python plot.py`` would fail to import the backend). A
    backend the code names itself (``MPLBACKEND``, ``matplotlib.use``, ``%matplotlib``) wins.
    """

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        """matplotlib's own spec, its loader set to make the inline backend the default; None for any other."""
        if name != "matplotlib":
            return None
        import importlib.util

        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)  # once: the real finders find it
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or "MPLBACKEND" in os.environ:
            return spec
        loader: Any = spec.loader
        load = loader.exec_module

        def exec_module(module: Any) -> None:
            load(module)
            with contextlib.suppress(Exception):
                module.rcParams["backend"] = INLINE_BACKEND

        loader.exec_module = exec_module
        return spec


def pip_command(code_line: str) -> list[str] | None:
    """``pip``'s arguments when a ``!`` command is pip (``pip``, ``pip3``, ``python -m pip``), else None."""
    import shlex

    try:
        words = shlex.split(code_line)
    except ValueError:
        return None
    if words and os.path.basename(words[0]) in ("pip", "pip3"):
        return words[1:]
    if len(words) >= 3 and os.path.basename(words[0]).startswith("python") and words[1:3] == ["-m", "pip"]:
        return words[3:]
    return None


class Pip:
    """``%pip`` and ``!pip``: installs into the session (a folder on ``sys.path``) when the index is in reach."""

    def __init__(self, site: list[str]) -> None:
        self.site = list(site)
        self.target = os.path.expanduser(PIP_TARGET)
        self.index = False  # the running cell's: pypi.org and files.pythonhosted.org among the session's hosts

    def run(self, args: list[str], shell: Any) -> None:
        """Run pip with ``args`` for the cell: an install into the session's folder, or pip's own say."""
        import subprocess

        if args[:1] == ["install"] and not self.index:
            import re

            named = [a for a in args[1:] if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?(==\S+)?", a)]
            example = next((a for a in named if not a.endswith((".txt", ".whl"))), "name")
            if "==" not in example:
                example += "==<version>"
            sys.stderr.write(NO_INDEX.format(example=example))
            shell.user_ns["_exit_code"] = 1
            return
        argv = [sys.executable, "-m", "pip", *args]
        if args[:1] == ["install"]:
            os.makedirs(self.target, exist_ok=True)
            # --target: the session's own folder, never the box's site-packages (no PEP 668 wall, nothing shared).
            argv[4:4] = ["--target", self.target, "--no-input", "--disable-pip-version-check", "--upgrade"]
        env = dict(os.environ)
        # pip itself comes from the kernel's packages when the box's python has none of its own.
        env["PYTHONPATH"] = os.pathsep.join([*self.site, *filter(None, [env.get("PYTHONPATH")])])
        try:
            status = subprocess.call(argv, env=env, stdin=subprocess.DEVNULL)
        except KeyboardInterrupt:
            status = 130
        shell.user_ns["_exit_code"] = status
        if args[:1] == ["install"] and status == 0:
            import importlib

            if self.target not in sys.path:
                at = next((i for i, p in enumerate(sys.path) if p in self.site), len(sys.path))
                sys.path.insert(at, self.target)  # after the user's site-packages, before the kernel's own
            importlib.invalidate_caches()
            print("Note: an already imported package needs the interpreter restarted to see the new version.")


def ipython_shell(cell: Cell, pip: Pip) -> Any:
    """An IPython ``InteractiveShell`` whose displays and final results go to ``cell``; None without IPython."""
    try:
        from IPython.core.displayhook import DisplayHook
        from IPython.core.displaypub import DisplayPublisher
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets import Type
        from traitlets.config import Config
    except ImportError:
        return None

    class Publisher(DisplayPublisher):
        """``display()``: each output, all its forms, to the cell (a notebook's display_data)."""

        def publish(
            self,
            data: Any,
            metadata: Any = None,
            source: Any = None,
            *,
            transient: Any = None,
            update: Any = False,
            **kwargs: Any,
        ) -> None:
            cell.show(data)

        def clear_output(self, wait: Any = False) -> None:
            pass  # what was sent is the app's already

    class Hook(DisplayHook):
        """The final expression's result, all its forms, to the cell (a notebook's execute_result)."""

        def write_output_prompt(self) -> None:
            pass

        def write_format_data(self, format_dict: Any, md_dict: Any = None) -> None:
            cell.show(format_dict, main=True)

        def log_output(self, format_dict: Any) -> None:
            pass  # IPython would keep every output's bundle in its history for as long as the kernel lives

    class Shell(InteractiveShell):
        displayhook_class = Type(Hook)
        display_pub_class = Type(Publisher)

        last_traceback_text = ""

        def _showtraceback(self, etype: Any, evalue: Any, stb: Any) -> None:
            # The traceback goes in the cell's error (IPython's text, no colours), not on its stdout.
            self.last_traceback_text = self.InteractiveTB.stb2text(stb)

        def enable_gui(self, gui: Any = None) -> None:
            # A box has no screen: inline figures (results) need no event loop; a GUI backend cannot show.
            if gui not in (None, "inline"):
                from IPython.core.error import UsageError

                raise UsageError(f"the box has no display for the {gui!r} GUI; use %matplotlib inline")

        def system(self, cmd: Any) -> Any:
            me: Any = self  # IPython's own methods carry no types
            args = pip_command(me.var_expand(cmd, depth=1))
            if args is not None:
                pip.run(args, self)
                return None
            return me.system_raw(cmd)  # straight on the box's stdout and stderr, as it comes

    config = Config()
    config.HistoryManager.hist_file = ":memory:"  # history in memory: nothing of the cells written to the box's disk
    config.HistoryManager.db_log_output = False
    try:
        shell: Any = Shell.instance(config=config, colors="nocolor")
    except Exception as exc:  # noqa: BLE001 - an IPython this executor cannot drive (a box's own, far older): plain cells
        sys.stderr.write(f"mainsdk cell kernel: IPython did not start ({type(exc).__name__}: {exc}); plain Python\n")
        return None
    shell.last_traceback_text = ""

    def pip_magic(line: str) -> None:
        """Install packages into this session with pip (when the session may reach the package index)."""
        import shlex

        pip.run(shlex.split(line), shell)

    shell.register_magic_function(pip_magic, "line", "pip")
    with contextlib.suppress(Exception):  # the data forms of charts and frames: never a reason for no shell
        forms.register_forms(shell)
    return shell


def ipython_runner(shell: Any) -> Callable[[str, int], dict[str, str] | None]:
    """Run a cell as IPython runs it: transformers, magics, ``!cmd``, display hooks, its traceback text."""

    def run(code: str, number: int) -> dict[str, str] | None:
        shell.last_traceback_text = ""
        outcome = shell.run_cell(code, store_history=True)
        exc = outcome.error_before_exec or outcome.error_in_exec
        if exc is None:
            return None
        value = str_of(exc)
        text = shell.last_traceback_text or "".join(traceback.format_exception_only(type(exc), exc))
        return {"name": type(exc).__name__, "value": value[:TEXT_LIMIT], "traceback": text[-TEXT_LIMIT:]}

    return run
