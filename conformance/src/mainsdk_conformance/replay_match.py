"""Replay's matching: which recorded interaction answers a request, and the nearest one when none does.

Apart from ``replay.py`` (the server and its sockets) so the rule of a match reads on its own; ``ReplayServer``
has it as a base class.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from mainsdk_conformance.cassette import CREDENTIAL_QUERY, Cassette, Payloads, body_meaning
from mainsdk_conformance.profiles import Profile


def _describe(request: Mapping[str, Any], upstream: str) -> str:
    query = request.get("query") or []
    text = f"{request['method']} {upstream}:{request['path']}"
    return text + (f"?{urlencode([tuple(pair) for pair in query])}" if query else "")  # JSON keeps pairs as lists


def _drop_pointer(value: Any, pointer: str) -> None:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.strip("/").split("/")]
    for part in parts[:-1]:
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return
    if isinstance(value, dict):
        value.pop(parts[-1], None)


def _first_difference(recorded: Any, got: Any, where: str = "") -> str | None:
    """The first place two values differ, as ``/pointer: recorded X, got Y``."""
    if isinstance(recorded, dict) and isinstance(got, dict):
        for key in list(recorded) + [k for k in got if k not in recorded]:
            if key not in got or key not in recorded:
                return f"{where}/{key}: recorded {_short(recorded.get(key))}, got {_short(got.get(key))}"
            found = _first_difference(recorded[key], got[key], f"{where}/{key}")
            if found:
                return found
        return None
    if isinstance(recorded, (list, tuple)) and isinstance(got, (list, tuple)):
        for index, (a, b) in enumerate(zip(recorded, got, strict=False)):
            found = _first_difference(a, b, f"{where}/{index}")
            if found:
                return found
        if len(recorded) != len(got):
            return f"{where or '/'}: recorded {len(recorded)} items, got {len(got)}"
        return None
    if recorded != got:
        return f"{where or '/'}: recorded {_short(recorded)}, got {_short(got)}"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Matching:
    """The matching of ``ReplayServer`` (a base class of it): a request's meaning, its match, the nearest miss."""

    profile: Profile
    payloads: Payloads
    path: Path
    cassette: Cassette
    _missing: bool
    _used: list[bool]

    def _meaning(self, upstream: str, request: Mapping[str, Any]) -> tuple[Any, ...]:
        query = sorted(
            (str(k), self._steady(str(v)))
            for k, v in request.get("query") or []
            if str(k).lower() not in CREDENTIAL_QUERY
        )
        body = copy.deepcopy(body_meaning(request.get("body"), self.payloads))
        if body[0] == "json":
            for pointer in self.profile.ignore_json:
                _drop_pointer(body[1], pointer)
        # Volatile values count as one placeholder wherever they are: a JSON body, or the JSON messages of a
        # Connect stream (E2B's process Start carries the command line), or the path (a Vercel session's
        # sandbox is read by its name, which carries the session id).
        path = self._steady(request["path"])
        return (upstream, request["method"].upper(), path, query, self._steady(body))

    def _steady(self, value: Any) -> Any:
        """``value`` with the profile's volatile values (ids that change every run) replaced by one placeholder."""
        if not self.profile.volatile:
            return value
        if isinstance(value, str):
            for pattern in self.profile.volatile:
                value = re.sub(pattern, "<volatile>", value)
            return value
        if isinstance(value, dict):
            return {key: self._steady(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self._steady(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self._steady(item) for item in value)
        return value

    def _lane_of(self, index: int) -> str:
        interaction = self.cassette.interactions[index]
        request = interaction["request"]
        return self.profile.lane(request["path"], request.get("headers") or {})

    def _match(self, upstream: str, request: dict[str, Any], lane: str) -> tuple[int | None, str | None]:
        """The interaction answering ``request``, or a message naming it and the nearest recorded one."""
        if self._missing:
            return None, (
                f"{_describe(request, upstream)} came, but there is no cassette {self.path}; record it with "
                f"`mainsdk-conformance record --driver {self.profile.name}` or author it"
            )
        got = self._meaning(upstream, request)
        interactions = self.cassette.interactions
        unused = [i for i in range(len(interactions)) if not self._used[i]]
        matching = [
            i
            for i in unused
            if self._meaning(interactions[i].get("upstream", "api"), interactions[i]["request"]) == got
        ]
        in_lane = [i for i in unused if self._lane_of(i) == lane]
        if lane:
            # One sandbox's requests in the recorded order: only the next one of its lane may answer.
            if in_lane and in_lane[0] in matching:
                return in_lane[0], None
            if matching:
                expected = interactions[in_lane[0]] if in_lane else None
                next_text = (
                    f"#{in_lane[0]} {_describe(expected['request'], expected.get('upstream', 'api'))}"
                    if expected
                    else "nothing more"
                )
                return None, (
                    f"{_describe(request, upstream)} came out of order for sandbox {lane}: it is recorded as "
                    f"#{matching[0]}, but {next_text} comes first"
                )
        elif matching:
            return matching[0], None  # creates carry no sandbox id: any order, identical ones in turn
        return None, self._nearest(upstream, request, got)

    def _nearest(self, upstream: str, request: Mapping[str, Any], got: tuple[Any, ...]) -> str:
        text = f"{_describe(request, upstream)} is not in the cassette {self.path}"
        candidates = []
        for index, interaction in enumerate(self.cassette.interactions):
            recorded = self._meaning(interaction.get("upstream", "api"), interaction["request"])
            differing = sum(a != b for a, b in zip(recorded, got, strict=True))
            closeness = difflib.SequenceMatcher(None, recorded[2], got[2]).ratio()
            candidates.append((differing, -closeness, self._used[index], index, recorded))
        if not candidates:
            return text + " (it records no request)"
        differing, _, used, index, recorded = min(candidates)
        interaction = self.cassette.interactions[index]
        names = ("upstream", "method", "path", "query", "body")
        where = []
        for name, a, b in zip(names, recorded, got, strict=True):
            if a != b:
                # A JSON body is pointed into by its own pointers, not the (kind, value) pair around it.
                inside = name == "body" and a[0] == b[0] == "json"
                difference = _first_difference(a[1], b[1]) if inside else _first_difference(a, b)
                where.append(f"{name}: {difference or 'differs'}")
        state = " (already used)" if used else ""
        detail = "; ".join(where) if where else "identical, but already answered"
        nearest = _describe(interaction["request"], interaction.get("upstream", "api"))
        return f"{text}; nearest recorded: #{index}{state} {nearest} — {detail}"
