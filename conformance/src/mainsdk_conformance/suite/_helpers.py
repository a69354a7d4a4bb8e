"""Helpers the suite's tests share. Public API only: what an app could do, plus the start spy."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from mainsdk import SandboxError

from mainsdk_conformance.target import Built

# A made-up GitHub token: it has a known key format, so output holding it must come back redacted. The code
# builds it from pieces, so only the output holds it; cassettes may hold it (mainsdk_conformance.cassette).
FAKE_KEY = "ghp_" + "conformanceFAKEkey" + "0" * 18
FAKE_KEY_CODE = "print('gh' + 'p_' + 'conformanceFAKEkey' + '0' * 18)"
REDACTED = "[redacted:secret]"
# Core cancels a command this long past its timeout if the driver has not stopped it (mainsdk.limits).
DEADLINE_GRACE = 5.0


def refused(built: Built, call: Callable[[], Any], code: str) -> SandboxError:
    """Assert that ``call`` raises ``code``, starts no box and is audited as one refused event."""
    before = len(built.events)
    with pytest.raises(SandboxError) as caught:
        call()
    assert caught.value.code == code, caught.value
    assert built.started == [], "a refused call started a box"
    assert [(e.kind, e.error) for e in built.events[before:]] == [("refused", code)]
    return caught.value


# What the suite's loopback origin answers, so "reached" means reached it and nothing else.
ORIGIN_BODY = b"conformance origin"


def reach_code(hosts: Sequence[str], port: int, scheme: str = "http") -> str:
    """Python that fetches ``scheme://host:port/`` from each host and prints one line each.

    urllib, so a driver that gives hosts through a proxy in the box's environment
    is reached the way code normally reaches the network. Only the suite's own
    origin's answer counts as reached: a proxy's refusal (403), a failed name
    lookup or a closed port are all "refused". Over https the origin's
    certificate is a throwaway one: the test is about reach, not trust.
    """
    if scheme == "http":
        fetch = f"urllib.request.urlopen(f'http://{{host}}:{port}/', timeout=5)"
        imports = "import urllib.request\n"
    else:
        fetch = f"urllib.request.urlopen(f'{scheme}://{{host}}:{port}/', timeout=5, context=context)"
        imports = "import ssl, urllib.request\ncontext = ssl._create_unverified_context()\n"
    return (
        imports + f"for host in {json.dumps(list(hosts))}:\n"
        "    try:\n"
        f"        body = {fetch}.read()\n"
        f"        print(host, 'reached' if body == {ORIGIN_BODY!r} else 'refused')\n"
        "    except Exception:\n"
        "        print(host, 'refused')\n"
    )


# The HTTP clients code in a box reaches an egress host with; ``clients_code`` names each on its line.
CLIENTS = ("urllib", "requests", "httpx", "curl", "node", "pip")
# The project ``clients_code``'s pip asks the egress host's ``/simple/`` index for.
PIP_PROBE = "weather-stub"

_CLIENTS_BODY = r"""
def show(name, status, body):
    print(name, status, ' '.join(str(body).split())[:160], flush=True)
def run(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=40, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return None
for name in CLIENTS:
    try:
        if name == 'urllib':
            import urllib.request
            with urllib.request.urlopen(urllib.request.Request(URL, headers=MINE), timeout=10) as answer:
                show(name, answer.status, answer.read().decode())
        elif name == 'requests':
            try:
                import requests
            except ImportError:  # pip's own copy (certifi's store included), in every image with pip
                from pip._vendor import requests
            answer = requests.get(URL, headers=MINE, timeout=10)
            show(name, answer.status_code, answer.text)
        elif name == 'httpx':
            try:
                import httpx
            except ImportError:
                print(name, 'absent', flush=True)
                continue
            answer = httpx.get(URL, headers=MINE, timeout=10)
            show(name, answer.status_code, answer.text)
        elif name == 'curl':
            headers = [part for key, value in MINE.items() for part in ('-H', key + ': ' + value)]
            done = run(['curl', '-sS', '--max-time', '10', '-w', '\n%{http_code}', *headers, URL])
            if done is None:
                print(name, 'absent', flush=True)
            elif done.returncode:
                show(name, 'failed', 'exit %d %s' % (done.returncode, done.stderr))
            else:
                body, _, status = done.stdout.rpartition('\n')
                show(name, status, body)
        elif name == 'node':
            js = ("fetch(process.argv[1], {headers: JSON.parse(process.argv[2])}).then("
                  "async a => console.log(a.status, await a.text()),"
                  " e => console.log('failed', (e.cause && e.cause.code) || e.name))")
            done = run(['node', '-e', js, URL, json.dumps(MINE)])
            if done is None:
                print(name, 'absent', flush=True)
            else:
                status, _, body = (done.stdout.strip() or 'failed ' + done.stderr).partition(' ')
                show(name, status, body)
        elif name == 'pip':
            import tempfile
            index = '/'.join(URL.split('/', 3)[:3]) + '/simple/'
            with tempfile.TemporaryDirectory() as folder:
                done = run([sys.executable, '-m', 'pip', 'download', '--no-deps', '--no-cache-dir', '--retries',
                            '0', '--timeout', '10', '--disable-pip-version-check', '-d', folder, '--index-url', index,
                            PROBE])
            text = '' if done is None else done.stdout + done.stderr
            if done is None or 'No module named pip' in text:
                print(name, 'absent', flush=True)
            elif 'ssl certificate' in text or 'CERTIFICATE_VERIFY_FAILED' in text:
                show(name, 'failed', 'certificate')
            elif 'Could not fetch URL' in text:
                show(name, 'failed', 'fetch')
            else:
                # What only an answer from the index gives: a saved file, or the page itself refused.
                said = [line for line in text.splitlines() if line.startswith(('Saved ', 'WARNING: Skipping page'))]
                what = said[0].split('/')[-1] if said and said[0].startswith('Saved ') else 'an index page'
                show(name, 'reached' if said else 'failed', what if said else 'no answer')
    except Exception as exc:
        show(name, 'failed', type(exc).__name__)
"""


def clients_code(url: str, clients: Sequence[str] = CLIENTS, headers: dict[str, str] | None = None) -> str:
    """Python that GETs ``url`` with each of ``clients`` (``CLIENTS``), trusting only what the box trusts.

    One line each: ``<client> <status> <body>`` (the body's words, cut), ``<client> failed <why>``, or
    ``<client> absent`` when the box has no such client. ``requests`` is pip's own copy (with certifi's store,
    as pip itself uses it) where the box has no other. ``headers`` go with every request (the code's own). pip
    downloads ``PIP_PROBE`` from ``url``'s ``/simple/`` index and says ``pip reached <what it saved>`` (or
    ``reached an index page`` when the index answered a page pip would not take) or ``pip failed certificate``.
    """
    return (
        "import json, os, subprocess, sys\n"
        f"URL, MINE, CLIENTS, PROBE = {url!r}, {dict(headers or {})!r}, {list(clients)!r}, {PIP_PROBE!r}\n"
        + _CLIENTS_BODY.lstrip("\n")
    )


def client_lines(stdout: str) -> dict[str, str]:
    """``clients_code``'s lines of ``stdout``, by client: what each said after its name."""
    said: dict[str, str] = {}
    for line in stdout.splitlines():
        name, _, rest = line.partition(" ")
        if name in CLIENTS:
            said[name] = rest
    return said
