"""The cells' data forms end to end on the real local driver: real matplotlib, pandas and Pillow in the box.

A figure comes back as its PNG, its text form and its chart data; a DataFrame as pandas' HTML and text and its
data form; a PIL image's ``show()`` as a displayed PNG; and no fontconfig noise on stderr, whatever the host's
font cache holds (``test_figures.STALE_FONT_CACHE`` makes the condition in the box).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import CONFIG, Built
from mainsdk.rich import Display
from mainsdk.sync import Session
from test_figures import STALE_FONT_CACHE

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/ns/mnt"), reason="Linux only")

CHART = "application/vnd.mainsdk.chart+json"
FRAME = "application/vnd.mainsdk.dataframe+json"
PNG = b"\x89PNG\r\n\x1a\n"
FORMS_CONFIG = CONFIG.replace("timeout: 10s, memory: 256MB", "timeout: 60s, memory: 1GB").replace(
    "  secrets: [TEST_API_KEY]\n",
    "  secrets: [TEST_API_KEY]\n  packages:\n    python: [pandas==2.2.3, matplotlib==3.9.2]\n",
)


@pytest.fixture
def session(
    make_sandbox: Callable[..., Built], request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Session]:
    """A session whose cells get pandas and matplotlib (and Pillow, matplotlib's own dependency).

    The env is kept in pytest's cache folder, as test_figures keeps it: only a checkout's first run builds it.
    """
    monkeypatch.setenv("XDG_CACHE_HOME", str(request.config.cache.mkdir("mainsdk-packages")))
    with make_sandbox(FORMS_CONFIG).sandbox.create(packages=["pandas", "matplotlib"]) as opened:
        yield opened


def _json(display: Display, mime: str) -> Any:
    form = display.get(mime)
    assert form is not None and isinstance(form.data, str), display
    return json.loads(form.data)


def _png(display: Display) -> bytes:
    form = display.get("image/png")
    assert form is not None and isinstance(form.data, bytes), display
    assert form.data.startswith(PNG)
    return form.data


TUTORIAL = """
import pandas as pd
import matplotlib.pyplot as plt

df = pd.read_csv("data.csv")
df.plot.bar(x="item", y="count", title="Counts")
plt.show()
"""


def test_the_tutorial_chart_as_a_cell_returns_its_png_its_text_and_its_chart_data(session: Session) -> None:
    session.write("data.csv", "item,count\na,1\nb,2\nc,3\n")
    cell = session.run_code(TUTORIAL)
    assert cell.ok and cell.stderr == "", cell
    [figure] = cell.displays
    assert set(figure.mimes) == {"image/png", "text/plain", CHART}
    assert figure.text == "<Figure size 640x480 with 1 Axes>"
    _png(figure)
    chart = _json(figure, CHART)
    assert (chart["type"], chart["title"], chart["x_label"], chart["y_label"]) == ("bar", "Counts", "item", None)
    assert chart["elements"] == [
        {"label": "a", "group": "count", "value": 1.0},
        {"label": "b", "group": "count", "value": 2.0},
        {"label": "c", "group": "count", "value": 3.0},
    ]


def test_a_figure_as_the_last_expression_and_a_line_chart_carry_the_chart_form(session: Session) -> None:
    cell = session.run_code(
        "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
        "ax.plot([0, 1, 2], [1.5, float('nan'), 3.5], label='speed')\nax.set_xlabel('Time (s)')\nfig"
    )
    assert cell.ok and cell.stderr == "", cell
    main = next(d for d in cell.displays if d.main)
    chart = _json(main, CHART)
    assert chart["type"] == "line" and chart["x_unit"] == "s" and chart["x_scale"] == "linear"
    assert chart["elements"] == [{"label": "speed", "points": [[0.0, 1.5], [1.0, None], [2.0, 3.5]]}]


def test_display_of_a_dataframe_returns_html_text_and_the_data_form(session: Session) -> None:
    cell = session.run_code(
        "import pandas as pd\ndf = pd.DataFrame({'item': ['a', 'b'], 'count': [1, 2]})\ndisplay(df)\ndf.T"
    )
    assert cell.ok and cell.stderr == "", cell
    shown, last = cell.displays
    assert set(shown.mimes) == {"text/html", "text/plain", FRAME} and not shown.main
    html = shown.get("text/html")
    assert html is not None and isinstance(html.data, str) and "<table" in html.data
    assert shown.text is not None and shown.text.split() == ["item", "count", "0", "a", "1", "1", "b", "2"]
    assert _json(shown, FRAME) == {
        "columns": ["item", "count"],
        "index": [0, 1],
        "data": {"item": ["a", "b"], "count": [1, 2]},
        "dtypes": {"item": "object", "count": "int64"},
        "shape": [2, 2],
        "truncated": False,
    }
    assert last.main and _json(last, FRAME)["index"] == ["item", "count"]


# A desktop viewer on the box's PATH, as a host with xdg-utils gives every box (its /usr is the host's): PIL's
# ImageShow puts such viewers before its own IPython one, so show() ran it (an error on stderr, no image) there.
FAKE_VIEWER = """
import os, stat
os.makedirs("bin", exist_ok=True)
with open("bin/xdg-open", "w") as f:
    f.write("#!/bin/sh\\necho 'xdg-open: no method available for opening' >&2\\ntouch \\"$0.ran\\"\\n")
os.chmod("bin/xdg-open", 0o755)
os.environ["PATH"] = os.path.abspath("bin") + os.pathsep + os.environ.get("PATH", os.defpath)
"""


def test_image_show_in_a_cell_displays_the_image_and_never_a_desktop_viewer(session: Session) -> None:
    prepared = session.run_code(FAKE_VIEWER + "import shutil\nshutil.which('xdg-open')")
    assert prepared.ok and prepared.text is not None and prepared.text.endswith("/bin/xdg-open'"), prepared
    cell = session.run_code("from PIL import Image\nimg = Image.new('RGB', (5, 2), 'blue')\nimg.show()\nimg")
    assert cell.ok and cell.stderr == "" and cell.stdout == "", cell
    shown, last = cell.displays
    assert not shown.main and last.main
    for display in (shown, last):
        assert {"image/png", "text/plain"} <= set(display.mimes)
        assert struct.unpack(">II", _png(display)[16:24]) == (5, 2)  # IHDR: width, height
    assert session.run_code("import os\nos.path.exists('bin/xdg-open.ran')").text == "False"


def test_image_save_to_a_path_displays_the_saved_image_and_the_result_reads_as_json(session: Session) -> None:
    cell = session.run_code(
        "from PIL import Image\nimport io, pathlib\nImage.new('RGB', (3, 4), 'red').save('red.png')\n"
        "Image.new('RGB', (6, 1)).save(pathlib.Path('dark.png'))\nImage.new('RGB', (2, 2)).save(io.BytesIO(), 'PNG')"
    )
    assert cell.ok and cell.stderr == "", cell
    # As E2B's template: a save to a named file displays the image; one into an open file or buffer does not.
    assert [struct.unpack(">II", _png(d)[16:24]) for d in cell.displays] == [(3, 4), (6, 1)]
    assert session.run_code("import os\nos.path.getsize('red.png') > 0").text == "True"
    data = json.loads(cell.to_json())
    assert (data["id"], data["number"], data["ok"], data["stop_code"], data["error"]) == (
        cell.id,
        cell.number,
        True,
        None,
        None,
    )
    pngs = [r for r in data["results"] if r["mime"] == "image/png"]
    assert [r["display"] for r in pngs] == [0, 1] and all(r["base64"] for r in pngs)


@pytest.mark.skipif(shutil.which("fc-list") is None, reason="no fontconfig on this host: nothing in a box runs it")
def test_a_matplotlib_cell_prints_no_fontconfig_error_for_fonts_no_system_cache_holds(session: Session) -> None:
    cell = session.run_code(STALE_FONT_CACHE)
    assert cell.ok, cell.error
    assert cell.stderr == ""  # the cell's matplotlib ran fc-list over a folder no read-only cache holds
    assert cell.stdout == "True\nTrue\n" and len(cell.displays) == 1


def test_a_secret_in_a_data_form_is_redacted_as_in_the_cells_text(
    make_sandbox: Callable[..., Built], request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The forms are JSON: a value with a quote or a non-ASCII letter is escaped there ('\\"', '\\u00e4'), so a
    # redactor looking for the value as it is would let it through.
    from mainsdk import secret

    value = 'sk-forms-"quoted"-välue-123'
    monkeypatch.setenv("TEST_API_KEY", value)
    monkeypatch.setenv("XDG_CACHE_HOME", str(request.config.cache.mkdir("mainsdk-packages")))
    sandbox = make_sandbox(FORMS_CONFIG).sandbox
    with sandbox.create(packages=["pandas", "matplotlib"], env={"KEY": secret("TEST_API_KEY")}) as session:
        cell = session.run_code(
            "import os, pandas as pd, matplotlib.pyplot as plt\nk = os.environ['KEY']\n"
            "display(pd.DataFrame({'k': [k]}))\nplt.plot([1, 2], label=k)\nplt.title(k)\nplt.show()"
        )
    assert cell.ok, cell.error
    escaped = {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    forms = [r for r in cell.results if r.mime in (CHART, FRAME)]
    assert len(forms) == 2
    for form in forms:
        assert isinstance(form.data, str)
        assert not [v for v in escaped if v in form.data], form
        assert "[redacted:secret]" in json.dumps(json.loads(form.data))
