"""MAIN-SANDBOX-0010: code that runs a value that is not a string literal, found with ``ast``.

The analyser gives every expression a set of *tags*: dotted names of what it
may be, such as ``builtins.eval``, ``subprocess`` (the module),
``subprocess.run`` or ``code.InteractiveInterpreter()`` (an instance). Names
get tags from imports, the builtins and assignments, so aliases are followed:
``from builtins import eval as e``, ``import subprocess as sp``,
``getattr(builtins, "exec")``, ``__builtins__["eval"]`` and ``run = eval``.
A call whose callee may be a sink in ``SINKS`` is reported when the argument
that becomes code is not a string literal.

Within a scope the tags follow the statements in order, and branches and
loops merge what each path may bind (a may-analysis, so a name rebound to
``eval`` in one branch is still caught). A function sees the names of the
scopes around it as everything they are ever bound to, since it may be
called at any time; names written through ``global`` and ``nonlocal`` are
folded in by running the analysis again until nothing changes. Only tags on
the way to a sink are kept, so the sets stay small however long the code.

Not followed: values stored in attributes or containers (``self.run =
eval``), ``functools.partial``, ``**options`` that may hold ``shell=True``,
and names bound to a string literal (``cmd = "ls"; os.system(cmd)`` is
reported: the argument itself must be the literal).
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final, Literal

import attrs
from mainsdk.errors import UNSAFE_EVAL

from mainsdk_check.findings import Finding

__all__ = ["SINKS", "Sink", "allowed_codes", "find_unsafe_eval"]

Tags = frozenset[str]
NOTHING: Final[Tags] = frozenset()

SinkKind = Literal["code", "module", "shell", "shell-option"]


@attrs.frozen
class Sink:
    """A callable that turns one of its arguments into code or a shell command.

    ``position`` and ``keywords`` say where that argument is passed. For
    ``shell-option`` sinks the argument only matters with ``shell=True``.
    """

    kind: SinkKind
    position: int = 0
    keywords: tuple[str, ...] = ()


_SUBPROCESS = Sink("shell-option", 0, ("args",))

SINKS: Final[dict[str, Sink]] = {
    "builtins.eval": Sink("code", 0, ("source",)),
    "builtins.exec": Sink("code", 0, ("source",)),
    "builtins.compile": Sink("code", 0, ("source",)),
    "code.compile_command": Sink("code", 0, ("source",)),
    "codeop.compile_command": Sink("code", 0, ("source",)),
    "code.InteractiveInterpreter().runsource": Sink("code", 0, ("source",)),
    "code.InteractiveInterpreter().runcode": Sink("code", 0, ("code",)),
    "code.InteractiveConsole().runsource": Sink("code", 0, ("source",)),
    "code.InteractiveConsole().runcode": Sink("code", 0, ("code",)),
    "code.InteractiveConsole().push": Sink("code", 0, ("line",)),
    "runpy.run_path": Sink("module", 0, ("path_name",)),
    "runpy.run_module": Sink("module", 0, ("mod_name",)),
    "os.system": Sink("shell", 0, ("command",)),
    "posix.system": Sink("shell", 0, ("command",)),
    "os.popen": Sink("shell", 0, ("cmd",)),
    "subprocess.getoutput": Sink("shell", 0, ("cmd",)),
    "subprocess.getstatusoutput": Sink("shell", 0, ("cmd",)),
    "asyncio.create_subprocess_shell": Sink("shell", 0, ("cmd",)),
    "asyncio.subprocess.create_subprocess_shell": Sink("shell", 0, ("cmd",)),
    "subprocess.run": _SUBPROCESS,
    "subprocess.call": _SUBPROCESS,
    "subprocess.check_call": _SUBPROCESS,
    "subprocess.check_output": _SUBPROCESS,
    "subprocess.Popen": _SUBPROCESS,
}

# Popen(args, bufsize, executable, stdin, stdout, stderr, preexec_fn, close_fds, shell, ...)
_SHELL_POSITION = 8

# Builtins whose tags matter; any other builtin name has none.
_BUILTINS = frozenset({"eval", "exec", "compile", "getattr", "vars", "__import__"})

# What ``from M import *`` brings in, for the modules that hold sinks.
_STAR_EXPORTS: Final[dict[str, tuple[str, ...]]] = {
    "builtins": ("eval", "exec", "compile", "getattr", "vars", "__import__"),
    "code": ("InteractiveInterpreter", "InteractiveConsole", "compile_command"),
    "codeop": ("compile_command",),
    "runpy": ("run_path", "run_module"),
    "os": ("system", "popen"),
    "posix": ("system",),
    "subprocess": ("run", "call", "check_call", "check_output", "Popen", "getoutput", "getstatusoutput"),
    "asyncio": ("create_subprocess_shell",),
}

# Calls that return a string literal when given one, so ``exec(compile("...", ...))`` is not reported.
_LITERAL_PRESERVING = frozenset({"builtins.compile", "textwrap.dedent", "inspect.cleandoc"})
_STR_METHODS = frozenset({"strip", "lstrip", "rstrip", "encode", "decode", "lower", "upper", "replace", "format"})


def _prefixes(name: str) -> Iterator[str]:
    """``code.InteractiveInterpreter().runsource`` gives ``code``, ``code.InteractiveInterpreter``,
    ``code.InteractiveInterpreter()`` and itself."""
    for index, char in enumerate(name):
        if char in ".(":
            yield name[:index]
    yield name


# Every tag that can still lead to a sink. Anything else is dropped at once: tracking every attribute
# chain of every module would grow without bound in loops (``node = node.parent``) for no finding.
_HELPERS = ("builtins.getattr", "builtins.vars", "builtins.__import__", "importlib.import_module", "sys.modules")
_MODULES = {name.split(".")[0] for name in [*SINKS, *_HELPERS, *_LITERAL_PRESERVING]}
_RELEVANT: Final[frozenset[str]] = frozenset(
    prefix
    for name in [*SINKS, *_HELPERS, *_LITERAL_PRESERVING, *(f"{module}.__dict__" for module in _MODULES)]
    for prefix in _prefixes(name)
)


def _relevant(tags: Iterable[str]) -> Tags:
    return frozenset(tag for tag in tags if tag in _RELEVANT)


_ALLOW = re.compile(r"mainsdk:\s*allow\s+((?:[A-Z]+-[A-Z]+-\d{4})(?:\s*,?\s*[A-Z]+-[A-Z]+-\d{4})*)")
_CODE = re.compile(r"[A-Z]+-[A-Z]+-\d{4}")

_FIX = {
    "code": "run it with sandbox.run instead, outside this process, or pass a string literal",
    "module": "run it with sandbox.run instead, outside this process, or name the module or file with a string literal",
    "shell": 'run it with sandbox.run (language "bash") instead, or pass a list of arguments without shell=True',
    "shell-option": 'run it with sandbox.run (language "bash") instead, or pass a list of arguments without shell=True',
}

_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
_Comprehension = ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp
ScopeKind = Literal["module", "class", "function", "lambda", "comprehension"]


def _builtin(name: str) -> Tags:
    """The tags of a name that no scope binds."""
    if name in _BUILTINS:
        return frozenset({f"builtins.{name}"})
    if name == "__builtins__":  # the builtins module in __main__, its __dict__ elsewhere
        return frozenset({"builtins"})
    return NOTHING


def _string(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


class _Scope:
    """A Python scope: the names bound in it, and every value each was bound to (``summary``)."""

    def __init__(self, node: ast.AST, kind: ScopeKind, parent: _Scope | None) -> None:
        self.node = node
        self.kind = kind
        self.parent = parent
        self.bound: set[str] = set()
        self.globals: set[str] = set()
        self.nonlocals: set[str] = set()
        self.summary: dict[str, Tags] = {}

    @property
    def locals(self) -> set[str]:
        """Names local to this scope (bound here and not declared global or nonlocal)."""
        return self.bound - self.globals - self.nonlocals


class _Frame:
    """A scope being analysed: ``env`` maps the names bound so far to their tags at this point."""

    def __init__(
        self, scope: _Scope, outer: Callable[[str], Tags], pending: list[tuple[_FunctionNode, _Scope]]
    ) -> None:
        self.scope = scope
        self.env: dict[str, Tags] = {}
        self.outer = outer  # how a name this scope does not bind is resolved
        self.pending = pending  # function bodies to analyse once this scope's summary is complete


def _names_bound(body: Iterable[ast.AST], scope: _Scope) -> None:
    """Record the names bound in ``body`` (not in nested scopes) and the global and nonlocal declarations."""
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            scope.bound.add(node.name)
            stack.extend(node.decorator_list)
            stack.extend(node.args.defaults)
            stack.extend(d for d in node.args.kw_defaults if d is not None)
            continue
        if isinstance(node, ast.ClassDef):
            scope.bound.add(node.name)
            stack.extend(node.decorator_list)
            stack.extend(node.bases)
            stack.extend(k.value for k in node.keywords)
            continue
        if isinstance(node, ast.Lambda):
            stack.extend(node.args.defaults)
            stack.extend(d for d in node.args.kw_defaults if d is not None)
            continue
        if isinstance(node, _Comprehension):
            # An assignment expression in a comprehension binds in the enclosing scope.
            for inner in ast.walk(node):
                if isinstance(inner, ast.NamedExpr) and isinstance(inner.target, ast.Name):
                    scope.bound.add(inner.target.id)
            continue
        if isinstance(node, ast.Global):
            scope.globals.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            scope.nonlocals.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            scope.bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            scope.bound.update(name for name, _ in _import_bindings(node))
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            scope.bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            scope.bound.add(node.rest)
        stack.extend(ast.iter_child_nodes(node))


def _import_bindings(node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, Tags]]:
    """The names an import binds, each with its tags."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                yield alias.asname, _relevant([alias.name])
            else:  # ``import os.path`` binds ``os``
                top = alias.name.split(".")[0]
                yield top, _relevant([top])
        return
    # A relative import is the project's own module, not the standard library's.
    module = node.module if node.level == 0 else None
    for alias in node.names:
        if alias.name == "*":
            for name in _STAR_EXPORTS.get(module or "", ()):
                yield name, _relevant([f"{module}.{name}"])
            continue
        yield alias.asname or alias.name, _relevant([f"{module}.{alias.name}"]) if module else NOTHING


