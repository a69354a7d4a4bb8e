"""The driver's own cassettes (``cassettes/egress``, ``cassettes/packages``) replayed, authored, or recorded live.

The same three modes as the conformance suite's cassettes (``mainsdk_conformance.plugin.conformance_replay``):

- replay (the default): the test's cassette on a loopback replay server;
- authoring: ``MAINSDK_VERCEL_AUTHOR=<stand-in URL>`` (``conformance/author.py --packages`` and
  ``test_egress.py --author`` set it): recorded through ``conformance/simulator.py``, ``made: authored``;
- live: ``pytest mainsdk_vercel/tests/test_packages.py mainsdk_vercel/tests/test_egress.py --conformance-record``
  with ``VERCEL_TOKEN`` (or ``VERCEL_OIDC_TOKEN``) and ``VERCEL_PROJECT_ID`` (``VERCEL_TEAM_ID`` for a team),
  forwarded to Vercel (or to ``--conformance-upstream api=URL``); then ``python
  mainsdk_vercel/tests/conformance/author.py --finish`` puts the placeholder project and team back in these
  folders too (``finish_own``).

As in the suite's record mode, a live recording keeps an authored cassette that holds faults (``keep_on_record``:
the test is skipped), records again one edited by hand and notes what it re-checked (``meta.rechecked``), and
writes only what a passing test recorded: a failing one leaves the cassette as it was, and warns when that
cassette held hand-set answers the live run did not reproduce. The recording is written to a folder of the
test's until the test has passed, so the test can read what it recorded before it replaces the cassette.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mainsdk_conformance.cassette import authored_meta, hand_set, keep_on_record
from mainsdk_conformance.profiles import VERCEL
from mainsdk_conformance.replay import ReplayServer, parse_upstreams

HERE = Path(__file__).parent
AUTHOR_ENV = "MAINSDK_VERCEL_AUTHOR"
PROJECT = "prj_conformance"  # the placeholders the cassettes replay with (conformance/conftest.py's)
TEAM = "team_conformance"
TOKEN = "replay-token-not-a-secret"  # replay needs a token of some kind; it is not matched, and not a secret


def _conformance_conftest() -> Any:
    """``conformance/conftest.py``, by path (its name is every conftest's): its ``recorder_credentials``."""
    spec = importlib.util.spec_from_file_location("vercel_conformance_conftest", HERE / "conformance" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class OwnCassette:
    """One test's cassette and the server on it; ``token``, ``project`` and ``team`` are what the driver must use."""

    def __init__(self, config: pytest.Config, path: Path, staging: Path, named: dict[str, str] | None = None) -> None:
        self.path = path  # where the test reads its cassette: the real one, or (recording) the fresh recording
        self.target = path
        self.mode = "replay"
        self.token, self.project, self.team = TOKEN, PROJECT, TEAM
        self.rechecked: list[str] = []
        self.how = ""
        upstream = os.environ.get(AUTHOR_ENV)
        if config.getoption("conformance_record"):
            kept = keep_on_record(path)
            if kept is not None:
                pytest.skip(f"recording keeps the cassette: {kept}")
            self.rechecked = hand_set(path)
            self.mode = "live"
            self.token, claims = _conformance_conftest().recorder_credentials()
            self.project = os.environ.get("VERCEL_PROJECT_ID") or claims.get("project_id") or ""
            self.team = os.environ.get("VERCEL_TEAM_ID") or claims.get("owner_id") or None  # type: ignore[assignment]
            if not self.project:
                raise pytest.UsageError(
                    "recording vercel-sandbox needs VERCEL_PROJECT_ID (and VERCEL_TEAM_ID for a team)"
                )
            upstreams = parse_upstreams(config.getoption("conformance_upstream"))
            secrets = [os.environ[name] for name in VERCEL.credential_env if os.environ.get(name)]
            self.path = staging / path.name
            self.server = ReplayServer.recorder(VERCEL, self.path, upstreams=upstreams, secrets=secrets, named=named)
        elif upstream:
            self.mode = "author"
            self.path = staging / path.name
            self.server = ReplayServer.recorder(VERCEL, self.path, upstreams={"api": upstream}, named=named)
        else:
            self.server = ReplayServer.replayer(VERCEL, path, named=named)
        self.server.start()

    @property
    def recording(self) -> bool:
        """Whether requests go on to an API (the stand-in or Vercel) and are written down."""
        return self.mode != "replay"

    def stop(self) -> list[str]:
        """Stop the server; a recording is written where the test reads it (``path``). The replay's problems."""
        self.server.stop()
        if self.recording:
            if self.server.cassette.interactions:
                self.server.save()
            return []
        return self.server.problems(final=True)

    def keep(self, passed: bool) -> None:
        """At the test's end: a recording of a passing test replaces the cassette; a failing one changes nothing."""
        if not self.recording:
            return
        if passed and self.path.exists():
            data = json.loads(self.path.read_text())
            if self.mode == "author":
                data["meta"] = authored_meta(data["meta"], test=self.target.stem, how=self.how)
            elif self.rechecked:
                data["meta"]["rechecked"] = self.rechecked  # the hand-set answers this live recording replaced
            self.target.parent.mkdir(parents=True, exist_ok=True)
            self.target.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        elif self.mode == "live" and self.rechecked:
            warnings.warn(
                pytest.PytestWarning(
                    f"{self.target.name}: the live run did not reproduce what was set by hand "
                    f"({'; '.join(self.rechecked)}); the authored cassette is kept: review it against the provider"
                ),
                stacklevel=1,
            )


@pytest.fixture
def own_cassette(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., OwnCassette]]:
    """Open the test's cassettes (``own_cassette(path, named=..., how=...)``); each is kept or not at its end."""
    opened: list[OwnCassette] = []

    def open_one(path: Path, named: dict[str, str] | None = None, how: str = "") -> OwnCassette:
        staging = tmp_path / f"recorded-{len(opened)}"
        staging.mkdir()
        cassette = OwnCassette(request.config, path, staging, named)
        cassette.how = how
        opened.append(cassette)
        return cassette

    yield open_one
    from mainsdk_conformance.plugin import PASSED_KEY  # here: the plugin is pytest's to import (and rewrite) first

    passed = request.node.stash.get(PASSED_KEY, False)
    for cassette in opened:
        cassette.keep(passed)


def finish_own(folder: Path, project: str | None, team: str | None) -> list[Path]:
    """Put the placeholder project and team back in the cassettes under ``folder`` (after a live recording)."""
    changed = []
    for path in sorted(folder.rglob("*.json")):
        text = path.read_text()
        fixed = text
        for real, placeholder in ((project, PROJECT), (team, TEAM)):
            if real:
                fixed = re.sub(rf"\b{re.escape(json.dumps(real)[1:-1])}\b", placeholder, fixed)
        if fixed != text:
            path.write_text(fixed)
            changed.append(path)
    return changed


def copy_for_recording(target: Path, names: list[str]) -> Path:
    """A copy of this folder's ``names`` (test modules, helpers, cassettes), to record in without touching these."""
    for name in names:
        source = HERE / name
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, destination)
        else:
            shutil.copy(source, destination)
    return target
