"""Every public argument checked once at the boundary; retry safety; drivers checked at load. No driver needed."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from mainsdk import arguments, errors
from mainsdk.config import AppConfig, load_config_text, parse_sandbox_config
from mainsdk.engine import SandboxDeps, sandbox_deps
from mainsdk.errors import BoxGone, SandboxError
from mainsdk.files import file_ref_id
from mainsdk.hookspecs import hookimpl
from mainsdk.plugins import make_plugin_manager
from mainsdk.preflight import check_idle, lower_limits, resolve_env
from mainsdk.secrets import secret


def refusal(call: Callable[[], object]) -> SandboxError:
    with pytest.raises(SandboxError) as caught:
        call()
    error = caught.value
    assert (error.code, error.status, error.retryable, error.ran) == (errors.INVALID_OPTION, 400, False, False)
    return error


# (what is called, the argument the message must name, a word of the fix or the type it must name)
WRONG: list[tuple[str, Callable[[], object], str, str]] = [
    ("files list", lambda: arguments.files(["a.txt"]), "files", "list"),
    ("files None value", lambda: arguments.files({"a": None}), "files['a']", "NoneType"),
    ("files int value", lambda: arguments.files({"a": 5}), "files['a']", "int"),
    ("files Path value", lambda: arguments.files({"a": pathlib.Path("/etc/passwd")}), "files['a']", "read_bytes"),
    ("files non-str key", lambda: arguments.files({1: "x"}), "files", "non-empty string"),
    ("files empty name", lambda: arguments.files({"": "x"}), "files", "non-empty string"),
    ("files NUL path", lambda: arguments.files({"a\0b": "x"}), "files", "NUL"),
    ("files dotdot", lambda: arguments.files({"../a": "x"}), "files", "leaves the work folder"),
    ("files absolute", lambda: arguments.files({"/etc/a": "x"}), "files", "absolute"),
    ("files file and folder", lambda: arguments.files({"a": "1", "a/b": "2"}), "files", "also the folder"),
    ("files long name", lambda: arguments.files({"a" * 300: "x"}), "files", "too long"),
    ("files surrogate text", lambda: arguments.files({"a": "\udc80"}), "files['a']", "surrogate"),
    ("env list", lambda: arguments.env(["A=1"]), "env", "list"),
    ("env name with =", lambda: arguments.env({"A=B": "1"}), "env", "variable name"),
    ("env name with NUL", lambda: arguments.env({"A\0": "1"}), "env", "variable name"),
    ("env non-str name", lambda: arguments.env({1: "1"}), "env", "variable name"),
    ("env value NUL", lambda: arguments.env({"A": "x\0y"}), "env.A", "NUL"),
    ("env value int", lambda: arguments.env({"A": 1}), "env.A", "int"),
    ("env value surrogate", lambda: arguments.env({"A": "\ud800"}), "env.A", "surrogate"),
    ("env value too long", lambda: arguments.env({"A": "x" * 200_000}), "env.A", "bytes"),
    ("limits str", lambda: arguments.limits("1s"), "limits", "str"),
    ("limits unknown key", lambda: arguments.limits({"cpu": 1}), "limits.cpu", "not a limit"),
    ("limits non-str key", lambda: arguments.limits({1: 1}), "limits.1", "not a limit"),
    ("limits bool", lambda: arguments.limits({"memory": True}), "limits.memory", "yes/no"),
    ("limits nan", lambda: arguments.limits({"timeout": float("nan")}), "limits.timeout", "finite"),
    ("limits huge int", lambda: arguments.limits({"timeout": 10**400}), "limits.timeout", "too large"),
    ("limits list value", lambda: arguments.limits({"timeout": [1]}), "limits.timeout", "limit value"),
    ("on_output int", lambda: arguments.listener(1), "on_output", "int"),
    ("on_output one argument", lambda: arguments.listener(lambda data: None), "on_output", "(stream, data)"),
    ("code bytes", lambda: arguments.code(b"print(1)"), "code", "bytes"),
    ("code NUL", lambda: arguments.code("print(1)\0"), "code", "NUL"),
    ("code surrogate", lambda: arguments.code("print('\udc80')"), "code", "surrogate"),
    ("language None", lambda: arguments.language(None), "language", "NoneType"),
    ("network str", lambda: arguments.hosts("pypi.org"), "network", "str"),
    ("network None host", lambda: arguments.hosts([None]), "network host", "NoneType"),
    ("args None", lambda: arguments.program_args(None), "args", "NoneType"),
    ("args str", lambda: arguments.program_args("-c 1"), "args", "str"),
    ("args int item", lambda: arguments.program_args(["-c", 1]), "args[1]", "int"),
    ("args NUL", lambda: arguments.program_args(["a\0"]), "args[0]", "NUL"),
    ("args too long", lambda: arguments.program_args(["x" * 200_000]), "args[0]", "bytes"),
    ("program empty", lambda: arguments.program(""), "program", "empty"),
    ("file ref None", lambda: file_ref_id(None), "ref", "NoneType"),
    ("data None", lambda: arguments.file_data(None, "data"), "data", "NoneType"),
    ("bool as a number", lambda: arguments.count(True, "max_processes", minimum=1, maximum=9), "max_processes", "bool"),
]


@pytest.mark.parametrize(("call", "argument", "hint"), [w[1:] for w in WRONG], ids=[w[0] for w in WRONG])
def test_a_wrong_argument_is_0001_naming_the_argument(call: Callable[[], object], argument: str, hint: str) -> None:
    error = refusal(call)
    assert error.message.startswith(f"{argument}: "), error.message
    assert hint in error.message


def test_right_arguments_come_back_in_one_form() -> None:
    assert arguments.files({"a.txt": "é", "d/b": b"\0\1", "c": bytearray(b"x")}) == {
        "a.txt": "é".encode(),
        "d/b": b"\0\1",
        "c": b"x",
    }
    assert arguments.files(None) == {} and arguments.env(None) == {} and arguments.limits(None) == {}
    assert arguments.env({"A": "1", "K": secret("KEY")}) == {"A": "1", "K": secret("KEY")}
    assert arguments.program_args(("-c", "")) == ("-c", "")
    assert arguments.hosts(None) == () and arguments.hosts(["pypi.org"]) == ("pypi.org",)


CONFIG = load_config_text("sandbox: { limits: { timeout: 30s, memory: 512MB } }\n")


def test_call_limits_are_bounded_below_and_never_overflow() -> None:
    error = refusal(lambda: lower_limits({"memory": "100KB"}, CONFIG))
    assert "limits.memory 100KB is below the 4MB" in error.message
    tiny = load_config_text("sandbox: { limits: { memory: 1MB } }\n")
    assert "sandbox.limits.memory" in refusal(lambda: lower_limits(None, tiny)).message
    no_disk = load_config_text("permissions: { disk: { temp: { max: 1KB } } }\n")
    assert "permissions.disk.temp.max" in refusal(lambda: lower_limits(None, no_disk)).message
    huge = refusal(lambda: lower_limits({"timeout": "9" * 40 + "h"}, CONFIG)).message
    assert huge.startswith("limits.timeout: ") and "too large" in huge
    refusal(lambda: lower_limits({"timeout": Decimal("Infinity")}, CONFIG))
    refusal(lambda: lower_limits({"timeout": -1}, CONFIG))
    assert refusal(lambda: check_idle("99999999h")).message.startswith("idle: ")
    refusal(lambda: check_idle(float("inf")))


def test_a_secret_resolver_that_returns_no_string_is_named() -> None:
    config = load_config_text("sandbox: { secrets: [KEY] }\n")
    error = refusal(lambda: resolve_env({"K": secret("KEY")}, config, lambda name: b"bytes"))  # type: ignore[arg-type, return-value]
    assert "deps.secret" in error.message and "bytes" not in error.message.split("returned")[0]


def test_sandbox_deps_refuse_a_wrong_type_naming_the_field() -> None:
    assert "deps.config" in refusal(lambda: SandboxDeps(config={"sandbox": {}})).message
    assert "deps.tenancy" in refusal(lambda: SandboxDeps(tenancy="t1")).message  # type: ignore[arg-type]
    assert "deps.files" in refusal(lambda: SandboxDeps(files=object())).message  # type: ignore[arg-type]
    assert "deps.network" in refusal(lambda: SandboxDeps(network="pypi.org")).message
    assert "deps.load_entrypoints" in refusal(lambda: SandboxDeps(load_entrypoints=0)).message  # type: ignore[arg-type]
    assert "deps.driver" in refusal(lambda: SandboxDeps(driver="local")).message
    assert "'drvier' is not a field" in refusal(lambda: sandbox_deps({"drvier": None})).message
    assert "deps:" in refusal(lambda: sandbox_deps(5)).message


def test_the_sandbox_section_alone_is_a_config() -> None:
    # The README puts SandboxDeps(config=...) beside parse_sandbox_config(raw): that pairing works.
    deps = SandboxDeps(config=parse_sandbox_config({"driver": "local", "limits": {"timeout": "5s"}}))
    assert isinstance(deps.config, AppConfig) and deps.config.sandbox.limits.timeout == 5.0


def test_retryable_only_for_an_outage_where_nothing_ran() -> None:
    outage = SandboxError(errors.DRIVER_UNAVAILABLE, "provider down")
    assert (outage.ran, outage.retryable) == (False, True)
    assert not SandboxError(errors.DRIVER_UNAVAILABLE, "x", ran=None).retryable
    assert not SandboxError(errors.DRIVER_UNAVAILABLE, "x", ran=True).retryable
    assert not SandboxError(errors.DRIVER_UNAVAILABLE, "x", retryable=False).retryable
    assert not SandboxError(errors.INVALID_OPTION, "x", retryable=True).retryable  # only an outage is retried
    gone = BoxGone("the box is gone")
    assert (gone.code, gone.status, gone.ran, gone.retryable) == (errors.NO_SESSION, 404, False, False)


def test_an_error_after_the_command_was_sent_may_have_run() -> None:
    cut = SandboxError(errors.DRIVER_UNAVAILABLE, "stream reset").after_exec()
    assert (cut.ran, cut.retryable) == (None, False)
    assert "may have run" in cut.message and "not retryable" in str(cut)
    collected = SandboxError(errors.DRIVER_UNAVAILABLE, "collect failed").after_exec(ran=True)
    assert (collected.ran, collected.retryable) == (True, False)
    said = SandboxError(errors.DRIVER_UNAVAILABLE, "refused before sending", ran=False).after_exec()
    assert (said.ran, said.retryable, said.message) == (False, True, "refused before sending")


class _Complete:
    @hookimpl
    def mainsdk_driver_capabilities(self) -> Any:
        raise NotImplementedError

    @hookimpl
    async def mainsdk_driver_start(self, spec: Any) -> Any:
        raise NotImplementedError

    @hookimpl
    async def mainsdk_driver_exec(self, box: Any, command: Any, output: Any) -> Any:
        raise NotImplementedError

    @hookimpl
    async def mainsdk_driver_collect(self, box: Any, max_bytes: int) -> Any:
        raise NotImplementedError


class MissingStop(_Complete):
    pass


class UnmarkedStop(_Complete):
    async def mainsdk_driver_stop(self, box: Any) -> None:  # no @hookimpl: pluggy would never call it
        pass


class MarkedStop(_Complete):
    @hookimpl
    async def mainsdk_driver_stop(self, box: Any) -> None:
        pass


def test_a_driver_missing_a_hook_is_refused_at_load_naming_it() -> None:
    error = refusal(lambda: make_plugin_manager(MissingStop(), load_entrypoints=False))
    assert "driver MissingStop lacks the required hook mainsdk_driver_stop" in error.message
    error = refusal(lambda: make_plugin_manager(object(), load_entrypoints=False))
    assert "mainsdk_driver_capabilities" in error.message


def test_a_hook_method_without_hookimpl_is_refused_at_load_naming_it() -> None:
    error = refusal(lambda: make_plugin_manager(UnmarkedStop(), load_entrypoints=False))
    assert "driver UnmarkedStop: mainsdk_driver_stop is not marked as a hook" in error.message
    assert "@hookimpl" in error.message
    make_plugin_manager(MarkedStop(), load_entrypoints=False)  # complete and marked: accepted