def _target_names(target: ast.AST) -> Iterator[str]:
    for node in ast.walk(target):
        if isinstance(node, ast.Name):
            yield node.id


def _argument(call: ast.Call, position: int, keywords: Sequence[str]) -> ast.expr | Literal[False] | None:
    """The expression passed at ``position`` or as one of ``keywords``; None if absent, False if unknowable."""
    for index, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            return False  # ``f(*args)``: whatever lands at ``position`` is computed
        if index == position:
            return arg
    for keyword in call.keywords:
        if keyword.arg in keywords:
            return keyword.value
    if any(keyword.arg is None for keyword in call.keywords):
        return False  # ``f(**options)``
    return None


def _shell_flag(call: ast.Call) -> bool:
    """Whether a subprocess call may run through the shell: ``shell=True``, or a shell value we cannot read."""
    value: ast.expr | None = None
    for keyword in call.keywords:
        if keyword.arg == "shell":
            value = keyword.value
    if (
        value is None
        and len(call.args) > _SHELL_POSITION
        and not any(isinstance(arg, ast.Starred) for arg in call.args)
    ):
        value = call.args[_SHELL_POSITION]
    if value is None:
        return False  # the default, and ``**options`` we cannot see into
    if isinstance(value, ast.Constant):
        return bool(value.value)
    return True  # a computed flag may be true


