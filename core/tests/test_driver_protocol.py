"""The driver contract as types (``mainsdk.driver.Driver``, ``SessionDriver``) says what the hookspecs say.

The protocols are what mypy checks a third party's driver against; the hookspecs are what pluggy calls
and core checks at load. These tests keep the two the same hook for hook, argument for argument.
"""

from __future__ import annotations

import inspect

import pytest
from mainsdk import hookspecs
from mainsdk.driver import Driver, SessionDriver
from mainsdk.errors import INVALID_OPTION, SandboxError
from mainsdk.hookspecs import hookimpl
from mainsdk.plugins import REQUIRED_DRIVER_HOOKS, check_driver


def hooks_of(protocol: type) -> list[str]:
    return [name for name in vars(protocol) if name.startswith("mainsdk_")]


def test_the_required_hooks_checked_at_load_are_the_driver_protocols() -> None:
    assert (
        list(REQUIRED_DRIVER_HOOKS)
        == hooks_of(Driver)
        == [
            "mainsdk_driver_capabilities",
            "mainsdk_driver_start",
            "mainsdk_driver_exec",
            "mainsdk_driver_collect",
            "mainsdk_driver_stop",
        ]
    )
    assert hooks_of(SessionDriver) == ["mainsdk_driver_write_file", "mainsdk_driver_read_file"]


@pytest.mark.parametrize("hook", hooks_of(Driver) + hooks_of(SessionDriver))
def test_each_protocol_hook_has_its_hookspecs_arguments_and_types(hook: str) -> None:
    typed = inspect.signature(getattr(SessionDriver, hook))
    spec = inspect.signature(getattr(hookspecs, hook))
    assert next(iter(typed.parameters)) == "self"
    # The protocol names the driver's own box type BoxT where the spec says Box (any object with an id).
    typed_arguments = [(p.name, str(p.annotation).replace("BoxT", "Box")) for p in typed.parameters.values()][1:]
    assert typed_arguments == [(p.name, str(p.annotation)) for p in spec.parameters.values()]
    assert str(typed.return_annotation).replace("BoxT", "Box") == str(spec.return_annotation)


def test_a_driver_missing_a_protocol_hook_is_still_refused_at_load() -> None:
    class NoCollect:
        @hookimpl
        def mainsdk_driver_capabilities(self) -> None: ...

        @hookimpl
        async def mainsdk_driver_start(self) -> None: ...

        @hookimpl
        async def mainsdk_driver_exec(self) -> None: ...

        @hookimpl
        async def mainsdk_driver_stop(self) -> None: ...

    with pytest.raises(SandboxError) as caught:
        check_driver(NoCollect())
    assert caught.value.code == INVALID_OPTION
    assert "driver NoCollect lacks the required hook mainsdk_driver_collect" in caught.value.message
    assert "mainsdk.driver.Driver" in caught.value.message
