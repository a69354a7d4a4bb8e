"""The command line, as a user runs it: real processes, real sandbox."""

from __future__ import annotations

import base64
import importlib.metadata
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest


def mainsdk(*args: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mainsdk_cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def test_run_prints_the_output_and_nothing_else(app_dir: Callable[[str], Path]) -> None:
    done = mainsdk("sandbox", "run", "--code", "print(1 + 1)")
    assert (done.stdout, done.stderr, done.returncode) == ("2\n", "", 0)


def test_run_exits_with_the_codes_status_and_passes_stderr(app_dir: Callable[[str], Path]) -> None:
    done = mainsdk("sandbox", "run", "--code", "import sys; print('e', file=sys.stderr); sys.exit(7)")
    assert (done.stdout, done.stderr, done.returncode) == ("", "e\n", 7)


def test_run_reads_code_from_stdin_and_from_a_file(app_dir: Callable[[str], Path], tmp_path: Path) -> None:
    assert mainsdk("sandbox", "run", stdin="print('from stdin')").stdout == "from stdin\n"
    script = tmp_path / "hello.sh"
    script.write_text("echo from a file")
    assert mainsdk("sandbox", "run", str(script)).stdout == "from a file\n"  # bash, from the extension


def test_a_stop_is_said_on_stderr(app_dir: Callable[[str], Path]) -> None:
    done = mainsdk("sandbox", "run", "--timeout", "1s", "--code", "while True: pass")
    assert done.returncode == 124
    assert done.stderr == "mainsdk: stopped: timeout (MAIN-SANDBOX-0002)\n"


def test_a_crash_exits_128_plus_the_signal_and_says_so(app_dir: Callable[[str], Path]) -> None:
    done = mainsdk("sandbox", "run", "--code", "import ctypes; ctypes.string_at(0)")
    assert (done.stdout, done.returncode) == ("", 139)
    assert done.stderr == "mainsdk: the code was killed by SIGSEGV (exit 139)\n"
    done = mainsdk("sandbox", "run", "--json", "--language", "bash", "--code", "kill -9 $$")
    result = json.loads(done.stdout)
    assert (done.returncode, result["exit_code"], result["signal"], result["stop"]) == (137, 137, "SIGKILL", None)


def test_json_prints_the_whole_result(app_dir: Callable[[str], Path], tmp_path: Path) -> None:
    data = tmp_path / "rows.csv"
    data.write_text("a\nb\n")
    code = "open('../out/n.txt', 'w').write(str(len(open('rows.csv').readlines())))"
    done = mainsdk("sandbox", "run", "--json", "--file", f"rows.csv={data}", "--env", "MODE=x", "--code", code)
    result = json.loads(done.stdout)
    assert result["exit_code"] == 0 and result["isolation"] == "namespace" and result["stop"] is None
    assert [f["name"] for f in result["files"]] == ["n.txt"]


def test_a_users_mistake_is_one_line_with_its_code_and_no_traceback(app_dir: Callable[[str], Path]) -> None:
    done = mainsdk("sandbox", "run", "--timeout", "10 minutes", "--code", "print(1)")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("mainsdk: MAIN-SANDBOX-0001: limits.timeout")
    app_dir("sandbox:\n  drivr: local\n")
    done = mainsdk("sandbox", "run", "--code", "print(1)")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "line 2" in done.stderr and "MAIN-CONFIG-0003" in done.stderr and "sandbox.drivr" in done.stderr


def test_drivers_lists_the_installed_drivers_with_versions(app_dir: Callable[[str], Path]) -> None:
    done = mainsdk("sandbox", "drivers")
    assert done.returncode == 0
    version = importlib.metadata.version("mainsdk-local")
    assert any(line.split()[:3] == ["local", "mainsdk-local", version] for line in done.stdout.splitlines())


def test_a_merge_key_in_main_yaml_runs(app_dir: Callable[[str], Path]) -> None:
    app_dir("defaults: &defaults\n  timeout: 10s\nsandbox:\n  limits:\n    <<: *defaults\n    memory: 256MB\n")
    done = mainsdk("sandbox", "run", "--code", "print(1 + 1)")
    assert (done.stdout, done.stderr, done.returncode) == ("2\n", "", 0)


def test_a_limit_past_its_maximum_is_one_line_with_its_key_and_line(app_dir: Callable[[str], Path]) -> None:
    app_dir("sandbox:\n  limits:\n    timeout: 99999999999h\n")
    done = mainsdk("sandbox", "run", "--code", "print(1)")
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert "line 3: sandbox.limits.timeout:" in done.stderr and "at most 24h\n" in done.stderr
    assert done.stderr.count("MAIN-SANDBOX-0001") == 1  # the code once, not at both ends (issue 35)


def test_run_prints_each_flushed_line_as_it_comes(app_dir: Callable[[str], Path]) -> None:
    code = "import time\nprint('first', flush=True)\ntime.sleep(2)\nprint('second', flush=True)"
    with subprocess.Popen(
        [sys.executable, "-m", "mainsdk_cli", "sandbox", "run", "--code", code], stdout=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"first\n"
        first = time.monotonic()
        assert proc.stdout.readline() == b"second\n"
        assert time.monotonic() - first > 1.0  # the first line came while the code still slept
        assert proc.wait(timeout=60) == 0


def test_run_writes_the_codes_bytes_through_unchanged(app_dir: Callable[[str], Path]) -> None:
    code = "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe caf\\xe9\\n'); sys.stderr.buffer.write(b'\\x80\\n')"
    done = subprocess.run(
        [sys.executable, "-m", "mainsdk_cli", "sandbox", "run", "--code", code],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert (done.stdout, done.stderr, done.returncode) == (b"\xff\xfe caf\xe9\n", b"\x80\n", 0)


OUT_CODE = (
    "import os\nos.makedirs('../out/plots')\n"
    "open('../out/plots/p.png', 'wb').write(b'\\x89PNG-bytes')\nopen('../out/n.txt', 'w').write('3')"
)


def test_out_writes_the_out_files_keeping_their_paths(app_dir: Callable[[str], Path], tmp_path: Path) -> None:
    target = tmp_path / "results"
    target.mkdir()
    done = mainsdk("sandbox", "run", "--out", str(target), "--code", OUT_CODE)
    assert done.returncode == 0, done.stderr
    assert (target / "plots" / "p.png").read_bytes() == b"\x89PNG-bytes"
    assert (target / "n.txt").read_text() == "3"
    assert done.stderr.splitlines() == [
        f"mainsdk: wrote {target / 'n.txt'} (1 bytes)",
        f"mainsdk: wrote {target / 'plots' / 'p.png'} (10 bytes)",
    ]


def test_out_with_json_says_where_each_file_was_written(app_dir: Callable[[str], Path], tmp_path: Path) -> None:
    target = tmp_path / "results"
    target.mkdir()
    done = mainsdk("sandbox", "run", "--json", "--out", str(target), "--code", OUT_CODE)
    files = json.loads(done.stdout)["files"]
    assert [(f["name"], f["written"]) for f in files] == [
        ("n.txt", str(target / "n.txt")),
        ("plots/p.png", str(target / "plots" / "p.png")),
    ]


# Where the figures backend writes a run's figures (no matplotlib in this box: the code writes two PNGs there),
# and a figure-2.png of the code's own.
FIGURES_CODE = (
    "import os, struct, zlib\nos.makedirs('../out/.mainsdk-figures')\n"
    "def chunk(kind, data):\n"
    "    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))\n"
    "png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0))\n"
    "png += chunk(b'IDAT', zlib.compress(b'\\x00\\xff\\x00\\x00')) + chunk(b'IEND', b'')\n"
    "for n in (1, 2):\n    open('../out/.mainsdk-figures/%d.png' % n, 'wb').write(png)\n"
    "open('../out/figure-2.png', 'w').write('mine')\n"
)


def test_figures_come_back_in_json_and_out_writes_them(app_dir: Callable[[str], Path], tmp_path: Path) -> None:
    target = tmp_path / "results"
    target.mkdir()
    done = mainsdk("sandbox", "run", "--json", "--out", str(target), "--code", FIGURES_CODE)
    result = json.loads(done.stdout)
    assert [(r["mime"], r["written"]) for r in result["results"]] == [
        ("image/png", str(target / "figure-1.png")),
        ("image/png", None),  # the code's own figure-2.png is there: it is not overwritten
    ]
    assert base64.b64decode(result["results"][0]["base64"]) == (target / "figure-1.png").read_bytes()
    assert (target / "figure-2.png").read_text() == "mine"
    assert [f["name"] for f in result["files"]] == ["figure-2.png"]
    assert "mainsdk: figure 2 not written: the code's own figure-2.png is there" in done.stderr
    plain = mainsdk("sandbox", "run", "--code", FIGURES_CODE)
    assert "mainsdk: 2 figures; pass --out DIR to write them\n" in plain.stderr


def test_without_out_the_cli_says_how_to_keep_the_files(app_dir: Callable[[str], Path]) -> None:
    done = mainsdk("sandbox", "run", "--code", OUT_CODE)
    assert done.stderr == "mainsdk: 2 out files; pass --out DIR to write them\n"
    one = mainsdk("sandbox", "run", "--code", "open('../out/a.txt', 'w').write('x')")
    assert one.stderr == "mainsdk: 1 out file; pass --out DIR to write it\n"  # was "1 out files"


def test_out_never_follows_a_symlink_out_of_the_folder(app_dir: Callable[[str], Path], tmp_path: Path) -> None:
    target, elsewhere = tmp_path / "results", tmp_path / "elsewhere"
    target.mkdir()
    elsewhere.mkdir()
    (target / "plots").symlink_to(elsewhere)  # planted: plots/p.png would land in elsewhere/
    (target / "n.txt").symlink_to(elsewhere / "n.txt")
    done = mainsdk("sandbox", "run", "--out", str(target), "--code", OUT_CODE)
    assert list(elsewhere.iterdir()) == []
    assert "mainsdk: out file not written: 'plots/p.png': 'plots' in the folder is a symlink" in done.stderr
    assert "mainsdk: out file not written: 'n.txt': a symlink of that name is already there; it was left" in done.stderr


def test_a_call_limit_past_its_maximum_is_refused_by_the_same_bound(app_dir: Callable[[str], Path]) -> None:
    app_dir("sandbox:\n  limits:\n    timeout: 24h\n")  # the config's maximum: a call cannot go past it either way
    done = mainsdk("sandbox", "run", "--timeout", "99999999999h", "--code", "print(1)")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr == (
        'mainsdk: MAIN-SANDBOX-0001: limits.timeout: "99999999999h" is too large: a duration must be at most 24h\n'
    )


# --- --out DIR: checked before the code runs, files created new, never in the app's own folder (issues 22, 24) --


def _out_targets(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "a-file").write_text("x")
    return {
        "a-file": str(tmp_path / "a-file"),
        "dev-null": "/dev/null",
        "proc": "/proc/self",
        "missing": str(tmp_path / "missing"),
        "cwd": ".",
        "cwd-absolute": str(tmp_path),
        "parent": "..",
        "root": "/",
    }


@pytest.mark.parametrize("target", ["a-file", "dev-null", "proc", "missing", "cwd", "cwd-absolute", "parent", "root"])
@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["plain", "json"])
def test_an_out_folder_that_cannot_take_files_is_refused_before_the_code_runs(
    app_dir: Callable[[str], Path], tmp_path: Path, target: str, json_flag: list[str]
) -> None:
    # Must hold: --out is checked first; the code would print "ran" (and leave a file) if it ran.
    out = _out_targets(tmp_path)[target]
    code = "print('ran'); open('../out/f.txt', 'w').write('x')"
    done = mainsdk("sandbox", "run", *json_flag, "--out", out, "--code", code)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"mainsdk: MAIN-SANDBOX-0001: --out {out}: "), done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "f.txt").exists()


