"""Where does the time go? Horovod's timeline as a Gantt chart per rank, and the per-step
compute / synchronize breakdown of any run.

Horovod's timeline
------------------
With ``HOROVOD_TIMELINE=<file>`` (``JobConfig(timeline=True)``) Horovod's coordinator, rank 0,
writes a Chrome-trace file (open it in chrome://tracing too). What we found in real files:

* it is a JSON array of events, ``ts`` in microseconds since the job started; while the job
  runs the closing ``]`` is missing, so :func:`load_events` reads unfinished files too;
* ``pid`` is not a process: it numbers a *tensor* (``process_name`` metadata events give its
  name, e.g. ``allreduce.fc1.weight``);
* ``NEGOTIATE_ALLREDUCE`` (a ``B``/``E`` pair) is the coordinator collecting "ready" messages
  for the tensor; inside it an ``X`` event named ``"0"``, ``"1"``, ... marks the moment rank k
  had that gradient ready. Horovod's response cache skips these per-rank marks after the
  first step unless ``HOROVOD_CACHE_CAPACITY=0``;
* then the operation itself, ``ALLREDUCE`` (or ``BROADCAST``...), with nested phases
  ``MEMCPY_IN_FUSION_BUFFER``, ``GLOO_ALLREDUCE``, ``MEMCPY_OUT_FUSION_BUFFER``. Tensors fused
  into one buffer share the same times (Tensor Fusion, Sergeev & Del Balso 2018).

From these we paint, per rank, the activities of the Gantt chart:

* **wait**        its gradient was ready, the slowest rank's was not (ready_k → last ready);
* **negotiation** every rank ready, the coordinator agreeing and queueing the operation;
* **allreduce**   the data moving (every rank takes part at the same time);
* **compute**     everything else: forward, backward and optimizer on the rank's own data.

A rank's main thread keeps computing backward while Horovod's background thread
communicates earlier gradients, so "wait" means *this gradient* waited, not that the
whole rank stood idle.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: Painting order when activities overlap: the higher wins.
_PRIORITY = {"allreduce": 3, "negotiation": 2, "wait": 1}


# --- reading the file ---------------------------------------------------------------------

def load_events(path: str | Path) -> list[dict]:
    """Read a Chrome-trace JSON array, also while the writer is still appending to it.

    A running job's file lacks the closing ``]`` and may end in a half-written event: we
    keep everything up to the last complete event.
    """
    text = Path(path).read_text(encoding="utf-8").strip()
    if not text:
        return []
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        cut = text.rfind("}")
        while cut > 0:
            try:
                return json.loads(text[: cut + 1] + "]")
            except json.JSONDecodeError:
                cut = text.rfind("}", 0, cut)
        raise ValueError(
            f"{path} is not a Chrome-trace timeline (a JSON array of events)") from None


@dataclass
class Negotiation:
    """One negotiation of one tensor: times in seconds, ``ready`` maps rank → ready time."""

    tensor: str
    start: float
    end: float
    ready: dict[int, float] = field(default_factory=dict)


@dataclass
class Operation:
    """One collective operation of one tensor (``ALLREDUCE``, ``BROADCAST``...)."""

    tensor: str
    name: str
    start: float
    end: float


@dataclass
class HorovodTimeline:
    """The negotiations and operations of a timeline, times in seconds from its first event."""

    negotiations: list[Negotiation]
    operations: list[Operation]

    @property
    def ranks(self) -> list[int]:
        return sorted({r for n in self.negotiations for r in n.ready}) or [0]


def parse_events(events: Iterable[Mapping]) -> HorovodTimeline:
    """Pair the B/E events of each tensor into negotiations and operations."""
    names: dict[int, str] = {}
    open_stack: dict[int, list[dict]] = {}
    negotiations: list[Negotiation] = []
    operations: list[Operation] = []
    t0 = None
    for e in events:
        ph, pid = e.get("ph"), e.get("pid")
        if ph == "M":
            if e.get("name") == "process_name" and "name" in e.get("args", {}):
                names[pid] = e["args"]["name"]
            continue
        ts = e.get("ts")
        if ts is None:
            continue
        t0 = ts if t0 is None else min(t0, ts)
        stack = open_stack.setdefault(pid, [])
        if ph == "B":
            stack.append({"name": e.get("name", ""), "start": ts, "ready": {}})
        elif ph == "X" and stack and str(e.get("name", "")).isdigit():
            stack[-1]["ready"][int(e["name"])] = ts
        elif ph == "E" and stack:
            span = stack.pop()
            if stack:                       # a nested phase such as GLOO_ALLREDUCE: skip
                continue
            tensor = names.get(pid, str(pid))
            if span["name"].startswith("NEGOTIATE"):
                negotiations.append(Negotiation(tensor, span["start"], ts, span["ready"]))
            else:
                operations.append(Operation(tensor, span["name"], span["start"], ts))
    return _to_seconds(negotiations, operations, t0 or 0)


def _to_seconds(negotiations: list[Negotiation], operations: list[Operation],
                t0: float) -> HorovodTimeline:
    """Shift microsecond timestamps to seconds since the first event."""
    def s(us: float) -> float:
        return (us - t0) / 1e6

    negs = [Negotiation(n.tensor, s(n.start), s(n.end), {r: s(t) for r, t in n.ready.items()})
            for n in negotiations]
    ops = [Operation(o.tensor, o.name, s(o.start), s(o.end)) for o in operations]
    return HorovodTimeline(negs, ops)


def load_timeline(path: str | Path) -> HorovodTimeline:
    """Read and parse a Horovod timeline file (see the module docstring for its format)."""
    return parse_events(load_events(path))


# --- painting the per-rank activities -----------------------------------------------------

def _intervals_for_rank(tl: HorovodTimeline, rank: int) -> list[tuple[float, float, str]]:
    """(start, end, kind) intervals of wait / negotiation / allreduce for one rank."""
    out: list[tuple[float, float, str]] = []
    ops_by_tensor: dict[str, list[Operation]] = {}
    for op in tl.operations:
        ops_by_tensor.setdefault(op.tensor, []).append(op)
        out.append((op.start, op.end, "allreduce"))
    for n in tl.negotiations:
        following = [o.start for o in ops_by_tensor.get(n.tensor, []) if o.start >= n.end]
        done = min(following) if following else n.end
        last_ready = max(n.ready.values()) if n.ready else n.start
        mine = n.ready.get(rank, last_ready)
        out.append((mine, last_ready, "wait"))
        out.append((last_ready, done, "negotiation"))
    return [(a, b, k) for a, b, k in out if b > a]


def paint(intervals: Sequence[tuple[float, float, str]], start: float,
          end: float) -> list[tuple[float, float, str]]:
    """Flatten overlapping intervals into one strip: the highest-priority kind wins at every
    moment, and time covered by none is ``"compute"``. Adjacent pieces of a kind are merged.
    """
    edges = sorted({start, end, *(t for a, b, _ in intervals for t in (a, b))})
    edges = [t for t in edges if start <= t <= end]
    bounds = sorted((a, b, _PRIORITY[k], k) for a, b, k in intervals)
    strip: list[tuple[float, float, str]] = []
    active: list[tuple[float, int, str]] = []          # (end, priority, kind)
    i = 0
    for left, right in zip(edges, edges[1:], strict=False):
        while i < len(bounds) and bounds[i][0] <= left:
            active.append((bounds[i][1], bounds[i][2], bounds[i][3]))
            i += 1
        active = [a for a in active if a[0] > left]
        kind = max(active, key=lambda a: a[1])[2] if active else "compute"
        if strip and strip[-1][2] == kind and strip[-1][1] == left:
            strip[-1] = (strip[-1][0], right, kind)
        else:
            strip.append((left, right, kind))
    return strip


def rank_activities(tl: HorovodTimeline, ranks: Sequence[int] | None = None,
                    start: float | None = None, end: float | None = None) -> list[dict]:
    """Gantt tasks (``lane, start, end, kind``) for every rank between ``start`` and ``end``
    seconds (default: the first to the last event of the timeline)."""
    times = [t for n in tl.negotiations for t in (n.start, n.end)] + \
            [t for o in tl.operations for t in (o.start, o.end)]
    if not times:
        return []
    lo = min(times) if start is None else start
    hi = max(times) if end is None else end
    tasks = []
    for rank in ranks if ranks is not None else tl.ranks:
        for a, b, kind in paint(_intervals_for_rank(tl, rank), lo, hi):
            tasks.append({"lane": f"rank {rank}", "start": a, "end": b, "kind": kind,
                          "label": f"rank {rank}: {kind} {1000 * (b - a):.2f} ms"})
    return tasks


def time_shares(tasks: Iterable[Mapping]) -> dict[str, dict[str, float]]:
    """Seconds per kind for each lane: ``{"rank 0": {"compute": 1.2, "allreduce": 0.3}}``."""
    shares: dict[str, dict[str, float]] = {}
    for t in tasks:
        lane = shares.setdefault(t["lane"], {})
        lane[t["kind"]] = lane.get(t["kind"], 0.0) + t["end"] - t["start"]
    return shares


# --- compute vs synchronize from the metrics files (any engine) -------------------------------

def step_breakdown(metrics: Iterable[Mapping]) -> dict[str, list]:
    """Per-step compute and synchronize seconds, averaged over ranks.

    Reads the ``"step"`` lines of the metrics files (``compute_s``, ``sync_s``). Returns columns
    ``step`` (a running index over epochs), ``compute_s``, ``sync_s`` and ``sync_share``.
    """
    by_step: dict[tuple[int, int], list[Mapping]] = {}
    for m in metrics:
        if m.get("kind") == "step" and "compute_s" in m and "sync_s" in m:
            by_step.setdefault((m.get("epoch", 0), m.get("step", 0)), []).append(m)
    cols: dict[str, list] = {"step": [], "compute_s": [], "sync_s": [], "sync_share": []}
    for index, key in enumerate(sorted(by_step), start=1):
        lines = by_step[key]
        compute = sum(m["compute_s"] for m in lines) / len(lines)
        sync = sum(m["sync_s"] for m in lines) / len(lines)
        cols["step"].append(index)
        cols["compute_s"].append(compute)
        cols["sync_s"].append(sync)
        cols["sync_share"].append(sync / (compute + sync) if compute + sync > 0 else 0.0)
    return cols


def rank_breakdown(metrics: Iterable[Mapping]) -> dict[str, dict[str, float]]:
    """Total compute and synchronize seconds per rank.

    Returns ``{"rank 0": {"compute": seconds, "sync": seconds}, ...}`` in rank order.
    """
    out: dict[str, dict[str, float]] = {}
    for m in metrics:
        if m.get("kind") == "step" and "compute_s" in m and "sync_s" in m:
            lane = out.setdefault(f"rank {m.get('rank', 0)}", {"compute": 0.0, "sync": 0.0})
            lane["compute"] += m["compute_s"]
            lane["sync"] += m["sync_s"]
    return dict(sorted(out.items(), key=lambda kv: int(kv[0].split()[1])))
