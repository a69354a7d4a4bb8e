"""The way the host runs a tool for a box: a private empty folder, and only the listed index settings."""

from __future__ import annotations

import os
import stat

import pytest
from mainsdk.errors import INVALID_OPTION, SandboxError
from mainsdk_driverkit.host_tools import INDEX_VARIABLES, private_folder, tool_environment


def test_the_tools_environment_keeps_the_index_settings_and_nothing_else_of_pip_uv_or_python() -> None:
    app = {
        "HOME": "/home/app", "HTTPS_PROXY": "http://proxy:3128", "SSL_CERT_FILE": "/etc/ssl/ca.pem",
        "PIP_INDEX_URL": "https://user:token@mirror/simple", "PIP_FIND_LINKS": "/opt/wheels https://x/links",
        "UV_DEFAULT_INDEX": "https://mirror/simple", "UV_FIND_LINKS": "/opt/wheels,/srv/w",
        # What would steer an installer another way: all dropped.
        "PIP_CONFIG_FILE": "pip.conf", "PIP_NO_BINARY": ":all:", "PIP_REQUIRE_VIRTUALENV": "1",
        "UV_CONFIG_FILE": "uv.toml", "UV_WORKING_DIR": ".", "UV_NO_BUILD_ISOLATION": "1", "UV_CONSTRAINT": "c.txt",
        "PYTHONPATH": ".", "PYTHONSTARTUP": "x.py", "PATH": ".:/usr/bin::bin:/bin",
    }  # fmt: skip
    kept = (
        "HOME",
        "HTTPS_PROXY",
        "SSL_CERT_FILE",
        "PIP_INDEX_URL",
        "PIP_FIND_LINKS",
        "UV_DEFAULT_INDEX",
        "UV_FIND_LINKS",
    )
    assert tool_environment(app) == {
        **{name: app[name] for name in kept},
        "PATH": "/usr/bin:/bin",  # no relative entry: each names the current folder's
        "PIP_CONFIG_FILE": os.devnull,  # pip reads no configuration file at all
        "UV_NO_CONFIG": "1",
    }
    assert set(kept) - {"HOME", "HTTPS_PROXY", "SSL_CERT_FILE"} <= INDEX_VARIABLES


@pytest.mark.parametrize(
    ("name", "value", "entry"), [("PIP_FIND_LINKS", "/abs wh", "wh"), ("UV_FIND_LINKS", "./w", "./w")]
)
def test_a_relative_find_links_entry_is_refused_naming_the_variable(name: str, value: str, entry: str) -> None:
    with pytest.raises(SandboxError) as caught:
        tool_environment({name: value})
    assert caught.value.code == INVALID_OPTION and caught.value.ran is False
    assert f"{name} names the relative path {entry!r}" in caught.value.message


def test_a_private_folder_is_new_empty_and_the_users_alone_and_is_removed_after() -> None:
    with private_folder() as first, private_folder() as second:
        assert first != second and os.listdir(first) == []
        assert stat.S_IMODE(os.stat(first).st_mode) == 0o700
        open(os.path.join(first, "left"), "w").close()
    assert not os.path.exists(first) and not os.path.exists(second)