def _display(tag: str) -> str:
    """A sink's name for a message: ``eval``, ``subprocess.run``, ``code.InteractiveInterpreter.runsource``."""
    name = tag.replace("()", "")
    return name.removeprefix("builtins.")


class _Analysis:
    """One pass over a module. ``extra`` carries global and nonlocal writes from pass to pass."""

    def __init__(self, module: ast.Module, extra: dict[tuple[int, str], Tags]) -> None:
        self.extra = extra
        self.extra_changed = False
        self.hits: dict[int, tuple[ast.Call, set[str]]] = {}
        self.module_scope = _Scope(module, "module", None)
        _names_bound(module.body, self.module_scope)
        self.module_end: dict[str, Tags] = {}
        # Tags of each function's parameter defaults, taken where the def runs.
        self.defaults: dict[int, dict[str, Tags]] = {}

    # --- Scopes and names -------------------------------------------------

    def run(self, module: ast.Module) -> None:
        """Analyse the module body, then every function in it."""
        pending: list[tuple[_FunctionNode, _Scope]] = []
        frame = _Frame(self.module_scope, _builtin, pending)
        self._block(module.body, frame)
        self.module_end = frame.env
        self._functions(pending)

    def _functions(self, pending: list[tuple[_FunctionNode, _Scope]]) -> None:
        """Analyse function bodies after their enclosing scope, whose summary they read."""
        seen: set[int] = set()
        for node, parent in pending:
            if id(node) in seen:  # a def in a loop body is queued once per iteration
                continue
            seen.add(id(node))
            self._function(node, parent)

    def _function(self, node: _FunctionNode, parent: _Scope) -> None:
        scope = _Scope(node, "function", parent)
        args = node.args
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        params += [a for a in (args.vararg, args.kwarg) if a is not None]
        scope.bound.update(a.arg for a in params)
        _names_bound(node.body, scope)
        pending: list[tuple[_FunctionNode, _Scope]] = []
        frame = _Frame(scope, lambda name: self._free(name, parent), pending)
        defaults = self.defaults.get(id(node), {})
        for param in params:
            frame.env[param.arg] = defaults.get(param.arg, NOTHING)
        self._block(node.body, frame)
        self._functions(pending)

    def _extra(self, scope: _Scope, name: str) -> Tags:
        return self.extra.get((id(scope.node), name), NOTHING)

    def _global(self, name: str) -> Tags:
        """A module-level name as a function sees it: anything it is ever bound to."""
        module = self.module_scope
        tags = self._extra(module, name)
        if name in module.locals:
            # The end state adds the builtin when the name may still be unbound (bound in one branch only).
            return tags | module.summary.get(name, NOTHING) | self.module_end.get(name, _builtin(name))
        return tags | _builtin(name)

    def _free(self, name: str, scope: _Scope | None) -> Tags:
        """A name a function does not bind, resolved in the enclosing functions (classes are skipped), then globally."""
        while scope is not None:
            if scope.kind == "module" or name in scope.globals:
                return self._global(name)
            if scope.kind != "class" and name in scope.locals:
                return scope.summary.get(name, NOTHING) | self._extra(scope, name)
            scope = scope.parent
        return self._global(name)

    def lookup(self, name: str, frame: _Frame) -> Tags:
        """The tags of ``name`` read in ``frame`` at this point."""
        scope = frame.scope
        if name in frame.env:
            tags = frame.env[name]
            return tags | self._extra(scope, name) if scope.kind == "module" else tags
        if name in scope.globals:
            return self._global(name)
        return self._unbound(name, frame)

    def _unbound(self, name: str, frame: _Frame) -> Tags:
        """A name with no binding yet in this frame."""
        scope = frame.scope
        if scope.kind == "module":
            return _builtin(name) | self._extra(scope, name)
        if scope.kind != "class" and name in scope.locals:
            return NOTHING  # unbound local: using it raises, it calls nothing
        return frame.outer(name)

    def _bind(self, name: str, tags: Tags, frame: _Frame) -> None:
        scope = frame.scope
        frame.env[name] = tags
        scope.summary[name] = scope.summary.get(name, NOTHING) | tags
        target: _Scope | None = None
        if name in scope.globals:
            target = self.module_scope
        elif name in scope.nonlocals:
            target = scope.parent
            while target is not None and (target.kind == "class" or name not in target.locals):
                target = target.parent
        if target is not None and target is not scope:
            key = (id(target.node), name)
            merged = self.extra.get(key, NOTHING) | tags
            if merged != self.extra.get(key, NOTHING):
                self.extra[key] = merged
                self.extra_changed = True

    def _unbind(self, name: str, frame: _Frame) -> None:
        frame.env.pop(name, None)
        if frame.scope.kind not in ("module", "class"):
            frame.env[name] = NOTHING  # deleted local

    def _merge(self, frame: _Frame, envs: Sequence[dict[str, Tags]]) -> dict[str, Tags]:
        """Join the states of several paths: a name gets every value it may have on any of them."""
        names = set().union(*envs)
        merged: dict[str, Tags] = {}
        for name in names:
            tags = NOTHING
            for env in envs:
                tags |= env[name] if name in env else self._unbound(name, frame)
            merged[name] = tags
        return merged

    # --- Statements -------------------------------------------------------

    def _block(self, body: Sequence[ast.stmt], frame: _Frame) -> None:
        for statement in body:
            self._statement(statement, frame)

    def _branches(self, frame: _Frame, bodies: Sequence[Callable[[], None]], *, keep_before: bool) -> None:
        """Run each body from the current state and merge the results (and the state before, if no body may run)."""
        before = frame.env
        results = [before] if keep_before else []
        for body in bodies:
            frame.env = dict(before)
            body()
            results.append(frame.env)
        frame.env = self._merge(frame, results)

    def _loop(self, frame: _Frame, body: Callable[[], None]) -> None:
        """Run a loop body until the state stops growing (a few rounds; tags only grow)."""
        for _ in range(4):
            before = frame.env
            frame.env = dict(before)
            body()
            frame.env = self._merge(frame, [before, frame.env])
            if frame.env == before:
                break

    def _statement(self, node: ast.stmt, frame: _Frame) -> None:
        if isinstance(node, ast.Assign):
            self._visit(node.value, frame)
            tags = self._value(node.value, frame)
            for target in node.targets:
                self._assign(target, node.value, tags, frame)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self._visit(node.value, frame)
                self._assign(node.target, node.value, self._value(node.value, frame), frame)
        elif isinstance(node, ast.AugAssign):
            self._visit(node.value, frame)
            self._assign(node.target, None, NOTHING, frame)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for name, tags in _import_bindings(node):
                self._bind(name, tags, frame)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._visit_all([*node.decorator_list, *node.args.defaults], frame)
            self._visit_all([d for d in node.args.kw_defaults if d is not None], frame)
            self.defaults[id(node)] = self._defaults(node.args, frame)
            frame.pending.append((node, frame.scope))
            self._bind(node.name, NOTHING, frame)
        elif isinstance(node, ast.ClassDef):
            self._visit_all([*node.decorator_list, *node.bases, *(k.value for k in node.keywords)], frame)
            self._class(node, frame)
            self._bind(node.name, NOTHING, frame)
        elif isinstance(node, ast.If):
            self._visit(node.test, frame)
            self._branches(
                frame,
                [lambda: self._block(node.body, frame), lambda: self._block(node.orelse, frame)],
                keep_before=False,
            )
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self._visit(node.iter, frame)
            self._loop(frame, lambda: self._for_body(node, frame))
            self._block(node.orelse, frame)
        elif isinstance(node, ast.While):
            self._visit(node.test, frame)
            self._loop(frame, lambda: self._while_body(node, frame))
            self._block(node.orelse, frame)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                self._visit(item.context_expr, frame)
                if item.optional_vars is not None:
                    self._assign(item.optional_vars, None, NOTHING, frame)
            self._block(node.body, frame)
        elif isinstance(node, (ast.Try, ast.TryStar)):
            self._try(node, frame)
        elif isinstance(node, ast.Match):
            self._visit(node.subject, frame)
            cases = [functools.partial(self._case, case, frame) for case in node.cases]
            self._branches(frame, cases, keep_before=True)
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self._unbind(target.id, frame)
                else:
                    self._visit(target, frame)
        elif not isinstance(node, (ast.Global, ast.Nonlocal)):
            # Expr, Return, Raise, Assert and the rest: only their expressions matter.
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self._visit(child, frame)

    def _while_body(self, node: ast.While, frame: _Frame) -> None:
        self._block(node.body, frame)
        self._visit(node.test, frame)

    def _for_body(self, node: ast.For | ast.AsyncFor, frame: _Frame) -> None:
        tags = NOTHING
        # ``for run in (eval, exec):`` binds the loop variable to each item in turn.
        if isinstance(node.iter, (ast.Tuple, ast.List, ast.Set)):
            for item in node.iter.elts:
                tags |= self._value(item, frame)
        if isinstance(node.target, ast.Name):
            self._bind(node.target.id, tags, frame)
        else:
            self._assign(node.target, None, NOTHING, frame)
        self._block(node.body, frame)

    def _try(self, node: ast.Try | ast.TryStar, frame: _Frame) -> None:
        # A handler may start after any statement of the body, so it starts from all of those states.
        states = [frame.env]
        frame.env = dict(frame.env)
        for statement in node.body:
            self._statement(statement, frame)
            states.append(dict(frame.env))
        after_body = frame.env
        handler_start = self._merge(frame, states)
        results = []
        for handler in node.handlers:
            frame.env = dict(handler_start)
            if handler.type is not None:
                self._visit(handler.type, frame)
            if handler.name:
                self._bind(handler.name, NOTHING, frame)
            self._block(handler.body, frame)
            if handler.name:
                self._unbind(handler.name, frame)
            results.append(frame.env)
        frame.env = after_body
        self._block(node.orelse, frame)
        results.append(frame.env)
        frame.env = self._merge(frame, results)
        self._block(node.finalbody, frame)

    def _case(self, case: ast.match_case, frame: _Frame) -> None:
        for name in _pattern_names(case.pattern):
            self._bind(name, NOTHING, frame)
        for node in ast.walk(case.pattern):
            if isinstance(node, ast.MatchValue):
                self._visit(node.value, frame)
        if case.guard is not None:
            self._visit(case.guard, frame)
        self._block(case.body, frame)

    def _class(self, node: ast.ClassDef, frame: _Frame) -> None:
        """A class body runs at once, in its own namespace; its methods do not see that namespace."""
        scope = _Scope(node, "class", frame.scope)
        _names_bound(node.body, scope)
        # Methods are queued with the enclosing function or module, whose summary they read.
        self._block(node.body, _Frame(scope, _OuterFrame(self, frame), frame.pending))

    def _assign(self, target: ast.expr, value: ast.expr | None, tags: Tags, frame: _Frame) -> None:
        if isinstance(target, ast.Name):
            self._bind(target.id, tags, frame)
        elif isinstance(target, (ast.Tuple, ast.List)):
            # ``a, b = eval, exec`` pairs up; any other unpacking gives unknown values.
            pairs = (
                isinstance(value, (ast.Tuple, ast.List))
                and len(value.elts) == len(target.elts)
                and not any(isinstance(e, ast.Starred) for e in [*value.elts, *target.elts])
            )
            if pairs and isinstance(value, (ast.Tuple, ast.List)):
                for sub, item in zip(target.elts, value.elts, strict=True):
                    self._assign(sub, item, self._value(item, frame), frame)
            else:
                for sub in target.elts:
                    self._assign(sub, None, NOTHING, frame)
        elif isinstance(target, ast.Starred):
            self._assign(target.value, None, NOTHING, frame)
        else:  # an attribute or item: evaluate its parts, bind nothing we follow
            for child in ast.iter_child_nodes(target):
                if isinstance(child, ast.expr):
                    self._visit(child, frame)

    # --- Expressions ------------------------------------------------------

    def _value(self, node: ast.expr, frame: _Frame) -> Tags:
        """The tags of an expression, without side effects (``_visit`` does the reporting)."""
        if isinstance(node, ast.Name):
            return self.lookup(node.id, frame)
        if isinstance(node, ast.Attribute):
            return _relevant(f"{tag}.{node.attr}" for tag in self._value(node.value, frame))
        if isinstance(node, ast.Subscript):
            key = _string(node.slice)
            if key is None:
                return NOTHING
            return _relevant(item for tag in self._value(node.value, frame) if (item := _item(tag, key)))
        if isinstance(node, ast.Call):
            return self._call_value(node, frame)
        if isinstance(node, ast.NamedExpr):
            return self._value(node.value, frame)
        if isinstance(node, ast.IfExp):
            return self._value(node.body, frame) | self._value(node.orelse, frame)
        if isinstance(node, ast.BoolOp):
            return frozenset().union(*(self._value(v, frame) for v in node.values))
        if isinstance(node, (ast.Starred, ast.Await)):
            return self._value(node.value, frame)
        return NOTHING

    def _call_value(self, node: ast.Call, frame: _Frame) -> Tags:
        callee = self._value(node.func, frame)
        if not callee:
            return NOTHING
        first = self._value(node.args[0], frame) if node.args else NOTHING
        name = _string(node.args[1]) if len(node.args) > 1 else None
        module = _string(node.args[0]) if node.args else None
        result: set[str] = set()
        for tag in callee:
            if tag == "builtins.getattr":
                if name is not None:
                    result.update(f"{obj}.{name}" for obj in first)
            elif tag == "builtins.vars":
                result.update(f"{obj}.__dict__" for obj in first)
            elif tag == "builtins.__import__":
                if module is not None:
                    result.add(module.split(".")[0])
            elif tag == "importlib.import_module":
                if module is not None and not module.startswith("."):
                    result.add(module)
            else:
                result.add(f"{tag}()")  # an instance, or what a call returns
        return _relevant(result)

    def _visit_all(self, nodes: Iterable[ast.expr], frame: _Frame) -> None:
        for node in nodes:
            self._visit(node, frame)

    def _visit(self, node: ast.expr, frame: _Frame) -> None:
        """Walk an expression in evaluation order: report sink calls, bind assignment expressions."""
        if isinstance(node, ast.Lambda):
            self._visit_all([*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)], frame)
            self._lambda(node, frame)
            return
        if isinstance(node, _Comprehension):
            self._comprehension(node, frame)
            return
        if isinstance(node, ast.NamedExpr):
            self._visit(node.value, frame)
            self._bind(node.target.id, self._value(node.value, frame), self._binding_frame(frame))
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self._visit(child, frame)
            elif isinstance(child, ast.keyword):
                self._visit(child.value, frame)
        if isinstance(node, ast.Call):
            self._check_call(node, frame)

    def _defaults(self, args: ast.arguments, frame: _Frame) -> dict[str, Tags]:
        """A parameter may hold its default (``def f(run=exec)``); what callers pass is unknown."""
        positional = [*args.posonlyargs, *args.args]
        pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
        return {param.arg: tags for param, default in pairs if (tags := self._value(default, frame))}

    def _binding_frame(self, frame: _Frame) -> _Frame:
        """Where an assignment expression binds: out of comprehensions, into the enclosing scope."""
        while frame.scope.kind == "comprehension" and isinstance(frame.outer, _OuterFrame):
            frame = frame.outer.frame
        return frame

    def _lambda(self, node: ast.Lambda, frame: _Frame) -> None:
        scope = _Scope(node, "lambda", frame.scope)
        args = node.args
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        params += [a for a in (args.vararg, args.kwarg) if a is not None]
        scope.bound.update(a.arg for a in params)
        inner = _Frame(scope, _OuterFrame(self, frame), frame.pending)
        defaults = self._defaults(args, frame)
        for param in params:
            inner.env[param.arg] = defaults.get(param.arg, NOTHING)
        self._visit(node.body, inner)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp, frame: _Frame) -> None:
        # The first iterable is evaluated outside; the rest runs in the comprehension's own scope.
        self._visit(node.generators[0].iter, frame)
        scope = _Scope(node, "comprehension", frame.scope)
        for generator in node.generators:
            scope.bound.update(_target_names(generator.target))
        inner = _Frame(scope, _OuterFrame(self, frame), frame.pending)
        for index, generator in enumerate(node.generators):
            if index:
                self._visit(generator.iter, inner)
            tags = NOTHING
            if isinstance(generator.iter, (ast.Tuple, ast.List, ast.Set)):
                for item in generator.iter.elts:
                    tags |= self._value(item, frame if index == 0 else inner)
            for name in _target_names(generator.target):
                inner.env[name] = tags if isinstance(generator.target, ast.Name) else NOTHING
            self._visit_all(generator.ifs, inner)
        if isinstance(node, ast.DictComp):
            self._visit_all([node.key, node.value], inner)
        else:
            self._visit(node.elt, inner)

    # --- Sinks ------------------------------------------------------------

    def _check_call(self, node: ast.Call, frame: _Frame) -> None:
        for tag in self._value(node.func, frame):
            sink = SINKS.get(tag)
            if sink is not None and self._unsafe(node, sink, frame):
                self.hits.setdefault(id(node), (node, set()))[1].add(tag)

    def _unsafe(self, node: ast.Call, sink: Sink, frame: _Frame) -> bool:
        if sink.kind == "shell-option" and not _shell_flag(node):
            return False
        argument = _argument(node, sink.position, sink.keywords)
        if argument is None:
            return False  # nothing is run (the call fails)
        if argument is False:
            return True
        return not self._literal(argument, frame)

    def _literal(self, node: ast.expr, frame: _Frame) -> bool:
        """Whether an expression is a string literal, or built only from literals."""
        if isinstance(node, ast.Constant):
            return isinstance(node.value, (str, bytes))
        if isinstance(node, ast.JoinedStr):  # an f-string without replacement fields
            return all(isinstance(value, ast.Constant) for value in node.values)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self._literal(node.left, frame) and self._literal(node.right, frame)
        if isinstance(node, (ast.List, ast.Tuple)):  # an argument list for a shell, every item literal
            return all(not isinstance(e, ast.Starred) and self._literal(e, frame) for e in node.elts)
        if isinstance(node, ast.Call) and node.args and not node.keywords:
            # Arguments may be any constant: ``"x = {}".format(1)`` is as fixed as the literal.
            args_literal = all(isinstance(a, ast.Constant) or self._literal(a, frame) for a in node.args)
            if isinstance(node.func, ast.Attribute) and node.func.attr in _STR_METHODS:
                return args_literal and self._literal(node.func.value, frame)
            callee = self._value(node.func, frame)
            return bool(callee) and callee <= _LITERAL_PRESERVING and args_literal
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args and not node.keywords:
            return node.func.attr in _STR_METHODS and self._literal(node.func.value, frame)
        return False


