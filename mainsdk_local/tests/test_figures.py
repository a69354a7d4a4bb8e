"""Plots from one-shot runs on the real local driver, with real pandas and matplotlib in the box.

Each figure the code shows (``plt.show()``) or leaves open comes back in ``RunResult.results`` as an
``image/png``, with no change to the code and no look at its text; the code's own out files stay its own; a
run that forges the figures folder gets no more than it could with any out file.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable

import pytest
from conftest import CONFIG, Built
from mainsdk import AsyncSandbox, SandboxDeps
from mainsdk import secret as secret_ref
from mainsdk.config import load_config_text
from mainsdk.figures import MAX_FIGURES
from mainsdk.rich import INLINE_LIMIT

from mainsdk_local import local_sandbox_driver

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/ns/mnt"), reason="Linux only")

PNG = b"\x89PNG\r\n\x1a\n"
CHART_CONFIG = CONFIG.replace("timeout: 10s, memory: 256MB", "timeout: 60s, memory: 1GB").replace(
    "  secrets: [TEST_API_KEY]\n",
    "  secrets: [TEST_API_KEY]\n  packages:\n    python: [pandas==2.2.3, matplotlib==3.9.2]\n",
)


@pytest.fixture
def chart(make_sandbox: Callable[..., Built], request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Built:
    """A sandbox whose python runs get pandas and matplotlib.

    The env is kept in pytest's cache folder (as test_packages' chart test keeps it): only the first test run
    in a checkout builds it (about 20 s), as an app's later runs reuse ~/.cache/mainsdk/envs.
    """
    monkeypatch.setenv("XDG_CACHE_HOME", str(request.config.cache.mkdir("mainsdk-packages")))
    return make_sandbox(CHART_CONFIG)


def _png(width: int, height: int, seed: int = 0) -> bytes:
    """A real PNG of ``width`` x ``height`` grey noise (so it does not compress)."""
    rows = b"".join(
        b"\x00" + bytes((x * 7 + y * 13 + seed) * 2654435761 % 251 for x in range(width)) for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return PNG + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


TUTORIAL = """
import pandas as pd
import matplotlib.pyplot as plt

df = pd.read_csv("data.csv")
df.plot.bar(x="item", y="count")
plt.show()

