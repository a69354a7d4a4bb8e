# mypy: ignore-errors
# ruff: noqa: BLE001, SIM105
# (A data form must never break a cell's display: every error in one means "no form", hence the broad excepts.
# Nothing is imported at the top: matplotlib, pandas, PIL and IPython are imported inside the functions, only
# once the cell's own objects prove them loaded, so a kernel that never draws pays nothing.)
"""The cells' data forms (standard library only at import time): charts, DataFrames, PIL images, in the box.

Core puts this file's text before ``_kernel.py``'s (``cells.kernel_source()``): it runs in the box inside the
kernel's own text and the app never imports it. Its names share that module's globals, so every name here is
``register_forms``, a ``FORMS_``/``CHART_``/``DATAFRAME_`` constant or a ``_forms_`` helper
(``core/tests/test_kernel_forms.py`` checks that no name is defined in both texts). The Python executor calls
``register_forms(shell)`` with its IPython ``InteractiveShell`` once, before the first cell.

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
  ``FORMS_MAX_COLUMNS`` columns and the first ``FORMS_MAX_ROWS`` rows, fewer where that would make more than
  ``FORMS_MAX_CELLS`` values, and strings cut at ``FORMS_MAX_TEXT`` characters. ``text/html`` and
  ``text/plain`` are pandas' own.
- PIL: ``Image.show()`` displays the image (``image/png`` and ``text/plain``, Pillow's ``_repr_png_``) through a
  viewer put first in ``PIL.ImageShow``'s list. Pillow's own ``IPythonViewer`` comes last, after a viewer for
  each desktop program on PATH (``xdg-open``, ``display``, ``eog`` ...), which a box whose ``/usr`` is a
  desktop host's has: ``show()`` ran that program, an error on stderr and no image (E2B stubs
  ``UnixViewer.show_file`` in its template's ``startup_scripts/0003_images.py``). A PIL image as a cell's last
  expression gets ``image/png`` from IPython itself.

Why not depend on ``e2b-charts`` itself: it requires matplotlib, numpy and pydantic, which would then be part
of the kernel's own package set and so on every user's ``sys.path``, a user who pinned none of them (or other
versions) included. Here the rules are re-written over the objects the user's own matplotlib and pandas made.

Every value in a form is plain JSON: numbers as numbers (a chart's as floats, as E2B's), NaN and infinities
as ``null``, dates as ISO 8601 strings, anything else as its ``str``. A form that cannot be made (an odd
artist, a broken ``__str__``) is left out, never an error in the cell.
"""

CHART_MIME = "application/vnd.mainsdk.chart+json"
DATAFRAME_MIME = "application/vnd.mainsdk.dataframe+json"
FORMS_MAX_ROWS = 1000  # a DataFrame form holds at most its first 1000 rows ...
FORMS_MAX_COLUMNS = 100  # ... and 100 columns ...
FORMS_MAX_CELLS = 10000  # ... and fewer rows where the columns are many: at most this many values in all
FORMS_MAX_TEXT = 1000  # a string value in a form is cut to this many characters
FORMS_MAX_POINTS = 2000  # a chart element holds at most this many points (evenly picked, the last kept)
FORMS_MAX_ELEMENTS = 1000  # a chart holds at most this many elements (bars, wedges, lines ...)
# E2B's unit rule (e2b_charts/charts/base.py, Chart2D): "Time (s)" or "Time [s]" has the unit "s".
FORMS_UNIT = r"\s\((.*?)\)|\[(.*?)\]"


def register_forms(shell):
    """Add the chart and DataFrame forms to ``shell``'s display formatters and the PIL viewer (once per shell)."""
    formatters = shell.display_formatter.formatters
    if CHART_MIME in formatters:
        return
    from IPython.core.formatters import BaseFormatter

    class _FormsFormatter(BaseFormatter):
        """A formatter gated on the object's type, as E2B's (0002_data.py): IPython's ``select_figure_formats``
        drops every formatter's printer for ``Figure`` when an inline backend starts, so no printer is
        registered by type; the check is in the call."""

        def __init__(self, mime, make, **kwargs):
            super().__init__(**kwargs)
            self.format_type = mime
            self._make = make

        def __call__(self, obj):
            if not self.enabled:
                return None
            try:
                return self._make(obj)
            except Exception:
                return None  # a form that cannot be made is left out; the object's other forms still come

    parent = shell.display_formatter
    formatters[CHART_MIME] = _FormsFormatter(CHART_MIME, _forms_chart_of, parent=parent)
    formatters[DATAFRAME_MIME] = _FormsFormatter(DATAFRAME_MIME, _forms_frame_of, parent=parent)
    png = formatters.get("image/png")
    if png is not None and ("matplotlib.figure", "Figure") not in png.deferred_printers:
        png.for_type_by_name("matplotlib.figure", "Figure", _forms_figure_png)
    _forms_pil_viewer()


