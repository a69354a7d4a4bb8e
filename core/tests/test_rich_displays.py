"""Rich results grouped by display output, and which MIME types a cell may return."""

from __future__ import annotations

from mainsdk.cells import CellResult
from mainsdk.rich import CHART_MIME, DATAFRAME_MIME, Display, RichResult, group_displays, is_binary, is_mime


def _cell(results: tuple[RichResult, ...]) -> CellResult:
    return CellResult("c", "s", 1, "", "", results, None, None, True, False, 0.0, 0)  # type: ignore[arg-type]


def test_forms_of_one_output_are_grouped_and_the_final_expressions_is_main() -> None:
    figure = (RichResult("image/png", b"\x89PNG", display=0), RichResult("text/plain", "<Figure>", display=0))
    value = (
        RichResult("text/html", "<b>4</b>", display=1, main=True),
        RichResult("text/plain", "4", display=1, main=True),
    )
    cell = _cell((*figure, *value))
    assert cell.displays == (Display(0, figure, False), Display(1, value, True))
    assert cell.text == "4"  # the final expression's, not the figure's text form
    assert cell.displays[0].get("image/png") == figure[0] and cell.displays[1].mimes == ("text/html", "text/plain")


def test_results_without_display_indexes_each_stand_alone_and_text_is_the_first_text() -> None:
    # What a kernel that sends no display index gives (an older cassette, a one-shot run's figures).
    old = (RichResult("image/png", b"x"), RichResult("text/plain", "'v'"))
    cell = _cell(old)
    assert [d.forms for d in cell.displays] == [(old[0],), (old[1],)] and cell.text == "'v'"
    assert group_displays(()) == ()


def test_mime_types_a_cell_may_return() -> None:
    for mime in ("text/plain", "text/latex", "image/jpeg", "application/vnd.example+json", "application/javascript"):
        assert is_mime(mime), mime
    bad: tuple[object, ...] = (
        "",
        "text",
        "TEXT/PLAIN",
        "text/plain; charset=utf-8",
        "../x/y",
        "a/" + "b" * 200,
        None,
        3,
    )
    for wrong in bad:
        assert not is_mime(wrong), wrong
    assert is_binary("image/png") and is_binary("image/jpeg") and is_binary("application/pdf")
    assert not is_binary("image/svg+xml") and not is_binary("text/html") and not is_binary("application/json")


def test_a_displays_chart_and_data_forms_read_as_json_and_are_none_when_absent_or_broken() -> None:
    chart = Display(0, (RichResult(CHART_MIME, '{"type": "bar", "elements": [{"label": "a", "value": 3}]}'),))
    frame = Display(1, (RichResult(DATAFRAME_MIME, '{"columns": ["n"], "index": [0], "data": {"n": [1]}}'),))
    assert chart.chart == {"type": "bar", "elements": [{"label": "a", "value": 3}]} and chart.data is None
    assert frame.data == {"columns": ["n"], "index": [0], "data": {"n": [1]}} and frame.chart is None
    assert Display(2, (RichResult(CHART_MIME, "{cut"),)).chart is None  # a form that is not JSON: no chart