plt.figure()
plt.plot(df["count"].cumsum())
plt.savefig("../out/chart.png")
print(len(df))
"""


def test_the_tutorial_chart_comes_back_as_png_results_and_the_codes_own_file_stays_a_file(chart: Built) -> None:
    sandbox = chart.sandbox
    result = sandbox.run(TUTORIAL, files={"data.csv": "item,count\na,1\nb,2\nc,3\n"}, feature="chart")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "3\n"
    # The bar chart (shown) and the cumulative line (left open at exit), in that order; both real PNGs, inline.
    assert [r.mime for r in result.results] == ["image/png", "image/png"]
    shown, left_open = (r.bytes() for r in result.results)
    assert shown is not None and shown.startswith(PNG) and left_open is not None and left_open.startswith(PNG)
    assert shown != left_open and result.results_dropped == 0
    # The code's own savefig is its out file, and the figures folder is not among the files.
    assert [f.name for f in result.files] == ["chart.png"] and result.files_dropped == ()
    assert sandbox.files.read(result.files[0]) == left_open  # same figure, saved by the code and at exit
    data = result.to_dict()
    assert [r["mime"] for r in data["results"]] == ["image/png", "image/png"] and json.dumps(data)


def test_matplotlib_in_the_box_writes_no_fontconfig_warning(chart: Built) -> None:
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.title('fonts')\nplt.show()"
    result = chart.sandbox.run(code)
    assert result.ok, result.stderr
    assert result.stderr == ""  # was "Fontconfig error: Cannot load default config file" (no /etc/fonts)
    assert len(result.results) == 1


@pytest.mark.skipif(shutil.which("fc-list") is None, reason="no fontconfig on this host: nothing in a box runs it")
def test_fontconfig_in_the_box_has_a_valid_cache_whatever_the_hosts_cache_holds(
    make_sandbox: Callable[..., Built],
) -> None:
    # The host's own /var/cache/fontconfig may be stale or empty for the fonts it has (it was on a machine of
    # ours, and a box that binds it prints "Fontconfig error: No writable cache directories" on every run
    # that lists fonts). The launcher builds the boxes' cache itself: every font folder has a valid cache.
    code = (
        "import subprocess, sys\n"
        "done = subprocess.run(['fc-list'], capture_output=True, text=True)\n"
        "print(len(done.stdout.splitlines()))\n"
        "sys.stderr.write(done.stderr)\n"
    )
    config = CONFIG.replace("processes: [python3, node, bash]", "processes: [python3, node, bash, fc-list]")
    result = make_sandbox(config).sandbox.run(code)
    assert result.ok, result.stderr
    assert result.stderr == ""
    assert int(result.stdout) > 0  # it found the host's fonts through that cache


# The same host condition for the host's own cache (what the launcher's font cache is for), made in the test's
# own mount namespace: the local driver and its launcher run in a child where an empty tmpfs stands in for the
# host's /var/cache/fontconfig (stale for every font the host has), and the box's fc-list has no HOME to write a
# cache in, so only the cache the launcher built for the boxes can keep it quiet.
HOST_CACHE_EMPTIED = """
import ctypes, json, sys
libc = ctypes.CDLL(None, use_errno=True)
for call in (lambda: libc.unshare(0x00020000),  # CLONE_NEWNS
             lambda: libc.mount(None, b"/", None, 0x4000 | (1 << 18), None),  # MS_REC | MS_PRIVATE
             lambda: libc.mount(b"tmpfs", b"/var/cache/fontconfig", b"tmpfs", 0, b"size=1m")):
    if call() != 0:
        raise OSError(ctypes.get_errno(), "could not stand an empty folder in for the host's font cache")
from mainsdk import Sandbox, SandboxDeps
from mainsdk.config import load_config_text
from mainsdk_local import local_sandbox_driver
config = load_config_text(sys.argv[1])
sandbox = Sandbox(SandboxDeps(config=config, driver=local_sandbox_driver(permissions=config.permissions),
                              load_entrypoints=False))
code = "import subprocess, sys\\ndone = subprocess.run(['fc-list'], capture_output=True, text=True)\\n" \\
       "print(len(done.stdout.splitlines()))\\nsys.stderr.write(done.stderr)\\n"
try:
    result = sandbox.run(code, env={"HOME": "/nonexistent", "XDG_CACHE_HOME": "/nonexistent"})
    print(json.dumps([result.exit_code, result.stdout, result.stderr]))
finally:
    sandbox.close()
"""


@pytest.mark.skipif(shutil.which("fc-list") is None, reason="no fontconfig on this host: nothing in a box runs it")
@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.isdir("/var/cache/fontconfig"),
    reason="standing an empty folder in for the host's /var/cache/fontconfig takes root and that folder",
)
def test_the_boxes_font_cache_covers_the_hosts_fonts_when_the_hosts_cache_is_empty() -> None:
    done = subprocess.run(
        [sys.executable, "-c", HOST_CACHE_EMPTIED, CONFIG], capture_output=True, text=True, timeout=120, check=True
    )
    exit_code, stdout, stderr = json.loads(done.stdout.splitlines()[-1])
    assert (exit_code, stderr) == (0, "")  # the host's empty cache bound as it was: "No writable cache directories"
    assert int(stdout) > 0  # it found the host's fonts through the launcher's cache


# The host condition behind "Fontconfig error: No writable cache directories" (four times on every matplotlib
# run, issue 26), made in the box itself so the test does not hang on this machine's own cache: a font folder
# whose cache no read-only system cache holds (what a stale /var/cache/fontconfig is to fontconfig), listed by
# the fontconfig that matplotlib's font manager runs (fc-list) on its first import in a fresh box. The font is
# matplotlib's own DejaVu (in the box's package env), so no host font is needed either.
STALE_FONT_CACHE = """
import glob, os, shutil, sys
import matplotlib
os.makedirs("fonts")
shutil.copy(os.path.join(matplotlib.get_data_path(), "fonts", "ttf", "DejaVuSerif.ttf"), "fonts/Uncached.ttf")
with open("fonts.conf", "w") as f:
    f.write('<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "fonts.dtd"><fontconfig>'
            '<include ignore_missing="yes">/etc/fonts/fonts.conf</include>'
            '<dir>' + os.path.abspath("fonts") + '</dir></fontconfig>')