def test_out_in_the_config_files_folder_is_refused(app_dir: Callable[[str], Path], tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.yaml").write_text("sandbox:\n  driver: local\n")
    done = mainsdk("sandbox", "run", "--config", "app/main.yaml", "--out", "app", "--code", "print('ran')")
    assert (done.returncode, done.stdout) == (2, "")
    assert "--out app: it is the folder of the config file" in done.stderr


EXISTING_CODE = (
    "open('../out/keep.txt', 'w').write('from the box')\nopen('../out/new.txt', 'w').write('new')\nprint(42)"
)


def test_an_existing_name_is_left_as_it_was_and_the_result_still_printed(
    app_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    target = tmp_path / "results"
    target.mkdir()
    (target / "keep.txt").write_text("the user's")
    done = mainsdk("sandbox", "run", "--out", str(target), "--code", EXISTING_CODE)
    assert (done.returncode, done.stdout) == (0, "42\n")
    assert (target / "keep.txt").read_text() == "the user's" and (target / "new.txt").read_text() == "new"
    assert (
        "mainsdk: out file not written: 'keep.txt': a file of that name is already there; it was left as it was"
        in done.stderr
    )
    as_json = mainsdk("sandbox", "run", "--json", "--out", str(target), "--code", EXISTING_CODE)
    assert as_json.returncode == 0
    result = json.loads(as_json.stdout)
    assert result["stdout"] == "42\n" and [f["written"] for f in result["files"]] == [None, None]
    assert [(entry["name"], entry["reason"]) for entry in result["not_written"]] == [
        ("keep.txt", "a file of that name is already there; it was left as it was"),
        ("new.txt", "a file of that name is already there; it was left as it was"),
    ]
    assert (target / "keep.txt").read_text() == "the user's"


def test_out_never_follows_a_link_to_a_folder_or_file_planted_earlier(
    app_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    # A box's out file named sub/x, where sub is a link an earlier run (or anyone) left in the folder.
    target, elsewhere = tmp_path / "results", tmp_path / "elsewhere"
    target.mkdir()
    elsewhere.mkdir()
    (target / "sub").symlink_to(elsewhere)
    (target / "gone.txt").symlink_to(elsewhere / "gone.txt")  # a dangling link: O_CREAT alone would follow it
    code = "import os\nos.makedirs('../out/sub')\nopen('../out/sub/x', 'w').write('x')\nopen('../out/gone.txt', 'w')"
    done = mainsdk("sandbox", "run", "--json", "--out", str(target), "--code", code)
    assert done.returncode == 0, done.stderr
    assert list(elsewhere.iterdir()) == []
    reasons = {entry["name"]: entry["reason"] for entry in json.loads(done.stdout)["not_written"]}
    assert reasons["sub/x"].startswith("'sub' in the folder is a symlink or not a folder")
    assert reasons["gone.txt"] == "a symlink of that name is already there; it was left as it was"


def test_out_writes_into_the_folder_it_checked_even_if_swapped_for_a_link_while_the_code_runs(
    app_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    target, elsewhere = tmp_path / "results", tmp_path / "elsewhere"
    target.mkdir()
    elsewhere.mkdir()
    code = "import time\nprint('ready', flush=True)\ntime.sleep(2)\nopen('../out/late.txt', 'w').write('x')"
    command = [sys.executable, "-m", "mainsdk_cli", "sandbox", "run", "--out", str(target), "--code", code]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        target.rename(tmp_path / "checked")
        target.symlink_to(elsewhere)  # the path now leads elsewhere; the folder checked is ./checked
        assert proc.wait(timeout=60) == 0
    assert list(elsewhere.iterdir()) == []
    assert (tmp_path / "checked" / "late.txt").read_text() == "x"
