"""Checkpoints: snapshots, forks, pause and resume, with the guarantees holding across each.

Gated on ``Capabilities.checkpoint_kinds`` and ``Capabilities.pause``: a driver that declares none has these
skipped, saying so ("the driver declares no checkpoint kinds").
"""

from __future__ import annotations

import hashlib

import pytest
from mainsdk import SandboxError, Session, secret
from mainsdk.checkpoints import MAX_FORKS
from mainsdk.errors import INVALID_OPTION, NO_SESSION

from mainsdk_conformance.marks import requires
from mainsdk_conformance.target import SECRET, SECRET_VALUES, Conformance

FS = "checkpoint:filesystem"
READ_BOTH = ["-c", "print(open('a.txt').read(), open('sub/b.txt').read())"]
# What the box holds of a value, anywhere it can write: its work folder, /tmp (HOME) and its out folder.
FIND = (
    "import os, sys; needle = sys.argv[1].encode(); hits = []\n"
    "for top in ('.', '/tmp', '../out'):\n"
    "    for folder, _, names in os.walk(top):\n"
    "        for name in names:\n"
    "            path = os.path.join(folder, name)\n"
    "            try:\n"
    "                data = open(path, 'rb').read()\n"
    "            except OSError:\n"
    "                continue\n"
    "            if needle in data or needle in path.encode():\n"
    "                hits.append(path)\n"
    "print(len(hits))"
)
ENV_HASH = ["-c", "import hashlib, os; print(hashlib.sha256(os.environ.get('TOKEN', '').encode()).hexdigest())"]


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _sessions(forks: list[Session | SandboxError]) -> list[Session]:
    assert all(isinstance(f, Session) for f in forks), forks
    return [f for f in forks if isinstance(f, Session)]