# -- charts (e2b_charts) ----------------------------------------------------------------------------------


def _forms_chart_of(obj):
    """The chart form of a matplotlib figure, or None (not a figure, or nothing drawn in it)."""
    import sys

    figure_module = sys.modules.get("matplotlib.figure")
    if figure_module is None or not isinstance(obj, figure_module.Figure):
        return None
    return _forms_chart(obj)


def _forms_figure_png(figure):
    from IPython.core.pylabtools import print_figure

    return print_figure(figure, "png")


def _forms_chart(figure):
    """e2b_charts/main.py ``chart_figure_to_chart``: None for a blank figure, a superchart for several axes."""
    axes = list(figure.get_axes())
    if not axes or not any(ax.has_data() for ax in axes):  # main.py is_figure_blank
        return None
    if len(axes) > 1:
        get_suptitle = getattr(figure, "get_suptitle", None)  # matplotlib 3.8+, as e2b-charts requires
        title = get_suptitle() if get_suptitle is not None else ""
        elements = [_forms_axes_chart(ax) for ax in axes[:FORMS_MAX_ELEMENTS]]
        chart = {"type": "superchart", "title": title, "elements": elements}  # main.py SuperChart: "" when none
        return _forms_cut(chart, "elements", len(axes), FORMS_MAX_ELEMENTS)
    return _forms_axes_chart(axes[0])


def _forms_children(ax):
    # e2b-charts reads the private ``ax._children``; these public lists hold the same artists (``artists``: every
    # other kind), in another order, which the type rules never look at.
    return [*ax.lines, *ax.collections, *ax.patches, *ax.images, *ax.texts, *ax.tables, *ax.artists]


def _forms_is_grid_line(line):
    """e2b_charts/utils/filtering.py ``is_grid_line``: two points on one vertical or horizontal line."""
    x, y = line.get_xdata(), line.get_ydata()
    if len(x) != 2 or len(y) != 2:
        return False
    return bool(x[0] == x[1] or y[0] == y[1])


def _forms_chart_type(ax):
    """e2b_charts/main.py ``_get_type_of_chart``, in its order."""
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Rectangle, Wedge
    from matplotlib.text import Text

    objects = [o for o in _forms_children(ax) if not isinstance(o, Text)]
    if all(isinstance(o, Line2D) for o in objects):
        return "line"
    if all(isinstance(o, (PathPatch, Line2D)) for o in objects):
        return "box_and_whisker"
    objects = [o for o in objects if not (isinstance(o, Line2D) and _forms_is_grid_line(o))]
    if all(isinstance(o, PathCollection) for o in objects):
        return "scatter"
    if all(isinstance(o, Wedge) for o in objects):
        return "pie"
    if all(isinstance(o, Rectangle) for o in objects):
        return "bar"
    return "unknown"


def _forms_axes_chart(ax):
    """e2b_charts/main.py ``get_chart_from_ax``: the chart of one axes, with the fields of its type."""
    kind = _forms_chart_type(ax)
    chart = {"type": kind, "title": ax.get_title() or None, "elements": []}  # charts/base.py Chart
    if kind in ("unknown", "pie"):
        if kind == "pie":
            chart["elements"] = _forms_pie(ax)
        return _forms_cut(chart, "elements", len(chart["elements"]), FORMS_MAX_ELEMENTS)
    _forms_labels(chart, ax)
    if kind in ("line", "scatter"):
        _forms_ticks(chart, ax)
        chart["elements"] = _forms_lines(ax) if kind == "line" else _forms_scatter(ax)
    elif kind == "bar":
        chart["elements"] = _forms_bars(chart, ax)
    else:
        chart["elements"] = _forms_boxes(chart, ax)
    total = len(chart["elements"])
    chart["elements"] = chart["elements"][:FORMS_MAX_ELEMENTS]
    return _forms_cut(chart, "elements", total, FORMS_MAX_ELEMENTS)


