"""The cells' data forms (standard library only at import time): charts, DataFrames, PIL images, in the box.

A module of the kernel package: it runs in the box, and the app imports it only for its constants. Nothing is
imported at its top: matplotlib, pandas, PIL and IPython are imported inside the functions, only once the cell's
own objects prove them loaded, so a kernel that never draws pays nothing. A data form must never break a cell's
display: every error in one means "no form". The Python executor calls ``register_forms(shell)`` with its
IPython ``InteractiveShell`` once, before the first cell.

What it adds to IPython's display formatters (``docs/notebooks-and-agents.md`` has the table):

- ``application/vnd.mainsdk.chart+json`` for a ``matplotlib.figure.Figure``: the chart's type (``line``,
  ``scatter``, ``bar``, ``pie``, ``box_and_whisker``, ``superchart`` for a figure of several axes, ``unknown``),
  title, axis labels and units, scales, ticks and tick labels, and its elements with their values. The fields
  and their meaning are those of E2B's code interpreter (its ``e2b/chart`` form, made by the ``e2b-charts``
  package, e2b-dev/code-interpreter ``chart_data_extractor/e2b_charts``, 1.0.0), so code that reads E2B's
  ``result.chart`` reads ours. Each rule below names the file of ``e2b-charts`` it follows. A figure with no
  data (E2B: ``is_figure_blank``) has no chart form. The figure's ``image/png`` form is registered too (IPython's
  own ``print_figure``) for a figure displayed before any inline backend set it, and ``text/plain`` is its repr.
- ``application/vnd.mainsdk.dataframe+json`` for a ``pandas.DataFrame``: ``columns``, ``index``, ``data`` (the
  values by column, E2B's ``e2b/data``, ``DataFrame.to_dict(orient="list")`` of its template's
  ``startup_scripts/0002_data.py``), ``dtypes``, ``shape`` (the whole frame's) and ``truncated``: the first
  ``MAX_COLUMNS`` columns and the first ``MAX_ROWS`` rows, fewer where that would make more than
  ``MAX_CELLS`` values, and strings cut at ``MAX_TEXT`` characters. ``text/html`` and
  ``text/plain`` are pandas' own.
- PIL: ``Image.show()`` displays the image (``image/png`` and ``text/plain``, Pillow's ``_repr_png_``) through a
  viewer put first in ``PIL.ImageShow``'s list. Pillow's own ``IPythonViewer`` comes last, after a viewer for
  each desktop program on PATH (``xdg-open``, ``display``, ``eog`` ...), which a box whose ``/usr`` is a
  desktop host's has: ``show()`` ran that program, an error on stderr and no image (E2B stubs
  ``UnixViewer.show_file`` in its template's ``startup_scripts/0003_images.py``). ``Image.save(path)`` displays
  the saved image too, as that same file of E2B's does. A PIL image as a cell's last expression gets
  ``image/png`` from IPython itself.

Why not depend on ``e2b-charts`` itself: it requires matplotlib, numpy and pydantic, which would then be part
of the kernel's own package set and so on every user's ``sys.path``, a user who pinned none of them (or other
versions) included. Here the rules are re-written over the objects the user's own matplotlib and pandas made.

Every value in a form is plain JSON: numbers as numbers (a chart's as floats, as E2B's), NaN and infinities
as ``null``, dates as ISO 8601 strings, anything else as its ``str``. A form that cannot be made (an odd
artist, a broken ``__str__``) is left out, never an error in the cell.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import types
from collections.abc import Callable
from typing import Any

from .protocol import CHART_MIME, DATAFRAME_MIME

MAX_ROWS = 1000  # a DataFrame form holds at most its first 1000 rows ...
MAX_COLUMNS = 100  # ... and 100 columns ...
MAX_CELLS = 10000  # ... and fewer rows where the columns are many: at most this many values in all
MAX_TEXT = 1000  # a string value in a form is cut to this many characters
MAX_POINTS = 2000  # a chart element holds at most this many points (evenly picked, the last kept)
MAX_ELEMENTS = 1000  # a chart holds at most this many elements (bars, wedges, lines ...)
# E2B's unit rule (e2b_charts/charts/base.py, Chart2D): "Time (s)" or "Time [s]" has the unit "s".
UNIT = r"\s\((.*?)\)|\[(.*?)\]"


def register_forms(shell: Any) -> None:
    """Add the chart and DataFrame forms to ``shell``'s display formatters and the PIL viewer (once per shell)."""
    formatters = shell.display_formatter.formatters
    if CHART_MIME in formatters:
        return
    from IPython.core.formatters import BaseFormatter

    class _FormsFormatter(BaseFormatter):
        """A formatter gated on the object's type, as E2B's (0002_data.py): IPython's ``select_figure_formats``
        drops every formatter's printer for ``Figure`` when an inline backend starts, so no printer is
        registered by type; the check is in the call."""

        def __init__(self, mime: str, make: Callable[[Any], object], **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.format_type = mime
            self._make = make

        def __call__(self, obj: Any) -> Any:
            if not self.enabled:
                return None
            with contextlib.suppress(Exception):
                return self._make(obj)
            return None  # a form that cannot be made is left out; the object's other forms still come

    parent = shell.display_formatter
    formatters[CHART_MIME] = _FormsFormatter(CHART_MIME, _chart_of, parent=parent)
    formatters[DATAFRAME_MIME] = _FormsFormatter(DATAFRAME_MIME, _frame_of, parent=parent)
    png = formatters.get("image/png")
    if png is not None and ("matplotlib.figure", "Figure") not in png.deferred_printers:
        png.for_type_by_name("matplotlib.figure", "Figure", _figure_png)
    _pil_viewer()


# -- charts (e2b_charts) ----------------------------------------------------------------------------------


def _chart_of(obj: object) -> dict[str, Any] | None:
    """The chart form of a matplotlib figure, or None (not a figure, or nothing drawn in it)."""
    import sys

    figure_module = sys.modules.get("matplotlib.figure")
    if figure_module is None or not isinstance(obj, figure_module.Figure):
        return None
    return _chart(obj)


def _figure_png(figure: Any) -> Any:
    return _module("IPython.core.pylabtools").print_figure(figure, "png")


def _module(name: str) -> Any:
    """A module of the cell's own libraries (matplotlib, IPython), some of whose calls carry no types."""
    return importlib.import_module(name)


def _chart(figure: Any) -> dict[str, Any] | None:
    """e2b_charts/main.py ``chart_figure_to_chart``: None for a blank figure, a superchart for several axes."""
    axes = list(figure.get_axes())
    if not axes or not any(ax.has_data() for ax in axes):  # main.py is_figure_blank
        return None
    if len(axes) > 1:
        get_suptitle = getattr(figure, "get_suptitle", None)  # matplotlib 3.8+, as e2b-charts requires
        title = get_suptitle() if get_suptitle is not None else ""
        elements = [_axes_chart(ax) for ax in axes[:MAX_ELEMENTS]]
        chart = {"type": "superchart", "title": title, "elements": elements}  # main.py SuperChart: "" when none
        return _cut(chart, "elements", len(axes), MAX_ELEMENTS)
    return _axes_chart(axes[0])


def _children(ax: Any) -> list[Any]:
    # e2b-charts reads the private ``ax._children``; these public lists hold the same artists (``artists``: every
    # other kind), in another order, which the type rules never look at.
    return [*ax.lines, *ax.collections, *ax.patches, *ax.images, *ax.texts, *ax.tables, *ax.artists]


def _is_grid_line(line: Any) -> bool:
    """e2b_charts/utils/filtering.py ``is_grid_line``: two points on one vertical or horizontal line."""
    x, y = line.get_xdata(), line.get_ydata()
    if len(x) != 2 or len(y) != 2:
        return False
    return bool(x[0] == x[1] or y[0] == y[1])


def _chart_type(ax: Any) -> str:
    """e2b_charts/main.py ``_get_type_of_chart``, in its order."""
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Rectangle, Wedge
    from matplotlib.text import Text

    objects = [o for o in _children(ax) if not isinstance(o, Text)]
    if all(isinstance(o, Line2D) for o in objects):
        return "line"
    if all(isinstance(o, (PathPatch, Line2D)) for o in objects):
        return "box_and_whisker"
    objects = [o for o in objects if not (isinstance(o, Line2D) and _is_grid_line(o))]
    if all(isinstance(o, PathCollection) for o in objects):
        return "scatter"
    if all(isinstance(o, Wedge) for o in objects):
        return "pie"
    if all(isinstance(o, Rectangle) for o in objects):
        return "bar"
    return "unknown"


def _axes_chart(ax: Any) -> dict[str, Any]:
    """e2b_charts/main.py ``get_chart_from_ax``: the chart of one axes, with the fields of its type."""
    kind = _chart_type(ax)
    chart: dict[str, Any] = {"type": kind, "title": ax.get_title() or None, "elements": []}  # charts/base.py Chart
    if kind in ("unknown", "pie"):
        if kind == "pie":
            chart["elements"] = _pie(ax)
        return _cut(chart, "elements", len(chart["elements"]), MAX_ELEMENTS)
    _labels(chart, ax)
    if kind in ("line", "scatter"):
        _ticks(chart, ax)
        chart["elements"] = _lines(ax) if kind == "line" else _scatter(ax)
    elif kind == "bar":
        chart["elements"] = _bars(chart, ax)
    else:
        chart["elements"] = _boxes(chart, ax)
    total = len(chart["elements"])
    chart["elements"] = chart["elements"][:MAX_ELEMENTS]
    return _cut(chart, "elements", total, MAX_ELEMENTS)


def _cut(form: dict[str, Any], key: str, total: int, limit: int) -> dict[str, Any]:
    """Say in the form that ``key`` holds only the first ``limit`` of ``total`` (a key E2B's forms lack)."""
    if total > limit:
        form[key + "_total"] = total
    return form


def _labels(chart: dict[str, Any], ax: Any) -> None:
    """e2b_charts/charts/base.py ``Chart2D``: the axis labels (None when empty) and their units."""
    import re

    for axis, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())):
        chart[axis + "_label"] = label or None
        chart[axis + "_unit"] = None
        match = re.search(UNIT, label) if label else None
        if match:
            chart[axis + "_unit"] = match.group(1) or match.group(2)