os.environ["FONTCONFIG_FILE"] = os.path.abspath("fonts.conf")
import matplotlib.font_manager as fm
import matplotlib.pyplot as plt
plt.plot([1, 2])
plt.title("fonts")
plt.show()
print(any(f.fname.endswith("Uncached.ttf") for f in fm.fontManager.ttflist))
print(sorted(glob.glob(os.path.expanduser("~/.cache/fontconfig/*.cache-*"))) != [])
"""


@pytest.mark.skipif(shutil.which("fc-list") is None, reason="no fontconfig on this host: nothing in a box runs it")
def test_matplotlib_prints_no_fontconfig_error_for_fonts_no_system_cache_holds(chart: Built) -> None:
    result = chart.sandbox.run(STALE_FONT_CACHE)
    assert result.ok, result.stderr
    assert result.stderr == ""  # was "Fontconfig error: No writable cache directories" before the box had a HOME
    # fc-list saw the uncached folder (matplotlib lists its font), and wrote its cache in the box's own HOME.
    assert result.stdout == "True\nTrue\n"
    assert len(result.results) == 1


def test_a_figure_larger_than_the_inline_limit_comes_as_a_file_ref(chart: Built) -> None:
    code = (
        "import numpy as np, matplotlib.pyplot as plt\n"
        "plt.figure(figsize=(12, 12))\nplt.imshow(np.random.default_rng(1).random((300, 300)))\n"
    )
    result = chart.sandbox.run(code)
    assert result.ok, result.stderr
    [figure] = result.results
    assert figure.mime == "image/png" and figure.data is None and figure.file is not None
    assert figure.file.name == "figure-1.png" and figure.file.size > INLINE_LIMIT
    assert chart.sandbox.files.read(figure.file).startswith(PNG)
    assert result.files == ()


def test_a_backend_named_in_the_runs_environment_is_kept(chart: Built) -> None:
    code = (
        "import matplotlib, matplotlib.pyplot as plt\nprint(matplotlib.get_backend())\n"
        "plt.plot([1])\nplt.show()\nplt.close('all')\nplt.figure()\nplt.plot([2])"
    )
    chosen = chart.sandbox.run(code, env={"MPLBACKEND": "agg"})
    assert chosen.exit_code == 0, chosen.stderr
    assert chosen.stdout == "agg\n" and len(chosen.results) == 1  # agg's show() shows nothing; the open one comes
    ours = chart.sandbox.run(code)
    assert ours.stdout == "module://mainsdk_figures\n" and len(ours.results) == 2


def test_figures_come_back_from_async_sandbox_run(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(request.config.cache.mkdir("mainsdk-packages")))
    config = load_config_text(CHART_CONFIG)

    async def main() -> tuple[str, ...]:
        driver = local_sandbox_driver(permissions=config.permissions)
        sandbox = AsyncSandbox(SandboxDeps(config=config, driver=driver, load_entrypoints=False))
        try:
            result = await sandbox.run("import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])\nplt.show()")
            assert result.ok, result.stderr
            return tuple(r.mime for r in result.results)
        finally:
            await sandbox.aclose()

    assert asyncio.run(main()) == ("image/png",)


# The rest need no matplotlib: they check what the wrapper keeps as it was, and what forged figures can do.

SNIPPETS = (
    "import sys\nprint(sys.argv, __name__, sorted(globals()))",
    "def f():\n    raise ValueError('x')\n\ntry:\n    f()\nexcept ValueError as e:\n    raise KeyError('k') from e",
    "x = (",
    "import sys; print('out'); sys.exit(3)",
    "import sys\ndef hook(t, v, tb):\n    import traceback; print(''.join(traceback.format_tb(tb)))\n"
    "sys.excepthook = hook\n1/0",
    "import traceback\ntry:\n    1/0\nexcept Exception:\n    traceback.print_exc()",
    "import atexit\natexit.register(print, 'bye')\nraise KeyboardInterrupt",
)


def test_tracebacks_argv_main_and_line_numbers_are_what_python_c_gives(make_sandbox: Callable[..., Built]) -> None:
    sandbox = make_sandbox().sandbox
    with sandbox.create() as session:
        for code in SNIPPETS:
            run = sandbox.run(code)
            plain = session.run("python3", ["-E", "-s", "-c", code])
            assert (run.stdout, run.stderr, run.exit_code) == (plain.stdout, plain.stderr, plain.exit_code), code
            assert "_mainsdk" not in run.stderr and run.results == () and run.files == ()


def test_long_code_on_stdin_keeps_what_python_dash_gives(make_sandbox: Callable[..., Built]) -> None:
    sandbox = make_sandbox().sandbox
    code = "import sys\n" + "#" * 120_000 + "\nprint(sys.argv, __file__)\n1/0"
    result = sandbox.run(code)
    assert result.stdout == "['-'] <stdin>\n" and result.exit_code == 1
    assert result.stderr == (
        "Traceback (most recent call last):\n"
        '  File "<stdin>", line 4, in <module>\n'
        "ZeroDivisionError: division by zero\n"
    )


def test_a_module_named_matplotlib_that_is_not_the_real_one_still_imports(make_sandbox: Callable[..., Built]) -> None:
    standin = {"matplotlib/__init__.py": "NAME = 'mine'\n", "matplotlib/pyplot.py": "def show(): print('shown')\n"}
    result = make_sandbox().sandbox.run("import matplotlib, matplotlib.pyplot as plt\nplt.show()", files=standin)
    assert result.ok, result.stderr
    assert (result.stdout, result.stderr, result.results, result.files) == ("shown\n", "", (), ())


def test_forged_figures_get_no_more_than_out_files(
    make_sandbox: Callable[..., Built], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The code writes the figures folder itself: a file that is no PNG, a PNG named with a secret, more PNGs
    # than a run returns, and a figure-1.png of its own at the top. Its PNGs count as figures (it could send
    # the same bytes as an out file); the rest is dropped, counted, and never named.
    sandbox = make_sandbox().sandbox
    png = _png(8, 8)
    code = (
        "import os\nos.makedirs('../out/.mainsdk-figures')\n"
        "def put(name, data):\n    open('../out/.mainsdk-figures/' + name, 'wb').write(data)\n"
        f"png = {png!r}\n"
        "put('1.png', b'<script>not a png</script>')\n"
        "put(os.environ['TEST_API_KEY'] + '.png', png)\n"
        f"for n in range(2, {MAX_FIGURES + 12}):\n    put('%d.png' % n, png + bytes([n]))\n"
        "open('../out/figure-1.png', 'wb').write(b'mine')\n"
    )
    secret = "sk-test-figures-0123456789"
    monkeypatch.setenv("TEST_API_KEY", secret)
    result = sandbox.run(code, env={"TEST_API_KEY": secret_ref("TEST_API_KEY")})
    assert result.ok, result.stderr
    assert len(result.results) == MAX_FIGURES
    assert [r.bytes() for r in result.results] == [png + bytes([n]) for n in range(2, MAX_FIGURES + 2)]
    assert result.results_dropped == 1 + 1 + 10  # not a PNG, a name the wrapper never writes, past the 50th
    assert [f.name for f in result.files] == ["figure-1.png"] and result.files_dropped == ()
    assert secret not in json.dumps(result.to_dict())