@requires("sessions", FS)
class TestCheckpoints:
    """A snapshot keeps the box's files; every fork and session made from it starts with them, each its own."""

    def test_a_file_written_before_a_snapshot_is_in_every_fork_and_in_a_session_made_from_it(
        self, conformance: Conformance
    ) -> None:
        sandbox = conformance.sandbox()
        with sandbox.create() as source:
            source.write("a.txt", "alpha")
            source.run("python3", ["-c", "import os; os.mkdir('sub'); open('sub/b.txt', 'w').write('beta')"])
            snapshot = source.snapshot("prepared")
            assert (snapshot.name, snapshot.kind, snapshot.session_id) == ("prepared", "filesystem", source.id)
            assert snapshot in sandbox.snapshots()
            forks = _sessions(source.fork(3))
            assert len({f.id for f in forks} | {source.id}) == 4
            made = sandbox.create(snapshot=snapshot)
            try:
                for session in [*forks, made, source]:
                    assert session.run("python3", READ_BOTH).stdout == "alpha beta\n", session.id
            finally:
                for session in [*forks, made]:
                    session.close()

    def test_a_change_in_one_fork_is_seen_by_no_other_nor_by_the_source(self, conformance: Conformance) -> None:
        sandbox = conformance.sandbox()
        with sandbox.create() as source:
            source.write("a.txt", "alpha")
            source.write("keep.txt", "kept")
            first, second = _sessions(source.fork(2))
            try:
                # An inherited file changed, one removed and one added, in the first fork only.
                first.run("python3", ["-c", "open('a.txt', 'a').write('+first'); open('new.txt', 'w').write('n')"])
                first.run("python3", ["-c", "import os; os.remove('keep.txt')"])
                source.write("a.txt", "alpha+source")
                listing = ["-c", "import os; print(sorted(os.listdir('.')), open('a.txt').read())"]
                assert first.run("python3", listing).stdout == "['a.txt', 'new.txt'] alpha+first\n"
                assert second.run("python3", listing).stdout == "['a.txt', 'keep.txt'] alpha\n"
                assert source.run("python3", listing).stdout == "['a.txt', 'keep.txt'] alpha+source\n"
            finally:
                first.close()
                second.close()

    def test_forks_get_no_secret_value_not_bound_again(self, conformance: Conformance) -> None:
        values = dict(SECRET_VALUES)
        old = values[SECRET]
        sandbox = conformance.sandbox(secret=values.get)
        with sandbox.create(env={"TOKEN": secret(SECRET)}) as source:
            assert source.run("python3", ENV_HASH).stdout.strip() == _sha(old)
            values[SECRET] = new = "tok-rotated-0123456789"  # the app rotates it: the forks bind it from its name
            (fork,) = _sessions(source.fork(1))
            try:
                assert fork.run("python3", ENV_HASH).stdout.strip() == _sha(new)
                assert fork.run("python3", ["-c", FIND, old]).stdout == "0\n"  # nowhere in what the fork has
                assert source.run("python3", ["-c", FIND, old]).stdout == "0\n"
            finally:
                fork.close()
            del values[SECRET]  # revoked: a fork cannot bind it, and that fork alone fails, saying why
            [failed] = source.fork(1)
            assert isinstance(failed, SandboxError), failed

    def test_a_deleted_snapshot_is_refused(self, conformance: Conformance) -> None:
        sandbox = conformance.sandbox()
        with sandbox.create() as source:
            source.write("a.txt", "alpha")
            snapshot = source.snapshot()
        sandbox.delete_snapshot(snapshot)
        assert snapshot not in sandbox.snapshots()
        for call in (lambda: sandbox.create(snapshot=snapshot), lambda: sandbox.delete_snapshot(snapshot.id)):
            with pytest.raises(SandboxError) as caught:
                call()
            assert caught.value.code == NO_SESSION

    def test_a_snapshot_belongs_to_its_tenant(self, conformance: Conformance) -> None:
        tenant = {"id": "tenant-a"}
        sandbox = conformance.sandbox(tenancy=lambda: tenant["id"])
        with sandbox.create() as source:
            snapshot = source.snapshot()
            tenant["id"] = "tenant-b"
            assert sandbox.snapshots() == []
            for call in (lambda: sandbox.create(snapshot=snapshot.id), lambda: sandbox.delete_snapshot(snapshot)):
                with pytest.raises(SandboxError) as caught:
                    call()
                assert caught.value.code == NO_SESSION
            tenant["id"] = "tenant-a"
            assert [s.id for s in sandbox.snapshots()] == [snapshot.id]

    def test_a_kind_the_driver_does_not_offer_is_refused_naming_it_and_what_it_offers(
        self, conformance: Conformance
    ) -> None:
        caps = conformance.capabilities()
        missing = [kind for kind in ("filesystem", "memory") if kind not in caps.checkpoint_kinds]
        if not missing:
            pytest.skip(f"driver {conformance.driver_id} offers every checkpoint kind")
        built = conformance.build()
        with built.sandbox.create() as session:
            for kind in missing:
                with pytest.raises(SandboxError) as caught:
                    session.snapshot(kind=kind)
                assert caught.value.code == INVALID_OPTION
                assert repr(conformance.driver_id) in caught.value.message
                assert all(offered in caught.value.message for offered in caps.checkpoint_kinds)
            for count in (0, MAX_FORKS + 1):
                with pytest.raises(SandboxError) as caught:
                    session.fork(count)
                assert caught.value.code == INVALID_OPTION and "count" in caught.value.message
            assert built.sandbox.snapshots() == []
        refused = [e for e in built.events if e.session_id == session.id and e.kind == "refused"]
        assert len(refused) == len(missing) + 2

    def test_snapshot_fork_and_delete_each_write_one_audit_event(self, conformance: Conformance) -> None:
        built = conformance.build()
        with built.sandbox.create() as source:
            snapshot = source.snapshot()
            forks = _sessions(source.fork(2))
            for fork in forks:
                fork.close()
            built.sandbox.delete_snapshot(snapshot)
        kinds = [e.kind for e in built.events if e.kind in ("snapshot", "fork", "delete_snapshot")]
        assert kinds == ["snapshot", "fork", "fork", "delete_snapshot"]
        fork_events = [e for e in built.events if e.kind == "fork"]
        assert sorted(e.session_id or "" for e in fork_events) == sorted(f.id for f in forks)
        assert {e.source_session for e in fork_events} == {source.id}
        assert [e.snapshot_id for e in built.events if e.kind in ("snapshot", "delete_snapshot")] == [snapshot.id] * 2

    def test_each_fork_has_its_own_cost(self, conformance: Conformance) -> None:
        sandbox = conformance.sandbox({"sandbox": {"price": "0.001"}})
        with sandbox.create() as source:
            source.run("python3", ["-c", "import time; time.sleep(0.2)"])
            spent = source.cost
            assert spent > 0
            (fork,) = _sessions(source.fork(1))
            try:
                assert fork.cost == 0
                fork.run("python3", ["-c", "pass"])
                assert fork.cost > 0 and source.cost == spent
            finally:
                fork.close()

    @requires("cells")
    def test_a_forks_interpreter_starts_empty_and_its_first_cell_says_so(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as source:
            source.run_code("x = 41")
            (fork,) = _sessions(source.fork(1))
            try:
                cell = fork.run_code("print(x + 1)")
                assert cell.restarted and cell.error is not None and cell.error.name == "NameError"
                assert not fork.run_code("print(2)").restarted
            finally:
                fork.close()
            # A filesystem checkpoint ended the source's interpreter too: its next cell says so.
            assert source.run_code("1").restarted


@requires("sessions", "pause")
class TestPause:
    """Pause keeps the box as it was; resume lets it run again."""

    def test_pause_then_resume_keeps_files_and_a_paused_session_says_so(self, conformance: Conformance) -> None:
        built = conformance.build()
        sandbox = built.sandbox
        with sandbox.create() as session:
            session.write("a.txt", "alpha")
            session.pause()
            assert session.paused
            for call in (lambda: sandbox.get(session.id), lambda: session.run("python3", READ_BOTH)):
                with pytest.raises(SandboxError) as caught:
                    call()
                assert caught.value.code == NO_SESSION and "paused" in caught.value.message
            assert sandbox.resume(session.id) is not None
            assert session.read("a.txt") == b"alpha"
            assert sandbox.get(session.id).id == session.id
        kinds = [e.kind for e in built.events if e.kind in ("pause", "resume")]
        assert kinds == ["pause", "resume"]

    def test_only_the_sessions_tenant_resumes_it(self, conformance: Conformance) -> None:
        tenant = {"id": "tenant-a"}
        sandbox = conformance.sandbox(tenancy=lambda: tenant["id"])
        with sandbox.create() as session:
            session.pause()
            tenant["id"] = "tenant-b"
            with pytest.raises(SandboxError) as caught:
                sandbox.resume(session.id)
            assert caught.value.code == NO_SESSION and "paused" not in caught.value.message
            tenant["id"] = "tenant-a"
            sandbox.resume(session.id)

    def test_resume_binds_the_secrets_again_from_their_names(self, conformance: Conformance) -> None:
        values = dict(SECRET_VALUES)
        sandbox = conformance.sandbox(secret=values.get)
        with sandbox.create(env={"TOKEN": secret(SECRET)}) as session:
            assert session.run("python3", ENV_HASH).stdout.strip() == _sha(values[SECRET])
            session.pause()
            values[SECRET] = new = "tok-rotated-while-paused-42"
            sandbox.resume(session.id)
            assert session.run("python3", ENV_HASH).stdout.strip() == _sha(new)

    @requires("cells", "pause_keeps_memory")
    def test_a_pause_that_keeps_memory_keeps_the_interpreters_state(self, conformance: Conformance) -> None:
        sandbox = conformance.sandbox()
        with sandbox.create() as session:
            session.run_code("x = 41")
            session.pause()
            sandbox.resume(session.id)
            cell = session.run_code("print(x + 1)")
            assert (cell.stdout, cell.restarted) == ("42\n", False)