def _swap_axes(chart: dict[str, Any]) -> None:
    """e2b_charts/charts/base.py ``_change_orientation``: horizontal bars and boxes read along y."""
    chart["x_label"], chart["y_label"] = chart["y_label"], chart["x_label"]
    chart["x_unit"], chart["y_unit"] = chart["y_unit"], chart["x_unit"]


def _converter(axis: Any) -> Any:
    get = getattr(axis, "get_converter", None)  # matplotlib 3.10+; ``converter`` is deprecated there
    return get() if get is not None else getattr(axis, "converter", None)


def _is_dates(converter: object) -> bool:
    # e2b_charts tests ``isinstance(converter, matplotlib.dates._SwitchableDateConverter)``, a private class: the
    # kind matplotlib registers for dates. Here, any kind registered for dates (that one; pandas' DatetimeConverter,
    # which pandas registers once a frame has been plotted) and every DateConverter (ConciseDateConverter ...).
    import datetime

    import matplotlib.dates
    import matplotlib.units

    kinds = {matplotlib.dates.DateConverter}
    kinds.update(
        type(matplotlib.units.registry[k]) for k in (datetime.date, datetime.datetime) if k in matplotlib.units.registry
    )
    return converter is not None and isinstance(converter, tuple(kinds))


def _ticks(chart: dict[str, Any], ax: Any) -> None:
    """e2b_charts/charts/planar.py ``PointChart``: ticks, tick labels and the scale of each axis."""

    for axis, scale, ticks, labels in (
        (ax.xaxis, ax.get_xscale(), ax.get_xticks(), ax.get_xticklabels()),
        (ax.yaxis, ax.get_yscale(), ax.get_yticks(), ax.get_yticklabels()),
    ):
        name = "x" if axis is ax.xaxis else "y"
        converter = _converter(axis)
        texts = [label.get_text() for label in labels]
        if _is_dates(converter):  # planar.py _extract_ticks_info
            dates = _module("matplotlib.dates")
            values = [dates.num2date(tick).isoformat() for tick in ticks]
        else:
            values = [_value(tick) for tick in ticks]
        chart[name + "_ticks"] = values
        chart[name + "_tick_labels"] = texts
        chart[name + "_scale"] = _scale(converter, scale, values, texts)


