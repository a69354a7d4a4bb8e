"""The cells' data forms (``mainsdk/kernel/forms.py``) on a real IPython InteractiveShell.

The tests import the kernel's module, register its forms on a real shell as the executor does, and read what
IPython's own display machinery makes of real matplotlib figures, pandas frames and PIL images. The chart forms
are compared with what ``e2b-charts`` (E2B's own extractor, a test dependency only) makes of the same figures.
"""

from __future__ import annotations

import base64
import datetime
import io
import json
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from decimal import Decimal
from typing import Any, cast

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")  # before pyplot: no display in a test run

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd  # type: ignore[import-untyped]
from e2b_charts import chart_figure_to_dict  # type: ignore[import-untyped]
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from mainsdk.kernel import forms
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Circle
from PIL import Image

CHART = "application/vnd.mainsdk.chart+json"
FRAME = "application/vnd.mainsdk.dataframe+json"


@pytest.fixture(scope="module")
def shell() -> Iterator[InteractiveShell]:
    """One real shell (IPython keeps one per process) with the forms registered, as the executor does."""
    ip = InteractiveShell.instance(colors="nocolor")
    forms.register_forms(ip)
    yield ip
    plt.close("all")


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


def bundle(shell: InteractiveShell, obj: object) -> dict[str, Any]:
    """The MIME bundle IPython makes of ``obj`` (what a cell's last expression or ``display(obj)`` carries)."""
    formatter: Any = shell.display_formatter  # IPython leaves format() untyped
    data, _ = formatter.format(obj)
    return cast("dict[str, Any]", data)


def run_cell(shell: InteractiveShell, code: str) -> Any:
    """``shell.run_cell`` (IPython leaves it untyped)."""
    run: Any = shell.run_cell
    return run(code)


def displayed(shell: InteractiveShell, code: str) -> list[dict[str, Any]]:
    """The bundles ``display()`` published while ``code`` ran as a cell (stdout and stderr must stay empty)."""
    with capture_output() as captured:
        result = run_cell(shell, code)
    assert result.success, (captured.stdout, captured.stderr)
    assert captured.stderr == "", captured.stderr
    return [output.data for output in captured.outputs]