def _forms_cut(form, key, total, limit):
    """Say in the form that ``key`` holds only the first ``limit`` of ``total`` (a key E2B's forms lack)."""
    if total > limit:
        form[key + "_total"] = total
    return form


def _forms_labels(chart, ax):
    """e2b_charts/charts/base.py ``Chart2D``: the axis labels (None when empty) and their units."""
    import re

    for axis, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())):
        chart[axis + "_label"] = label or None
        chart[axis + "_unit"] = None
        match = re.search(FORMS_UNIT, label) if label else None
        if match:
            chart[axis + "_unit"] = match.group(1) or match.group(2)


def _forms_swap_axes(chart):
    """e2b_charts/charts/base.py ``_change_orientation``: horizontal bars and boxes read along y."""
    chart["x_label"], chart["y_label"] = chart["y_label"], chart["x_label"]
    chart["x_unit"], chart["y_unit"] = chart["y_unit"], chart["x_unit"]


def _forms_converter(axis):
    get = getattr(axis, "get_converter", None)  # matplotlib 3.10+; ``converter`` is deprecated there
    return get() if get is not None else getattr(axis, "converter", None)


def _forms_is_dates(converter):
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


def _forms_ticks(chart, ax):
    """e2b_charts/charts/planar.py ``PointChart``: ticks, tick labels and the scale of each axis."""
    import matplotlib.dates

    for axis, scale, ticks, labels in (
        (ax.xaxis, ax.get_xscale(), ax.get_xticks(), ax.get_xticklabels()),
        (ax.yaxis, ax.get_yscale(), ax.get_yticks(), ax.get_yticklabels()),
    ):
        name = "x" if axis is ax.xaxis else "y"
        converter = _forms_converter(axis)
        texts = [label.get_text() for label in labels]
        if _forms_is_dates(converter):  # planar.py _extract_ticks_info
            values = [matplotlib.dates.num2date(tick).isoformat() for tick in ticks]
        else:
            values = [_forms_value(tick) for tick in ticks]
        chart[name + "_ticks"] = values
        chart[name + "_tick_labels"] = texts
        chart[name + "_scale"] = _forms_scale(converter, scale, values, texts)


def _forms_scale(converter, scale, ticks, labels):
    """e2b_charts/charts/planar.py ``_detect_scale``: datetime, the axis' own non-linear scale, categorical when
    the ticks are 0, 1, ... n-1 with labels that are not those numbers, else linear."""
    if _forms_is_dates(converter):
        return "datetime"
    if scale != "linear":
        return scale
    for i, (tick, label) in enumerate(zip(ticks, labels, strict=False)):
        if isinstance(tick, (int, float)) and not isinstance(tick, bool) and tick == i and str(i) != label:
            continue
        return "linear"
    return "categorical"


