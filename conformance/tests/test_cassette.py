"""Cassettes store bodies readably, give back the exact bytes, and never hold a credential."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from mainsdk_conformance.cassette import (
    FAKE_KEYS,
    SCRUBBED,
    CassetteError,
    body_meaning,
    decode_body,
    encode_body,
    find_credentials,
    load,
    scrub,
    scrub_fields,
)
from mainsdk_conformance.profiles import E2B, VERCEL

E2B_KEY = "e2b_" + "ab" * 20
JSON_TYPE = {"content-type": "application/json"}


def cassette(interactions: list[dict[str, Any]]) -> dict[str, Any]:
    meta = {"provider": "e2b", "api": "v2", "date": "2026-11-29", "made": "authored"}
    return {"format": "mainsdk-cassette/1", "meta": meta, "interactions": interactions}


@pytest.mark.parametrize(
    "raw",
    [
        b'{"sandboxID":"sbx1","n":1}',  # Go's encoding/json
        b'{"sandboxID":"sbx1","n":1}\n',  # json.Encoder adds a newline
        b'{"a": [1, 2], "b": "\\u00e9"}',  # Python's json.dumps
        b'{"a":1.0E5}',  # JSON that no dumper writes back the same: kept as text
        b"not json at all",
    ],
)
def test_a_json_or_text_body_comes_back_byte_for_byte(raw: bytes) -> None:
    stored = encode_body(raw, JSON_TYPE, request=False)
    assert decode_body(stored) == raw
    if raw.startswith(b'{"sandboxID"'):
        assert stored is not None and stored["json"] == {"sandboxID": "sbx1", "n": 1}


def test_binary_is_base64_and_exact() -> None:
    stored = encode_body(bytes(range(256)), {"content-type": "application/octet-stream"}, request=False)
    assert stored == {"base64": base64.b64encode(bytes(range(256))).decode()}
    assert decode_body(stored) == bytes(range(256))


def test_a_connect_stream_is_stored_as_its_frames() -> None:
    frames = [(0, b'{"event":{"start":{"pid":1}}}'), (0, b'{"event":{"data":{"stdout":"aGkK"}}}'), (2, b"{}")]
    raw = b"".join(bytes([f]) + len(p).to_bytes(4, "big") + p for f, p in frames)
    stored = encode_body(raw, {"content-type": "application/connect+json"}, request=False)
    assert stored == {
        "connect": [
            {"flags": 0, "json": {"event": {"start": {"pid": 1}}}},
            {"flags": 0, "json": {"event": {"data": {"stdout": "aGkK"}}}},
            {"flags": 2, "json": {}},
        ]
    }
    assert decode_body(stored) == raw


def test_ndjson_is_stored_as_its_lines() -> None:
    raw = b'{"stream":"stdout","data":"hi\\n"}\n{"stream":"stderr","data":"x"}\n'
    stored = encode_body(raw, {"content-type": "application/x-ndjson"}, request=False)
    assert stored == {
        "ndjson": [{"json": {"stream": "stdout", "data": "hi\n"}}, {"json": {"stream": "stderr", "data": "x"}}]
    }
    assert decode_body(stored) == raw


def test_multipart_and_targz_requests_are_matched_by_content_not_boundary_or_timestamps() -> None:
    def multipart(boundary: str) -> bytes:
        return (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="/work/a.txt"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\nhello\r\n--{boundary}--\r\n"
        ).encode()

    one = encode_body(multipart("aaa"), {"content-type": "multipart/form-data; boundary=aaa"}, request=True)
    two = encode_body(multipart("bbb"), {"content-type": "multipart/form-data; boundary=bbb"}, request=True)
    assert one is not None and one["multipart"][0]["filename"] == "/work/a.txt"
    assert body_meaning(one) == body_meaning(two)

    def targz(mtime: int) -> bytes:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w:gz") as archive:
            info = tarfile.TarInfo("data.csv")
            info.size, info.mtime = 4, mtime
            archive.addfile(info, io.BytesIO(b"a,b\n"))
        return out.getvalue()

    first, second = targz(1), targz(2)
    assert first != second
    stored = encode_body(first, {}, request=True)
    assert stored is not None and stored["targz"][0]["name"] == "data.csv"
    assert body_meaning(stored) == body_meaning(encode_body(second, {}, request=True))


def test_a_large_uploaded_part_is_kept_by_digest_and_still_matched_by_content() -> None:
    # Wheels uploaded for packages: megabytes a cassette need not carry, since a request is only matched.
    def multipart(content: bytes) -> bytes:
        head = 'Content-Disposition: form-data; name="file"; filename="/tmp/w/x-1.0-py3-none-any.whl"\r\n\r\n'
        return b"--b\r\n" + head.encode() + content + b"\r\n--b--\r\n"

    wheel = bytes(range(256)) * 1025  # 262,400 bytes: past the 256 KiB the digest starts at
    headers = {"content-type": "multipart/form-data; boundary=b"}
    stored = encode_body(multipart(wheel), headers, request=True)
    assert stored is not None
    part = stored["multipart"][0]
    assert set(part) == {"name", "filename", "content_type", "sha256", "size"} and part["size"] == len(wheel)
    assert len(json.dumps(stored)) < 1000
    assert body_meaning(stored) == body_meaning(encode_body(multipart(wheel), headers, request=True))
    changed = wheel[:-1] + b"\x00"
    assert body_meaning(stored) != body_meaning(encode_body(multipart(changed), headers, request=True))
    small = encode_body(multipart(b"hello"), headers, request=True)
    assert small is not None and small["multipart"][0]["text"] == "hello"  # small parts stay readable


def test_json_requests_match_by_value_not_spelling() -> None:
    one = encode_body(b'{"a":1,"b":[1,2]}', JSON_TYPE, request=True)
    two = encode_body(b'{ "b": [1, 2], "a": 1 }', JSON_TYPE, request=True)
    assert body_meaning(one) == body_meaning(two)


@pytest.mark.parametrize(
    ("interaction", "where"),
    [
        ({"request": {"method": "POST", "path": "/v2/sandboxes", "headers": {"X-API-KEY": "k"}}}, "X-API-KEY"),
        (
            {
                "request": {"method": "POST", "path": "/v2/sandboxes"},
                "response": {"status": 201, "body": {"json": {"sandboxID": "s", "envdAccessToken": "abc"}}},
            },
            "/interactions/0/response/body/json/envdAccessToken",
        ),
        ({"request": {"method": "GET", "path": f"/x/{E2B_KEY}"}}, "/interactions/0/request/path"),
        (
            {
                "request": {"method": "GET", "path": "/files"},
                "response": {"status": 200, "body": {"base64": base64.b64encode(b"key=" + E2B_KEY.encode()).decode()}},
            },
            "/interactions/0/response/body/base64",
        ),
        (
            {
                "request": {"method": "POST", "path": "/process.Process/Start"},
                "response": {
                    "status": 200,
                    "body": {
                        "connect": [
                            {"flags": 0, "json": {"data": {"stdout": base64.b64encode(E2B_KEY.encode()).decode()}}}
                        ]
                    },
                },
            },
            "/interactions/0/response/body/connect/0/json/data/stdout",
        ),
        ({"request": {"method": "GET", "path": "/f", "query": [["signature", "v1_abc"]]}}, "signature"),
    ],
)
def test_a_cassette_holding_a_credential_is_refused_naming_where(
    tmp_path: Path, interaction: dict[str, Any], where: str
) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cassette([interaction])))
    with pytest.raises(CassetteError) as caught:
        load(path)
    message = str(caught.value)
    assert str(path) in message and where in message and "holds credentials" in message
    assert E2B_KEY not in message  # the refusal does not print the credential it found


def test_scrub_removes_every_credential_and_the_result_loads(tmp_path: Path) -> None:
    data = cassette(
        [
            {
                "request": {
                    "method": "POST",
                    "path": "/v2/sandboxes",
                    "headers": {"X-API-KEY": E2B_KEY, "Authorization": "Bearer abcdefghijklmnopqrstuvwxyz"},
                    "body": {"json": {"templateID": "base", "note": f"key {E2B_KEY}"}},
                },
                "response": {
                    "status": 201,
                    "body": {"json": {"sandboxID": "s", "envdAccessToken": "tok", "trafficAccessToken": "tok2"}},
                },
            },
            {"request": {"method": "GET", "path": "/files", "query": [["path", "/a"], ["signature", "sig"]]}},
            {
                "request": {"method": "GET", "path": "/o"},
                "response": {"status": 200, "body": {"text": "my-own-secret"}},
            },
        ]
    )
    assert len(find_credentials(data)) == 6
    clean = scrub(data, values=["my-own-secret"])
    assert find_credentials(clean) == []
    text = json.dumps(clean)
    assert E2B_KEY not in text and "my-own-secret" not in text and '"tok"' not in text
    assert clean["interactions"][0]["request"]["headers"]["X-API-KEY"] == SCRUBBED
    assert clean["interactions"][1]["request"]["query"] == [["path", "/a"], ["signature", SCRUBBED]]
    path = tmp_path / "clean.json"
    path.write_text(json.dumps(clean))
    assert load(path).interactions[0]["response"]["body"]["json"]["sandboxID"] == "s"


def test_the_suites_made_up_key_is_allowed_and_kept() -> None:
    [fake] = FAKE_KEYS
    data = cassette([{"request": {"method": "GET", "path": "/o"}, "response": {"status": 200, "body": {"text": fake}}}])
    assert find_credentials(data) == [] and scrub(data) == data


def test_metadata_is_required(tmp_path: Path) -> None:
    data = cassette([])
    del data["meta"]["made"]
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    with pytest.raises(CassetteError, match="meta lacks made"):
        load(path)


def test_the_check_command_refuses_a_cassette_holding_a_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mainsdk_conformance.cli import main

    clean = tmp_path / "clean.json"
    clean.write_text(json.dumps(cassette([{"request": {"method": "GET", "path": "/o"}, "response": {"status": 200}}])))
    assert main(["check", str(clean)]) == 0
    dirty = tmp_path / "sub" / "dirty.json"
    dirty.parent.mkdir()
    dirty.write_text(
        json.dumps(cassette([{"request": {"method": "GET", "path": "/o", "headers": {"X-API-KEY": "k"}}}]))
    )
    assert main(["check", str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert "1 cassettes clean, 1 refused" in out.out and "dirty.json holds credentials" in out.err


def test_the_check_command_refuses_an_egress_value_left_in_a_create(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mainsdk_conformance.cli import main

    rules = {"a.test": [{"transform": {"headers": {"X-Key": "left-by-hand"}}}]}
    create = {"request": {"method": "POST", "path": "/v2/sandboxes", "body": {"json": {"network": {"rules": rules}}}}}
    path = tmp_path / "egress.json"
    path.write_text(json.dumps(cassette([create])))  # an e2b cassette: E2B's profile names the field
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr()
    assert "holds a value in a secret field" in out.err and "left-by-hand" not in out.err + out.out


def _check_in_a_process(*paths: str) -> subprocess.CompletedProcess[str]:
    # A process of its own, with a deadline: a FIFO blocked the old check in its open, /dev/zero filled its memory.
    command = [sys.executable, "-c", "import sys; from mainsdk_conformance.cli import main; sys.exit(main())"]
    return subprocess.run([*command, "check", *paths], capture_output=True, text=True, timeout=60, check=False)


def test_the_check_command_refuses_a_fifo_a_device_and_deep_nesting_naming_each(tmp_path: Path) -> None:
    # Must hold (issue 31): each is a cassette refused with its path, never a hang or a raw RecursionError.
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    meta = cassette([{"request": {"method": "GET", "path": "/o"}, "response": {"status": 200}}])
    nested: dict[str, Any] = {}
    inner = nested
    for _ in range(900):  # within json's own limit, past what the credential walk recursed through
        inner["a"] = {}
        inner = inner["a"]
    meta["meta"]["deep"] = nested
    walked = tmp_path / "walked.json"
    walked.write_text(json.dumps(meta))
    try:
        done = _check_in_a_process(str(fifo), "/dev/zero", str(deep), str(walked))
    except subprocess.TimeoutExpired:
        pytest.fail("mainsdk-conformance check hung")
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1 and done.stdout.endswith("refused\n"), done.stdout
    for path in (fifo, "/dev/zero", deep):
        assert f"{path}: " in done.stderr, done.stderr
    assert f"{fifo}: not a regular file" in done.stderr and "/dev/zero: not a regular file" in done.stderr
    assert f"{deep}: nested too deeply to be a cassette" in done.stderr


@pytest.mark.parametrize(
    ("interaction", "says"),
    [
        ({"response": "200"}, "interactions[0].response needs a status"),
        ({"response": [200]}, "interactions[0].response needs a status"),
        ({"response": {"status": 200}, "fault": "reset"}, "interactions[0].fault must be an object"),
        ({"response": {"status": 200}, "fault": ["reset"]}, "interactions[0].fault must be an object"),
    ],
)
def test_a_response_or_fault_of_the_wrong_type_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], interaction: dict[str, Any], says: str
) -> None:
    from mainsdk_conformance.cli import main

    path = tmp_path / "typed.json"
    path.write_text(json.dumps(cassette([{"request": {"method": "GET", "path": "/o"}, **interaction}])))
    assert main(["check", str(path)]) == 1  # an AttributeError out of the command before
    assert f"{path}: {says}" in capsys.readouterr().err


def test_recording_without_an_account_says_what_to_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mainsdk_conformance.cli import main

    monkeypatch.delenv("E2B_API_KEY", raising=False)
    monkeypatch.delenv("E2B_ACCESS_TOKEN", raising=False)
    assert main(["record", "--driver", "e2b", "--tests", str(tmp_path)]) == 2
    assert "needs a real account: set E2B_API_KEY or E2B_ACCESS_TOKEN" in capsys.readouterr().err


def test_a_named_secret_is_scrubbed_to_its_name_in_a_body_and_a_credential_header() -> None:
    """Egress header values: gone from the cassette, each marked by its secret's name, which a check accepts."""
    value = "egk-5c4b3a29-conformance"
    rules = {"api.example.test": [{"transform": {"headers": {"X-Api-Key": value, "X-Other": f"Bearer {value}"}}}]}
    data = cassette(
        [
            {
                "request": {
                    "method": "POST",
                    "path": "/v2/sandboxes",
                    "headers": {"Authorization": f"Bearer {value}"},
                    "body": {"json": {"network": {"rules": rules}}},
                },
                "response": {"status": 201, "body": {"text": base64.b64encode(value.encode()).decode()}},
            }
        ]
    )
    clean = scrub(data, named={"EGRESS_KEY": value})
    assert value not in json.dumps(clean) and find_credentials(clean) == []
    request = clean["interactions"][0]["request"]
    headers = request["body"]["json"]["network"]["rules"]["api.example.test"][0]["transform"]["headers"]
    assert headers == {"X-Api-Key": "[scrubbed:EGRESS_KEY]", "X-Other": "Bearer [scrubbed:EGRESS_KEY]"}
    assert request["headers"]["Authorization"] == "Bearer [scrubbed:EGRESS_KEY]"
    assert base64.b64decode(clean["interactions"][0]["response"]["body"]["text"]) == b"[scrubbed:EGRESS_KEY]"
    # Anything else in a credential header is still a credential, and still found.
    for kept in ("sk9f8e7d6c5b4a3f2e1d [scrubbed:K]", "[scrubbed:K] extra", "Bearer [scrubbed:K][scrubbed:K]"):
        leaky = cassette([{"request": {"method": "GET", "path": "/o", "headers": {"X-Api-Key": kept}}}])
        assert find_credentials(leaky), kept