def theirs(figure: Figure) -> Any:
    """E2B's chart of ``figure``, as JSON (their enum values and tuples in plain JSON)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e2b-charts reads Axis.converter, deprecated in matplotlib 3.10
        return json.loads(json.dumps(chart_figure_to_dict(figure), default=str))


def chart(shell: InteractiveShell, figure: Figure) -> Any:
    form = bundle(shell, figure)[CHART]
    json.dumps(form, allow_nan=False)  # strict JSON: no NaN, no object a reader cannot parse
    return form


# -- the module itself ---------------------------------------------------------------------------------------


def test_importing_the_forms_module_loads_no_third_party_module() -> None:
    probe = "import mainsdk.kernel.forms\nimport sys\nprint(sorted(m for m in sys.modules if m.split('.')[0] in "
    probe += "('IPython', 'matplotlib', 'pandas', 'PIL', 'numpy', 'traitlets')))\n"
    done = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n" and done.stderr == ""


# -- charts ----------------------------------------------------------------------------------------------------


def test_a_displayed_figure_carries_its_png_its_text_and_its_chart(shell: InteractiveShell) -> None:
    [output] = displayed(
        shell,
        "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.bar(['a', 'b'], [3, 5])\n"
        "ax.set_title('Sales')\nax.set_ylabel('Count (units)')\ndisplay(fig)\nplt.close(fig)",
    )
    assert set(output) == {"image/png", "text/plain", CHART}
    assert output["text/plain"] == "<Figure size 640x480 with 1 Axes>"
    png = output["image/png"]
    assert (png if isinstance(png, bytes) else base64.b64decode(png)).startswith(b"\x89PNG\r\n\x1a\n")
    form = output[CHART]
    assert form["type"] == "bar" and form["title"] == "Sales"
    assert form["y_label"] == "Count (units)" and form["y_unit"] == "units" and form["x_label"] is None
    assert form["elements"] == [
        {"label": "a", "group": "Group 0", "value": 3.0},
        {"label": "b", "group": "Group 0", "value": 5.0},
    ]


def test_the_chart_form_survives_the_inline_backend_dropping_every_figure_printer(shell: InteractiveShell) -> None:
    # IPython's select_figure_formats (run by `%matplotlib inline`) pops every formatter's printer for Figure.
    run_cell(shell, "%matplotlib inline")
    try:
        figure = plt.figure()
        plt.plot([1, 2, 3], label="up")
        assert {"image/png", "text/plain", CHART} <= set(bundle(shell, figure))
        assert chart(shell, figure)["elements"][0]["label"] == "up"
    finally:
        plt.switch_backend("Agg")


def _bar() -> Figure:
    plt.figure(figsize=(10, 6))
    plt.bar(["Author A", "Author B", "Author C", "Author D"], [100, 200, 300, 400], label="Books Sold")
    plt.xlabel("Authors")
    plt.ylabel("Number of Books Sold")
    plt.title("Book Sales by Authors")
    return plt.gcf()


def _line_of_dates() -> Figure:
    dates = [datetime.date(2023, 9, 1) + datetime.timedelta(days=i) for i in range(100)]
    x = np.linspace(0, 2 * np.pi, 100)
    plt.figure()
    plt.plot(cast(Any, dates), np.sin(x), label="sin(x)")
    plt.plot(cast(Any, dates), np.cos(x))
    plt.xlabel("Time (s)")
    plt.ylabel("Amplitude (Hz)")
    plt.title("Plot of sin(x) and cos(x)")
    return plt.gcf()


def _scatter() -> Figure:
    plt.figure()
    plt.scatter([1, 2, 3, 4, 5], [2, 4, 5, 4, 5], label="Dataset 1")
    plt.scatter(np.arange(10), np.arange(10) ** 0.5, label="Dataset 2")
    plt.xlabel("A")
    plt.ylabel("B")
    return plt.gcf()


def _pie() -> Figure:
    plt.figure()
    plt.pie([90, 10], labels=["No", "No, in blue"])
    plt.title("Will I wake up early tomorrow?")
    return plt.gcf()


def _box() -> Figure:
    data = {"Class A": [85, 90, 78, 92, 88], "Class B": [95, 89, 76, 91, 84, 87], "Class C": [75, 82, 88, 79, 86]}
    fig, ax = plt.subplots()
    ax.boxplot(list(data.values()), tick_labels=list(data), patch_artist=True)
    ax.set_title("Exam Scores Distribution")
    ax.set_xlabel("Class")
    ax.set_ylabel("Score")
    return fig


def _superchart() -> Figure:
    fig, (left, right) = plt.subplots(1, 2)
    x = np.linspace(0, 10, 100)
    left.plot(x, np.sin(x))
    left.set_title("Sine Wave")
    right.scatter([1, 2, 3, 4, 5], [5, 3, 4, 1, 2])
    right.set_title("Scatter Plot")
    right.set_xlabel("X")
    right.set_ylabel("Y")
    fig.suptitle("Multiple Charts Example")
    return fig


def _unknown() -> Figure:
    fig, ax = plt.subplots()
    ax.add_patch(Circle((0.5, 0.5), 0.2))
    ax.add_patch(Circle((0.5, 0.5), 0.4, fill=False))
    ax.set_title("Two Concentric Circles")
    return fig


def _log() -> Figure:
    plt.figure()
    x = np.linspace(0, 10, 100)
    plt.plot(x, np.exp(x), label="y = e^x")
    plt.yscale("log")
    plt.xlabel("X-axis")
    plt.ylabel("Y-axis (log scale)")
    plt.title("Chart with Log Scale on Y-axis")
    return plt.gcf()


def _categorical() -> Figure:
    plt.figure()
    plt.plot([1, 2, 3, 4], ["Low", "Mid", "High", "Mid"])
    return plt.gcf()


E2B_FIGURES = {
    "bar": _bar,
    "line": _line_of_dates,
    "scatter": _scatter,
    "pie": _pie,
    "box_and_whisker": _box,
    "superchart": _superchart,
    "unknown": _unknown,
    "log": _log,
    "categorical": _categorical,
}


@pytest.mark.parametrize("name", list(E2B_FIGURES))
def test_the_chart_form_is_what_e2b_charts_makes_of_the_same_figure(shell: InteractiveShell, name: str) -> None:
    # The figures of e2b-charts' own tests (chart_data_extractor/tests/charts/): same fields, same values.
    figure = E2B_FIGURES[name]()
    form = chart(shell, figure)
    assert form == theirs(figure)
    assert form["type"] == {"log": "line", "categorical": "line"}.get(name, name)


def test_chart_fields_read_as_e2b_documents_them(shell: InteractiveShell) -> None:
    line = chart(shell, _line_of_dates())
    assert (line["x_unit"], line["y_unit"], line["x_scale"], line["y_scale"]) == ("s", "Hz", "datetime", "linear")
    assert all(isinstance(tick, str) for tick in line["x_ticks"]) and datetime.datetime.fromisoformat(
        line["x_ticks"][0]
    )
    assert [element["label"] for element in line["elements"]] == ["sin(x)", "Line 1"]
    assert line["elements"][0]["points"][0] == ["2023-09-01", 0.0] and len(line["elements"][0]["points"]) == 100
    pie = chart(shell, _pie())
    assert [(e["label"], e["angle"], e["radius"]) for e in pie["elements"]] == [("No", 324, 1), ("No, in blue", 36, 1)]
    box = chart(shell, _box())["elements"][0]
    assert (box["label"], box["min"], box["first_quartile"], box["median"], box["third_quartile"], box["max"]) == (
        "Class A",
        78.0,
        85.0,
        88.0,
        90.0,
        92.0,
    )
    log = chart(shell, _log())
    assert (log["y_scale"], log["y_unit"]) == ("log", "log scale")
    assert chart(shell, _categorical())["y_scale"] == "categorical"
    superchart = chart(shell, _superchart())
    assert [(c["type"], c["title"]) for c in superchart["elements"]] == [
        ("line", "Sine Wave"),
        ("scatter", "Scatter Plot"),
    ]


def test_dates_read_as_dates_after_pandas_registered_its_converters(shell: InteractiveShell) -> None:
    # Once a frame is plotted pandas' DatetimeConverter (a matplotlib DateConverter) handles every datetime axis.
    pd.plotting.register_matplotlib_converters()
    try:
        plt.figure()
        plt.plot(pd.to_datetime(["2024-01-01", "2024-01-02", "2024-01-03"]), [1, 3, 2])
        form = chart(shell, plt.gcf())
    finally:
        pd.plotting.deregister_matplotlib_converters()
    assert form["x_scale"] == "datetime" and all(isinstance(tick, str) for tick in form["x_ticks"])
    assert form["elements"][0]["points"][0] == ["2024-01-01T00:00:00", 1.0]


def test_bars_keep_their_own_orientation_and_the_label_of_their_tick(shell: InteractiveShell) -> None:
    # Where e2b-charts reads a chart wrongly: bars of equal height are taken as horizontal ones (their widths as
    # values, the axes swapped), and numeric positions are zipped with whatever tick labels there are.
    plt.figure()
    plt.bar(["x", "y", "z"], [4, 4, 4])
    plt.xlabel("letter")
    equal = chart(shell, plt.gcf())
    assert equal["x_label"] == "letter" and [e["value"] for e in equal["elements"]] == [4.0, 4.0, 4.0]
    assert [e["label"] for e in equal["elements"]] == ["x", "y", "z"]
    plt.figure()
    plt.barh(["p", "q"], [2, 7])
    plt.xlabel("amount")
    sideways = chart(shell, plt.gcf())
    assert sideways["y_label"] == "amount" and sideways["x_label"] is None
    assert [(e["label"], e["value"]) for e in sideways["elements"]] == [("p", 2.0), ("q", 7.0)]
    plt.figure()
    plt.bar([1, 2, 3], [5, 6, 7])
    numeric = chart(shell, plt.gcf())
    assert [(e["label"], e["value"]) for e in numeric["elements"]] == [("1.0", 5.0), ("2.0", 6.0), ("3.0", 7.0)]


def test_a_figure_with_nothing_drawn_has_no_chart_form(shell: InteractiveShell) -> None:
    figure, _ = plt.subplots()
    assert CHART not in bundle(shell, figure) and chart_figure_to_dict(figure) == {}
    assert CHART not in bundle(shell, Figure())  # no axes at all: no PNG either (IPython's print_figure)


def test_a_chart_is_bounded_and_says_so(shell: InteractiveShell) -> None:
    points = forms.MAX_POINTS
    plt.figure()
    plt.plot(np.arange(10_000), np.arange(10_000) * 2.0)
    plt.plot([0, 1, 2], [float("nan"), 1.0, float("inf")])
    big, small = chart(shell, plt.gcf())["elements"]
    assert len(big["points"]) == points and big["points_total"] == 10_000
    assert big["points"][0] == [0.0, 0.0] and big["points"][-1] == [9999.0, 19998.0]  # evenly picked, ends kept
    assert small["points"] == [[0.0, None], [1.0, 1.0], [2.0, None]] and "points_total" not in small
    plt.figure()
    plt.bar([str(i) for i in range(1500)], np.ones(1500))
    bars = chart(shell, plt.gcf())
    assert len(bars["elements"]) == forms.MAX_ELEMENTS and bars["elements_total"] == 1500


def test_a_figure_whose_chart_cannot_be_read_still_shows_without_a_word_on_stderr(shell: InteractiveShell) -> None:
    class Broken(Line2D):
        def get_xdata(self, orig: bool = True) -> Any:
            raise RuntimeError("no data for you")

    figure, ax = plt.subplots()
    ax.plot([1, 2])
    ax.add_line(Broken([0, 1], [1, 0]))
    with capture_output() as captured:
        data = bundle(shell, figure)
    assert CHART not in data and "text/plain" in data
    assert captured.stdout == "" and captured.stderr == ""


# -- DataFrames --------------------------------------------------------------------------------------------------


def test_display_of_a_dataframe_carries_html_text_and_its_data_form(shell: InteractiveShell) -> None:
    shell.user_ns["pd"] = pd
    [output] = displayed(
        shell,
        "df = pd.DataFrame({'item': ['a', 'b', None], 'count': [1, 2, 3], 'share': [0.5, float('nan'), 1.5],"
        " 'when': pd.to_datetime(['2024-01-02', None, '2024-03-04'])}, index=['x', 'y', 'z'])\ndisplay(df)",
    )
    assert set(output) == {"text/html", "text/plain", FRAME}
    assert output["text/html"].startswith("<div>") and "<table" in output["text/html"]
    assert output["text/plain"] == repr(shell.user_ns["df"])
    form = output[FRAME]
    assert json.loads(json.dumps(form, allow_nan=False)) == {
        "columns": ["item", "count", "share", "when"],
        "index": ["x", "y", "z"],
        "data": {
            "item": ["a", "b", None],
            "count": [1, 2, 3],
            "share": [0.5, None, 1.5],
            "when": ["2024-01-02T00:00:00", None, "2024-03-04T00:00:00"],
        },
        "dtypes": {"item": "object", "count": "int64", "share": "float64", "when": "datetime64[ns]"},
        "shape": [3, 4],
        "truncated": False,
    }
    # E2B's e2b/data is DataFrame.to_dict(orient="list"); ours holds the same values by column, in plain JSON.
    assert list(form["data"]) == list(shell.user_ns["df"].to_dict(orient="list"))


def test_a_huge_frame_gives_its_first_rows_and_columns_and_says_so(shell: InteractiveShell) -> None:
    rows, columns, cells = forms.MAX_ROWS, forms.MAX_COLUMNS, forms.MAX_CELLS
    long = bundle(shell, pd.DataFrame({"n": np.arange(5000), "half": np.arange(5000) / 2}))[FRAME]
    assert long["shape"] == [5000, 2] and long["truncated"] is True
    assert long["index"] == list(range(rows)) and long["data"]["half"][-1] == (rows - 1) / 2
    wide = bundle(shell, pd.DataFrame(np.arange(5000 * 150).reshape(5000, 150)))[FRAME]
    assert wide["shape"] == [5000, 150] and wide["truncated"] is True
    assert len(wide["columns"]) == columns and wide["columns"][:2] == ["0", "1"]
    shown = cells // columns  # fewer rows where the columns are many: at most forms.MAX_CELLS values
    assert wide["index"] == list(range(shown)) and all(len(v) == shown for v in wide["data"].values())
    assert wide["data"]["1"][:2] == [1, 151]
    assert len(json.dumps(wide)) < 200 * cells  # bounded in bytes too
    text = pd.DataFrame({"s": ["x" * 5000]})
    assert bundle(shell, text)[FRAME]["data"]["s"] == ["x" * forms.MAX_TEXT]


def test_duplicate_and_multiindex_labels_stay_apart(shell: InteractiveShell) -> None:
    frame = pd.DataFrame([[1, 2, 3]], columns=["a", "a", "b"])
    assert bundle(shell, frame)[FRAME]["columns"] == ["a", "a.1", "b"]
    grouped = pd.DataFrame({("n", "min"): [1], ("n", "max"): [2]}, index=pd.MultiIndex.from_tuples([("k", 1)]))
    form = bundle(shell, grouped)[FRAME]
    assert form["columns"] == ["n min", "n max"] and form["index"] == [["k", 1]]


def test_values_of_every_kind_come_as_plain_json(shell: InteractiveShell) -> None:
    values = [
        np.bool_(True),
        Decimal("1.5"),
        b"x",
        [1, float("nan")],
        pd.NA,
        pd.NaT,
        pd.Timedelta("1s"),
        pd.Period("2024-01"),
        {"a": 1},
        np.int64(3),
        np.float32(2.5),
        np.datetime64("2024-01-02"),
        float("inf"),
        datetime.time(1, 2),
        None,
    ]
    frame = pd.DataFrame({"o": pd.Series(values, dtype=object), "n": pd.array([1] * 14 + [None], dtype="Int64")})
    form = bundle(shell, frame)[FRAME]
    assert json.loads(json.dumps(form, allow_nan=False))["data"]["o"] == [
        True,
        1.5,
        "b'x'",
        [1, None],
        None,
        None,
        "0 days 00:00:01",
        "2024-01",
        {"a": 1},
        3,
        2.5,
        "2024-01-02",
        None,
        "01:02:00",
        None,
    ]
    assert form["data"]["n"][-2:] == [1, None] and form["dtypes"]["n"] == "Int64"


def test_objects_of_other_kinds_get_no_data_form(shell: InteractiveShell) -> None:
    for value in (1, "text", [1, 2], pd.Series([1, 2]), {"a": 1}):
        data = bundle(shell, value)
        assert CHART not in data and FRAME not in data and "text/plain" in data


# -- PIL ------------------------------------------------------------------------------------------------------------


def _png_size(data: bytes | str) -> tuple[int, int]:
    raw = data if isinstance(data, bytes) else base64.b64decode(data)
    with Image.open(io.BytesIO(raw)) as image:
        assert image.format == "PNG"
        width, height = image.size
        return int(width), int(height)


# PIL's ImageShow registers a desktop viewer for each one on PATH (xdg-open, display, eog ...) before its own
# IPython viewer: a box whose /usr is a desktop host's ran xdg-open there (an error on stderr, no image).
VIEWER = """#!/bin/sh
echo 'xdg-open: no method available for opening' >&2
touch "$0.ran"
"""


@pytest.mark.parametrize("imported", ["after", "before"])
def test_image_show_displays_the_image_and_never_a_desktop_viewer(tmp_path: Any, imported: str) -> None:
    # A fresh interpreter, as the box's executor, with an xdg-open on PATH; PIL.ImageShow imported after the
    # forms are registered (the viewer comes with it) or before (the viewer is put first at once).
    viewer = tmp_path / "xdg-open"
    viewer.write_text(VIEWER)
    viewer.chmod(0o755)
    code = textwrap.dedent(
        f"""
        import json, sys
        from mainsdk.kernel.forms import register_forms
        if {imported == "before"}:
            import PIL.ImageShow
        from IPython.core.interactiveshell import InteractiveShell
        from IPython.utils.capture import capture_output
        shell = InteractiveShell.instance()
        register_forms(shell)
        with capture_output() as captured:
            shell.run_cell("from PIL import Image\\nImage.new('L', (2, 5)).show()\\nImage.new('L', (3, 1)).show()")
        print(json.dumps([[o.data for o in captured.outputs], captured.stderr], default=str))
        """
    )
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ.get('PATH', os.defpath)}", MPLBACKEND="Agg")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    outputs, stderr = json.loads(done.stdout.splitlines()[-1])
    assert done.stderr == "" and stderr == "" and not (tmp_path / "xdg-open.ran").exists()
    assert len(outputs) == 2 and all({"image/png", "text/plain"} <= set(o) for o in outputs)  # Pillow's jpeg too
    assert [o["text/plain"].split()[-1] for o in outputs] == ["size=2x5>", "size=3x1>"]


def test_a_pil_image_as_the_last_expression_gives_a_png(shell: InteractiveShell) -> None:
    data = bundle(shell, Image.new("RGBA", (4, 6), (0, 0, 255, 128)))
    assert _png_size(data["image/png"]) == (4, 6) and "text/plain" in data