def _scale(converter: object, scale: str, ticks: list[Any], labels: list[str]) -> str:
    """e2b_charts/charts/planar.py ``_detect_scale``: datetime, the axis' own non-linear scale, categorical when
    the ticks are 0, 1, ... n-1 with labels that are not those numbers, else linear."""
    if _is_dates(converter):
        return "datetime"
    if scale != "linear":
        return scale
    for i, (tick, label) in enumerate(zip(ticks, labels, strict=False)):
        if isinstance(tick, (int, float)) and not isinstance(tick, bool) and tick == i and str(i) != label:
            continue
        return "linear"
    return "categorical"


def _points(xs: Any, ys: Any) -> dict[str, Any]:
    """(x, y) pairs as e2b_charts/charts/planar.py ``PointData`` keeps them: at most MAX_POINTS, evenly
    picked from first to last when there are more (``points_total`` then says how many, a key E2B lacks)."""
    pairs = list(zip(xs, ys, strict=False))
    total = len(pairs)
    if total > MAX_POINTS:
        last = MAX_POINTS - 1
        pairs = [pairs[(i * (total - 1)) // last] for i in range(MAX_POINTS)]
    element: dict[str, Any] = {"points": [[_point(x), _point(y)] for x, y in pairs]}
    if total > MAX_POINTS:
        element["points_total"] = total
    return element


def _lines(ax: Any) -> list[dict[str, Any]]:
    """e2b_charts/charts/planar.py ``LineChart``: each line but grid lines; ``_childN`` is named "Line N"."""
    out = []
    for line in ax.get_lines():
        if _is_grid_line(line):
            continue
        label = str(line.get_label())
        if label.startswith("_child") and label[6:].isdigit():
            label = f"Line {int(label[6:])}"
        out.append({"label": label, **_points(line.get_xdata(), line.get_ydata())})
    return out


def _scatter(ax: Any) -> list[dict[str, Any]]:
    """e2b_charts/charts/planar.py ``ScatterChart``: each collection's offsets, with its label as it is."""
    out = []
    for collection in ax.collections:
        offsets = collection.get_offsets()
        out.append({"label": str(collection.get_label()), **_points(offsets[:, 0], offsets[:, 1])})
    return out


def _bars(chart: dict[str, Any], ax: Any) -> list[dict[str, Any]]:
    """e2b_charts/charts/bars.py ``BarChart``: one element per bar, its group the container's label
    (``_containerN`` is "Group N").

    Two departures, both where e2b-charts reads a wrong bar: the orientation is the container's own
    (``BarContainer.orientation``, matplotlib 3.4+) where e2b-charts takes "all bars of equal height" as
    horizontal (a vertical chart of equal values, or of one bar, read sideways); and a bar's label is the
    tick label nearest to the bar's centre (e2b-charts zips the tick labels with the bars in order, which
    only matches when there is one tick per bar).
    """
    out = []
    horizontal = None
    for container in ax.containers:
        patches = [p for p in getattr(container, "patches", ()) if hasattr(p, "get_height")]
        if not patches:
            continue
        group = str(container.get_label())
        if group.startswith("_container") and group[10:].isdigit():
            group = f"Group {int(group[10:])}"
        orientation = getattr(container, "orientation", None)
        if orientation in ("vertical", "horizontal"):
            sideways = orientation == "horizontal"
        else:
            heights = [p.get_height() for p in patches]
            sideways = all(h == heights[0] for h in heights)
        if horizontal is None:
            horizontal = sideways
            if sideways:
                _swap_axes(chart)
        if sideways:
            ticks, labels = ax.get_yticks(), [t.get_text() for t in ax.get_yticklabels()]
            centres = [p.get_y() + p.get_height() / 2 for p in patches]
            values = [p.get_width() for p in patches]
        else:
            ticks, labels = ax.get_xticks(), [t.get_text() for t in ax.get_xticklabels()]
            centres = [p.get_x() + p.get_width() / 2 for p in patches]
            values = [p.get_height() for p in patches]
        for centre, value in zip(centres, values, strict=False):
            label = _nearest_label(centre, ticks, labels)
            out.append({"label": label, "group": group, "value": _value(value)})
    return out


def _nearest_label(centre: float, ticks: Any, labels: list[str]) -> str:
    best = None
    for tick, label in zip(ticks, labels, strict=False):
        distance = abs(float(tick) - float(centre))
        if label and (best is None or distance < best[0]):
            best = (distance, label)
    return best[1] if best is not None else f"{float(centre):g}"


def _round(number: object) -> float:
    """e2b_charts/utils/rounding.py ``dynamic_round``: Decimal rounding, as a float."""
    from decimal import Decimal, localcontext

    value = Decimal(str(number))
    with localcontext() as ctx:
        ctx.prec = max(1, 8 - value.adjusted())
        return float(+value)


def _boxes(chart: dict[str, Any], ax: Any) -> list[dict[str, Any]]:
    """e2b_charts/charts/bars.py ``BoxAndWhiskerChart``: each box (a PathPatch, ``boxplot(patch_artist=True)``)
    with its quartiles from its vertices, its median and whiskers from the lines inside it, its outliers."""
    labels = [t.get_text() for t in ax.get_xticklabels()]
    boxes = []
    for label, patch in zip(labels, ax.patches, strict=False):
        vertices = patch.get_path().vertices
        xs = [_round(x) for x in vertices[:, 0]]
        ys = [_round(y) for y in vertices[:, 1]]
        x, y = min(xs), min(ys)
        boxes.append({"x": x, "y": y, "label": label, "width": max(xs) - x, "height": max(ys) - y, "outliers": []})
    if not boxes:
        return []
    vertical = all(box["height"] == boxes[0]["height"] for box in boxes)  # bars.py: "vertical" reads along y
    if vertical:
        _swap_axes(chart)
        for box in boxes:
            box["x"], box["y"] = box["y"], box["x"]
            box["width"], box["height"] = box["height"], box["width"]
    for line in ax.lines:
        xdata = [_round(v) for v in line.get_xdata()]
        ydata = [_round(v) for v in line.get_ydata()]
        if vertical:
            xdata, ydata = ydata, xdata
        if len(xdata) == 1:
            inside = [b for b in boxes if b["x"] <= xdata[0] <= b["x"] + b["width"]]
            if inside:
                inside[0]["outliers"].append(ydata[0])
        if len(ydata) != 2 or len(xdata) != 2:
            continue
        inside = [b for b in boxes if b["x"] <= xdata[0] <= xdata[1] <= b["x"] + b["width"]]
        if not inside:
            continue
        box = inside[0]
        if ydata[0] == ydata[1] and box["y"] <= ydata[0] <= box["y"] + box["height"]:
            box["median"] = ydata[0]
            continue
        low, high = min(ydata), max(ydata)
        if high == box["y"]:
            box["whisker_lower"] = low
        elif low == box["y"] + box["height"]:
            box["whisker_upper"] = high
    return [
        {
            "label": box["label"],
            "min": box.get("whisker_lower"),
            "first_quartile": box["y"],
            "median": box.get("median"),
            "third_quartile": box["y"] + box["height"],
            "max": box.get("whisker_upper"),
            "outliers": box["outliers"],
        }
        for box in boxes
    ]


def _pie(ax: Any) -> list[dict[str, Any]]:
    """e2b_charts/charts/pie.py ``PieChart``: each wedge's label, angle (degrees) and radius."""
    from decimal import Decimal

    out = []
    for wedge in ax.patches:
        if not hasattr(wedge, "theta1"):
            continue
        angle = abs(_round(Decimal(float(wedge.theta2)) - Decimal(float(wedge.theta1))))
        out.append({"label": str(wedge.get_label()), "angle": angle, "radius": _value(wedge.r)})
    return out


def _point(value: Any) -> object:
    """e2b_charts/charts/planar.py ``PointData._parse_point``: dates as ISO 8601, numbers as floats."""
    import datetime

    if isinstance(value, datetime.date):
        return value.isoformat()
    kind = type(value)
    if kind.__module__ == "numpy" and kind.__name__ == "datetime64":
        return str(value.astype("datetime64[s]"))
    return _value(value)


# -- values -----------------------------------------------------------------------------------------------


def _value(value: Any, depth: int = 0) -> object:
    """``value`` as plain JSON: finite numbers as themselves (floats unless integral types), NaN as None, ..."""
    kind = type(value)
    if kind is float:  # the common cases first: a frame's form makes up to MAX_CELLS of them
        return value if value - value == 0.0 else None  # NaN and infinities are no JSON numbers
    if kind is int or kind is bool or value is None:
        return value
    if kind is str:
        return value[:MAX_TEXT]
    import datetime
    import decimal
    import math
    import numbers
    import sys

    if kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_"):  # numpy 2 named it bool
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, (numbers.Real, decimal.Decimal)):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if isinstance(value, (datetime.date, datetime.time)):
        text = value.isoformat()
        return None if text == "NaT" else text  # pandas' NaT is a datetime whose isoformat is "NaT"
    if depth < 3 and isinstance(value, (list, tuple)):
        return [_value(v, depth + 1) for v in value[:MAX_ELEMENTS]]
    if depth < 3 and isinstance(value, dict):
        return {str(k)[:MAX_TEXT]: _value(v, depth + 1) for k, v in list(value.items())[:MAX_ELEMENTS]}
    pandas = sys.modules.get("pandas")  # never imported here: a value of pandas' kind means it is loaded
    with contextlib.suppress(Exception):
        if pandas is not None and pandas.isna(value) is True:  # NA and its kin (an array's isna is no bool)
            return None
    with contextlib.suppress(Exception):
        return str(value)[:MAX_TEXT]
    return None


# -- DataFrames (E2B's e2b/data) ----------------------------------------------------------------------------


def _frame_of(obj: Any) -> dict[str, Any] | None:
    """The DataFrame form, or None (not a DataFrame). As E2B's 0002_data.py, only once pandas is imported."""
    import sys

    pandas = sys.modules.get("pandas")
    if pandas is None or not isinstance(obj, pandas.DataFrame):
        return None
    rows, columns = obj.shape
    shown = min(columns, MAX_COLUMNS)
    part = obj.iloc[: min(MAX_ROWS, max(1, MAX_CELLS // max(shown, 1))), :shown]
    names, data, dtypes = [], {}, {}
    for position in range(part.shape[1]):
        base = _label(part.columns[position])
        name, n = base, 0
        while name in data:  # duplicate labels get ".1", ".2" as pandas' read_csv names them
            n += 1
            name = f"{base}.{n}"
        names.append(name)
        series = part.iloc[:, position]
        data[name] = [_value(v) for v in series.tolist()]
        dtypes[name] = str(series.dtype)
    return {
        "columns": names,
        "index": [_value(v) for v in part.index.tolist()],
        "data": data,
        "dtypes": dtypes,
        "shape": [rows, columns],
        "truncated": rows > part.shape[0] or columns > part.shape[1],
    }


def _label(label: object) -> str:
    if isinstance(label, tuple):  # a MultiIndex column: its levels joined, as pandas prints them flat
        return " ".join(str(part) for part in label)[:MAX_TEXT]
    return str(label)[:MAX_TEXT]


# -- PIL ----------------------------------------------------------------------------------------------------


def _pil_viewer() -> None:
    """Make PIL's ``Image.show()`` and ``Image.save(path)`` display the image: now for the modules already
    imported, else when they are (so a cell that never uses PIL imports nothing of it)."""
    import sys

    for name, patch in _PIL_PATCHES.items():
        if name in sys.modules:
            with contextlib.suppress(Exception):
                patch(sys.modules[name])
    if any(getattr(finder, "_hook", False) for finder in sys.meta_path):
        return

    class _FormsPilHook:
        """A meta path finder for ``PIL.ImageShow`` and ``PIL.Image`` alone: each loads as usual, then is patched."""

        _hook = True

        def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
            patch = _PIL_PATCHES.get(name)
            if patch is None:
                return None
            import importlib.machinery

            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            loader: Any = spec.loader
            run = loader.exec_module

            def exec_module(module: types.ModuleType) -> None:
                run(module)
                with contextlib.suppress(Exception):
                    patch(module)

            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _FormsPilHook())


def _patch_save(image_module: Any) -> None:
    """``Image.save`` to a path displays the image too, as E2B's template does (its ``0003_images.py``)."""
    if getattr(image_module, "mainsdk_forms_save", False):
        return
    image_class = image_module.Image
    original = image_class.save

    def save(self: Any, fp: Any, format: Any = None, **params: Any) -> Any:
        saved = original(self, fp, format, **params)
        if isinstance(fp, str | os.PathLike):  # a file by name; E2B shows no image written to an open file either
            _module("IPython.display").display(self)
        return saved

    save.__doc__ = original.__doc__
    image_class.save = save
    image_module.mainsdk_forms_save = True  # once per PIL.Image


def _register_viewer(image_show: Any) -> None:
    if getattr(image_show, "mainsdk_forms_viewer", False):
        return

    def show(self: object, image: Any, **options: Any) -> int:
        """Show an image as the cell's display output (image/png and text/plain), never in a desktop viewer."""
        _module("IPython.display").display(image)
        return 1

    viewer = type("_FormsViewer", (image_show.Viewer,), {"format": "PNG", "show": show})
    image_show.register(viewer(), -1)
    image_show.mainsdk_forms_viewer = True  # once per PIL.ImageShow


_PIL_PATCHES: dict[str, Callable[[Any], None]] = {"PIL.ImageShow": _register_viewer, "PIL.Image": _patch_save}