class _OuterFrame:
    """Resolve a lambda's or comprehension's free names in the frame around it, as it is at that point."""

    def __init__(self, analysis: _Analysis, frame: _Frame) -> None:
        self.analysis = analysis
        self.frame = frame

    def __call__(self, name: str) -> Tags:
        return self.analysis.lookup(name, self.frame)


def _item(tag: str, key: str) -> str | None:
    """The tag of ``value[key]``: ``__builtins__["eval"]``, ``vars(builtins)["exec"]``, ``sys.modules["os"]``."""
    if tag == "builtins":
        return f"builtins.{key}"
    if tag.endswith(".__dict__"):
        return f"{tag.removesuffix('.__dict__')}.{key}"
    if tag == "sys.modules":
        return key
    return None


def _pattern_names(pattern: ast.pattern) -> Iterator[str]:
    for node in ast.walk(pattern):
        if isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            yield node.name
        elif isinstance(node, ast.MatchMapping) and node.rest:
            yield node.rest


def allowed_codes(source: str) -> dict[int, set[str]]:
    """The codes each line's ``# mainsdk: allow CODE[, CODE]`` comment accepts, by 1-based line.

    Comments are found with ``tokenize``, so the same text inside a string
    literal does not count.
    """
    allowed: dict[int, set[str]] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT and (match := _ALLOW.search(token.string)):
                allowed.setdefault(token.start[0], set()).update(_CODE.findall(match.group(1)))
    except (tokenize.TokenError, SyntaxError):
        pass  # the source was parsed already; a tokenizer complaint at the very end loses no comment we need
    return allowed


