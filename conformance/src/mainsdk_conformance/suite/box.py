"""The box as a normal machine to code on: a writable ``/tmp`` and ``HOME`` of the box's own, inside its disk limit."""

from __future__ import annotations

import errno
import json

from mainsdk_conformance.marks import requires
from mainsdk_conformance.target import Conformance

# Writes /tmp/<name> and $HOME/<name> (~ too: expanduser reads HOME), reads both back, and says what HOME is.
# Every /tmp path ends in "/": authoring stand-ins map a box's /tmp/... to their own folder by that prefix.
WRITE = """\
import json, os, sys
name = sys.argv[1]
home = os.environ.get('HOME') or ''
seen = {'home_set': bool(home), 'home_is_dir': os.path.isdir(home), 'tilde': os.path.expanduser('~') == home}
for key, where in (('tmp', '/tmp/'), ('home', home + '/')):
    with open(where + name, 'w') as fh:
        fh.write('kept')
    seen[key] = open(where + name).read()
print(json.dumps(seen, sort_keys=True))
"""
# Whether /tmp/<name> and $HOME/<name> are there, and what they hold.
LOOK = """\
import json, os, sys
name = sys.argv[1]
found = {}
for key, where in (('tmp', '/tmp/'), ('home', os.environ['HOME'] + '/')):
    found[key] = open(where + name).read() if os.path.exists(where + name) else None
print(json.dumps(found, sort_keys=True))
"""
WRITTEN = {"home": "kept", "home_is_dir": True, "home_set": True, "tilde": True, "tmp": "kept"}
NAME = "conformance-left"


def _args(code: str, name: str) -> str:
    """``code`` as one python run with ``name`` as its argument (``sandbox.run`` takes code, not argv)."""
    return f"import sys; sys.argv[1:] = [{name!r}]\n{code}"


@requires("private_tmp")
class TestTmpAndHome:
    """Code can write ``/tmp`` and ``HOME`` (pip, matplotlib, tempfile need them), and they are the box's own."""

    def test_a_run_can_write_tmp_and_home(self, conformance: Conformance) -> None:
        result = conformance.sandbox().run(_args(WRITE, NAME))
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout) == WRITTEN

    def test_what_a_run_leaves_in_tmp_and_home_is_gone_for_the_next_run(self, conformance: Conformance) -> None:
        sandbox = conformance.sandbox()
        first = sandbox.run(_args(WRITE, NAME))
        assert json.loads(first.stdout) == WRITTEN, first.stderr
        second = sandbox.run(_args(LOOK, NAME))
        assert json.loads(second.stdout) == {"home": None, "tmp": None}, second.stderr

    @requires("sessions")
    def test_a_session_writes_tmp_and_home_and_its_later_commands_find_them(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as session:
            first = session.run("python3", ["-c", WRITE, NAME])
            assert json.loads(first.stdout) == WRITTEN, first.stderr
            later = session.run("python3", ["-c", LOOK, NAME])
            assert json.loads(later.stdout) == {"home": "kept", "tmp": "kept"}, later.stderr
        # A new box (a run) has neither.
        fresh = conformance.sandbox().run(_args(LOOK, NAME))
        assert json.loads(fresh.stdout) == {"home": None, "tmp": None}, fresh.stderr

    @requires("disk_limit")
    def test_what_tmp_holds_counts_against_the_disk_limit(self, conformance: Conformance) -> None:
        # Files of 4 MiB each (under any per-file size limit, so the box's disk is what stops them) fill /tmp up
        # to permissions.disk.temp.max, 64MB here, and then fail with ENOSPC; the work folder has no room left
        # either (one disk); the next run's /tmp has room again. The loop ends at 256 MiB whatever happens.
        sandbox = conformance.sandbox({"permissions": {"disk": {"temp": {"max": "64MB"}}}})
        code = (
            "import os\nchunk = b'x' * (1 << 20); total = 0\n"
            "try:\n"
            "    while total < (256 << 20):\n"
            "        with open(f'/tmp/fill-{total >> 22}', 'ab') as fh:\n"
            "            for _ in range(4):\n                fh.write(chunk); fh.flush(); total += len(chunk)\n"
            "    print('no limit', total >> 20)\n"
            "except OSError as exc:\n    print(exc.errno, total >> 20)\n"
            "try:\n    open('more.bin', 'wb').write(chunk); print('work has room')\n"
            "except OSError as exc:\n    print('work', exc.errno)\n"
        )
        result = sandbox.run(code)
        lines = result.stdout.splitlines()
        err, megabytes = lines[0].split()
        assert err == str(errno.ENOSPC) and 32 <= int(megabytes) <= 64, result.stdout
        assert lines[1] == f"work {errno.ENOSPC}", result.stdout
        again = sandbox.run("open('/tmp/x', 'wb').write(b'y' * 1000000); print('room')")
        assert again.stdout == "room\n", again.stderr