def test_a_profiles_secret_fields_hold_no_value_known_or_not() -> None:
    """E2B's egress headers: a known secret marked by name (after a scheme word too), any other value scrubbed."""
    rules = {
        "a.test": [{"transform": {"headers": {"X-Key": "tok-1", "Authorization": "Bearer tok-1", "X-New": "v9"}}}],
        "b.test": [{"transform": {"headers": {"X-Key": "plain"}}}],
    }
    body = {"network": {"allowOut": ["a.test", "b.test"], "rules": rules}, "envVars": {"K": "tok-1"}}
    clean = scrub_fields(body, E2B.secret_fields, {"K1": "tok-1"})
    assert clean["network"]["rules"] == {
        "a.test": [
            {
                "transform": {
                    "headers": {"X-Key": "[scrubbed:K1]", "Authorization": "Bearer [scrubbed:K1]", "X-New": SCRUBBED}
                }
            }
        ],
        "b.test": [{"transform": {"headers": {"X-Key": SCRUBBED}}}],
    }
    assert clean["network"]["allowOut"] == ["a.test", "b.test"] and clean["envVars"] == {"K": "tok-1"}  # only there
    vercel = {"networkPolicy": {"allow": {"a.test": [{"transform": [{"headers": {"X-Key": "tok-1"}}]}], "b.test": []}}}
    assert scrub_fields(vercel, VERCEL.secret_fields, {"K1": "tok-1"}) == {
        "networkPolicy": {"allow": {"a.test": [{"transform": [{"headers": {"X-Key": "[scrubbed:K1]"}}]}], "b.test": []}}
    }