def _column(lines: Sequence[str], line: int, byte_offset: int) -> int:
    """A 1-based character column from ``ast``'s UTF-8 byte offset."""
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    return len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore")) + 1


def _message(call: ast.Call, tags: set[str]) -> tuple[str, str]:
    names = sorted(tags)
    kind = SINKS[names[0]].kind
    written = ast.unparse(call.func)
    resolved = " or ".join(_display(tag) for tag in names)
    shown = f"`{written}(...)`" if resolved == written else f"`{written}(...)` ({resolved})"
    if kind == "code":
        message = f"{shown} runs a value that is not a string literal as code in this process"
    elif kind == "module":
        message = f"{shown} runs a module or file named by a value that is not a string literal"
    elif kind == "shell":
        message = f"{shown} runs a shell command that is not a string literal"
    else:
        message = f"{shown} with shell=True runs a command that is not a string literal"
    return message, _FIX[kind]


# Passes until global and nonlocal writes stop adding values; each pass only adds, so this is a safety cap.
_MAX_PASSES = 5


def find_unsafe_eval(source: str, path: str) -> list[Finding]:
    """Find MAIN-SANDBOX-0010 in Python ``source``; ``path`` is put in each finding as it is.

    A call is reported when it may be ``eval``, ``exec``, ``compile`` or one of
    their look-alikes (``SINKS``) and the argument that becomes code is not a
    string literal. A finding on a line with ``# mainsdk: allow
    MAIN-SANDBOX-0010`` is returned with ``silenced=True``. Findings are in
    file order. Raises ``SyntaxError`` (or ``ValueError`` for a NUL byte) when
    the source does not parse.
    """
    module = ast.parse(source, filename=path)
    extra: dict[tuple[int, str], Tags] = {}
    for _ in range(_MAX_PASSES):
        analysis = _Analysis(module, extra)
        analysis.run(module)
        if not analysis.extra_changed:
            break
    allowed = allowed_codes(source)
    lines = source.splitlines()
    findings = []
    for call, tags in analysis.hits.values():
        message, fix = _message(call, tags)
        findings.append(
            Finding(
                code=UNSAFE_EVAL,
                path=path,
                line=call.lineno,
                column=_column(lines, call.lineno, call.col_offset),
                message=message,
                fix=fix,
                silenced=UNSAFE_EVAL in allowed.get(call.lineno, set()),
            )
        )
    return sorted(findings, key=Finding.sort_key)