def _forms_points(xs, ys):
    """(x, y) pairs as e2b_charts/charts/planar.py ``PointData`` keeps them: at most FORMS_MAX_POINTS, evenly
    picked from first to last when there are more (``points_total`` then says how many, a key E2B lacks)."""
    pairs = list(zip(xs, ys, strict=False))
    total = len(pairs)
    if total > FORMS_MAX_POINTS:
        last = FORMS_MAX_POINTS - 1
        pairs = [pairs[(i * (total - 1)) // last] for i in range(FORMS_MAX_POINTS)]
    element = {"points": [[_forms_point(x), _forms_point(y)] for x, y in pairs]}
    if total > FORMS_MAX_POINTS:
        element["points_total"] = total
    return element


def _forms_lines(ax):
    """e2b_charts/charts/planar.py ``LineChart``: each line but grid lines; ``_childN`` is named "Line N"."""
    out = []
    for line in ax.get_lines():
        if _forms_is_grid_line(line):
            continue
        label = str(line.get_label())
        if label.startswith("_child") and label[6:].isdigit():
            label = f"Line {int(label[6:])}"
        out.append({"label": label, **_forms_points(line.get_xdata(), line.get_ydata())})
    return out


def _forms_scatter(ax):
    """e2b_charts/charts/planar.py ``ScatterChart``: each collection's offsets, with its label as it is."""
    out = []
    for collection in ax.collections:
        offsets = collection.get_offsets()
        out.append({"label": str(collection.get_label()), **_forms_points(offsets[:, 0], offsets[:, 1])})
    return out


def _forms_bars(chart, ax):
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
                _forms_swap_axes(chart)
        if sideways:
            ticks, labels = ax.get_yticks(), [t.get_text() for t in ax.get_yticklabels()]
            centres = [p.get_y() + p.get_height() / 2 for p in patches]
            values = [p.get_width() for p in patches]
        else:
            ticks, labels = ax.get_xticks(), [t.get_text() for t in ax.get_xticklabels()]
            centres = [p.get_x() + p.get_width() / 2 for p in patches]
            values = [p.get_height() for p in patches]
        for centre, value in zip(centres, values, strict=False):
            label = _forms_nearest_label(centre, ticks, labels)
            out.append({"label": label, "group": group, "value": _forms_value(value)})
    return out


def _forms_nearest_label(centre, ticks, labels):
    best = None
    for tick, label in zip(ticks, labels, strict=False):
        distance = abs(float(tick) - float(centre))
        if label and (best is None or distance < best[0]):
            best = (distance, label)
    return best[1] if best is not None else f"{float(centre):g}"


def _forms_round(number):
    """e2b_charts/utils/rounding.py ``dynamic_round``: Decimal rounding, as a float."""
    from decimal import Decimal, localcontext

    value = Decimal(str(number))
    with localcontext() as ctx:
        ctx.prec = max(1, 8 - value.adjusted())
        return float(+value)


def _forms_boxes(chart, ax):
    """e2b_charts/charts/bars.py ``BoxAndWhiskerChart``: each box (a PathPatch, ``boxplot(patch_artist=True)``)
    with its quartiles from its vertices, its median and whiskers from the lines inside it, its outliers."""
    labels = [t.get_text() for t in ax.get_xticklabels()]
    boxes = []
    for label, patch in zip(labels, ax.patches, strict=False):
        vertices = patch.get_path().vertices
        xs = [_forms_round(x) for x in vertices[:, 0]]
        ys = [_forms_round(y) for y in vertices[:, 1]]
        x, y = min(xs), min(ys)
        boxes.append({"x": x, "y": y, "label": label, "width": max(xs) - x, "height": max(ys) - y, "outliers": []})
    if not boxes:
        return []
    vertical = all(box["height"] == boxes[0]["height"] for box in boxes)  # bars.py: "vertical" reads along y
    if vertical:
        _forms_swap_axes(chart)
        for box in boxes:
            box["x"], box["y"] = box["y"], box["x"]
            box["width"], box["height"] = box["height"], box["width"]
    for line in ax.lines:
        xdata = [_forms_round(v) for v in line.get_xdata()]
        ydata = [_forms_round(v) for v in line.get_ydata()]
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


def _forms_pie(ax):
    """e2b_charts/charts/pie.py ``PieChart``: each wedge's label, angle (degrees) and radius."""
    from decimal import Decimal

    out = []
    for wedge in ax.patches:
        if not hasattr(wedge, "theta1"):
            continue
        angle = abs(_forms_round(Decimal(float(wedge.theta2)) - Decimal(float(wedge.theta1))))
        out.append({"label": str(wedge.get_label()), "angle": angle, "radius": _forms_value(wedge.r)})
    return out


def _forms_point(value):
    """e2b_charts/charts/planar.py ``PointData._parse_point``: dates as ISO 8601, numbers as floats."""
    import datetime

    if isinstance(value, datetime.date):
        return value.isoformat()
    kind = type(value)
    if kind.__module__ == "numpy" and kind.__name__ == "datetime64":
        return str(value.astype("datetime64[s]"))
    return _forms_value(value)


# -- values -----------------------------------------------------------------------------------------------


def _forms_value(value, depth=0):
    """``value`` as plain JSON: finite numbers as themselves (floats unless integral types), NaN as None, ..."""
    kind = type(value)
    if kind is float:  # the common cases first: a frame's form makes up to FORMS_MAX_CELLS of them
        return value if value - value == 0.0 else None  # NaN and infinities are no JSON numbers
    if kind is int or kind is bool or value is None:
        return value
    if kind is str:
        return value[:FORMS_MAX_TEXT]
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
        return value[:FORMS_MAX_TEXT]
    if isinstance(value, (datetime.date, datetime.time)):
        text = value.isoformat()
        return None if text == "NaT" else text  # pandas' NaT is a datetime whose isoformat is "NaT"
    if depth < 3 and isinstance(value, (list, tuple)):
        return [_forms_value(v, depth + 1) for v in value[:FORMS_MAX_ELEMENTS]]
    if depth < 3 and isinstance(value, dict):
        return {
            str(k)[:FORMS_MAX_TEXT]: _forms_value(v, depth + 1) for k, v in list(value.items())[:FORMS_MAX_ELEMENTS]
        }
    pandas = sys.modules.get("pandas")  # never imported here: a value of pandas' kind means it is loaded
    try:
        if pandas is not None and pandas.isna(value) is True:  # NA and its kin (an array's isna is no bool)
            return None
    except Exception:
        pass
    try:
        return str(value)[:FORMS_MAX_TEXT]
    except Exception:
        return None


# -- DataFrames (E2B's e2b/data) ----------------------------------------------------------------------------


def _forms_frame_of(obj):
    """The DataFrame form, or None (not a DataFrame). As E2B's 0002_data.py, only once pandas is imported."""
    import sys

    pandas = sys.modules.get("pandas")
    if pandas is None or not isinstance(obj, pandas.DataFrame):
        return None
    rows, columns = obj.shape
    shown = min(columns, FORMS_MAX_COLUMNS)
    part = obj.iloc[: min(FORMS_MAX_ROWS, max(1, FORMS_MAX_CELLS // max(shown, 1))), :shown]
    names, data, dtypes = [], {}, {}
    for position in range(part.shape[1]):
        base = _forms_label(part.columns[position])
        name, n = base, 0
        while name in data:  # duplicate labels get ".1", ".2" as pandas' read_csv names them
            n += 1
            name = f"{base}.{n}"
        names.append(name)
        series = part.iloc[:, position]
        data[name] = [_forms_value(v) for v in series.tolist()]
        dtypes[name] = str(series.dtype)
    return {
        "columns": names,
        "index": [_forms_value(v) for v in part.index.tolist()],
        "data": data,
        "dtypes": dtypes,
        "shape": [rows, columns],
        "truncated": rows > part.shape[0] or columns > part.shape[1],
    }


def _forms_label(label):
    if isinstance(label, tuple):  # a MultiIndex column: its levels joined, as pandas prints them flat
        return " ".join(str(part) for part in label)[:FORMS_MAX_TEXT]
    return str(label)[:FORMS_MAX_TEXT]


# -- PIL ----------------------------------------------------------------------------------------------------


def _forms_pil_viewer():
    """Put a viewer that displays the image first in PIL.ImageShow's list: now if PIL.ImageShow is imported,
    else when it is (``Image.show`` imports it on first use, so a cell that never shows imports nothing)."""
    import sys

    if "PIL.ImageShow" in sys.modules:
        _forms_register_viewer(sys.modules["PIL.ImageShow"])
        return
    if any(getattr(finder, "_forms_hook", False) for finder in sys.meta_path):
        return

    class _FormsImageShowHook:
        """A meta path finder for ``PIL.ImageShow`` alone: the module loads as usual, then gets our viewer."""

        _forms_hook = True

        def find_spec(self, name, path=None, target=None):
            if name != "PIL.ImageShow":
                return None
            import importlib.machinery

            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            loader = spec.loader
            run = loader.exec_module

            def exec_module(module):
                run(module)
                try:
                    _forms_register_viewer(module)
                except Exception:
                    pass

            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _FormsImageShowHook())


def _forms_register_viewer(image_show):
    if getattr(image_show, "mainsdk_forms_viewer", False):
        return

    class _FormsViewer(image_show.Viewer):
        """Shows an image as the cell's display output (image/png and text/plain), never in a desktop viewer."""

        format = "PNG"

        def show(self, image, **options):
            from IPython.display import display

            display(image)
            return 1

    image_show.register(_FormsViewer(), -1)
    image_show.mainsdk_forms_viewer = True  # once per PIL.ImageShow
