"""The /out collections under way, each stepped a slice per loop turn: apart from the server so its loop stays short."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable

from . import boxes, common
from .channel_out import ChannelOutput
from .runs import Channel, Run, ServerBox

# Longest stretch the loop gives one /out collection before it looks at everything else again.
COLLECT_SLICE = 0.005


def then_collect(box: ServerBox, rid: int, then: object) -> tuple[int, int] | None:
    """An exec's ``then`` (a one-shot box): collect /out as (id, max_bytes) after it, then close the box.

    Its open and files were sent ahead without waiting for their answers: if one of them (or any
    request on the box) failed, the exec does not run.
    """
    if then is None:
        return None
    if not isinstance(then, dict):
        raise common.RequestError("value", "then must be an object")
    collect_id, max_bytes = then.get("collect_id"), then.get("max_bytes")
    if not isinstance(collect_id, int) or isinstance(collect_id, bool) or collect_id in (0, rid):
        raise common.RequestError("value", "then.collect_id must be an integer other than 0 and the exec's id")
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0:
        raise common.RequestError("value", "then.max_bytes must be a non-negative integer")
    if box.failed:
        raise common.RequestError("launcher", "an earlier request on this box failed: the one-shot exec does not run")
    return collect_id, max_bytes


class OutCollections:
    """Unfinished /out collections by (channel, request id) (``Server`` has one).

    ``begin_close(box)``: the server closes a one-shot box once the collection its exec asked for is sent.
    """

    def __init__(self, out: ChannelOutput, begin_close: Callable[[ServerBox], None]) -> None:
        self.out = out
        self.begin_close = begin_close
        self.pending: dict[tuple[Channel, int], tuple[Channel, int, boxes.OutCollector]] = {}

    def start(self, ch: Channel, rid: int, collector: boxes.OutCollector) -> None:
        """A ``collect`` request: its first slice at once (a small /out is done in it)."""
        if (ch, rid) in self.pending:
            raise common.RequestError("launcher", f"collect id {rid} already running")
        self.step(ch, rid, collector)

    def step_all(self) -> None:
        """One slice of every unfinished collection (a loop turn)."""
        for ch, rid, collector in list(self.pending.values()):
            self.step(ch, rid, collector)

    def after_run(self, run: Run) -> None:
        """A one-shot box's run has reported: collect its /out at once, unasked, then close the box."""
        if run.then is None or run.box.closing:
            return
        collect_id, max_bytes = run.then
        run.box.close_after = collect_id
        self.step(run.channel, collect_id, boxes.OutCollector(run.box, max_bytes))

    def step(self, ch: Channel, rid: int, collector: boxes.OutCollector) -> None:
        """Collect for one slice; reply when done.

        Never more than COLLECT_SLICE at a time, so a huge or deep /out delays no other
        box's requests; deadlines do not wait for it either (B keeps them, see stages.py).
        """
        box = collector.box
        try:
            with boxes.AsBox(box):
                done = collector.step(time.monotonic() + COLLECT_SLICE)
        except Exception as exc:  # noqa: BLE001 - a bug in one collection must not take the server down
            traceback.print_exc()
            collector.close()
            self.pending.pop((ch, rid), None)
            self.out.reply_error(ch, rid, common.RequestError("launcher", f"internal error: {exc!r}"))
            if box.close_after == rid:
                self.begin_close(box)
            return
        if not done:
            self.pending[(ch, rid)] = (ch, rid, collector)
            return
        self.pending.pop((ch, rid), None)
        header, payload = collector.reply()
        self.out.send(ch, dict(header, id=rid, ok=True), payload)
        if box.close_after == rid:
            self.begin_close(box)  # a one-shot box: its exec asked for /out, and that was all

    def stop_box(self, box: ServerBox) -> None:
        """Drop the box's unfinished collections (it is closing): their descriptors must not pin its tmpfs."""
        for key, (_, _, collector) in list(self.pending.items()):
            if collector.box is box:
                collector.close()
                del self.pending[key]

    def stop_channel(self, ch: Channel) -> None:
        """Drop the collections a lost channel asked for: their reply has nowhere to go."""
        for key, (_, _, collector) in list(self.pending.items()):
            if key[0] is ch:
                collector.close()
                del self.pending[key]
