"""Horovod's negotiation cycle, played out: which gradients are all-reduced when, and fused
with which (notebook 02's picture, `ui/negotiation_picture.py`).

Horovod's background thread runs one cycle after another (Sergeev & Del Balso 2018;
`horovod/common/operations.cc` and `controller.cc`, 0.28.1). A cycle starts
`HOROVOD_CYCLE_TIME` (1 ms by default) after the previous one started, or when the previous
one's all-reduces end, whichever is later. In it every rank reports the tensors that
backward() has made ready; the coordinator, rank 0, keeps those now ready on *every* rank,
packs them in order into buffers of at most `HOROVOD_FUSION_THRESHOLD` bytes (Tensor Fusion,
128 MiB by default) and tells the ranks; each buffer is one all-reduce, run one after the
other before the next cycle. (From a tensor's second step on, Horovod's response cache
replaces the messages to rank 0 by one all-reduce of bit vectors per cycle; the rule is
the same: only tensors ready on every rank go.) An all-reduce takes a ring's time,
`scaling/costmodel.ring_allreduce_time`.
"""

from __future__ import annotations

from typing import Any

from workbench.scaling.costmodel import ring_allreduce_time

FUSION_BYTES = 128 * 2 ** 20     # HOROVOD_FUSION_THRESHOLD's default in 0.28.1


def negotiate(ready_ms: list[list[float]], sizes: list[int], cycle_ms: float = 1.0,
              fusion_bytes: float = FUSION_BYTES, alpha_s: float = 5e-6,
              beta_s: float = 8 / 10e9) -> list[dict[str, Any]]:
    """Every cycle until each tensor has been all-reduced once.

    `ready_ms[r][t]`: when backward() made tensor t ready on rank r (ms); `sizes[t]`: its
    bytes. Tensors are numbered in the order backward makes them. Each cycle:
    ``{"start_ms", "reported": {rank: [t, ...]}, "agreed": [t, ...], "waiting": {t: [ranks
    not ready]}, "buffers": [{"tensors", "bytes", "start_ms", "end_ms"}], "end_ms"}``.
    """
    ranks, tensors = len(ready_ms), len(sizes)
    if ranks < 2 or any(len(times) != tensors for times in ready_ms):
        raise ValueError("need a ready time per tensor for each of 2 or more ranks")
    if cycle_ms <= 0 or fusion_bytes <= 0:
        raise ValueError("the cycle time and the fusion threshold must be positive")
    done: set[int] = set()
    reported: list[set[int]] = [set() for _ in range(ranks)]
    cycles: list[dict[str, Any]] = []
    start, last_end = 0.0, 0.0
    while len(done) < tensors:
        start = max(start + cycle_ms, last_end) if cycles else cycle_ms
        new = {r: [t for t in range(tensors) if t not in reported[r] and ready_ms[r][t] <= start]
               for r in range(ranks)}
        for r, ts in new.items():
            reported[r].update(ts)
        agreed = [t for t in range(tensors)
                  if t not in done and all(t in reported[r] for r in range(ranks))]
        waiting = {t: [r for r in range(ranks) if t not in reported[r]]
                   for t in range(tensors) if t not in done and t not in agreed
                   and any(t in reported[r] for r in range(ranks))}
        buffers, clock = [], start
        for group in fuse(agreed, sizes, fusion_bytes):
            size = sum(sizes[t] for t in group)
            took = 1e3 * ring_allreduce_time(size, ranks, alpha_s, beta_s)
            buffers.append({"tensors": group, "bytes": size, "start_ms": clock,
                            "end_ms": clock + took})
            clock += took
        done.update(agreed)
        last_end = clock
        cycles.append({"start_ms": start, "reported": new, "agreed": agreed,
                       "waiting": waiting, "buffers": buffers, "end_ms": clock})
    return cycles


def fuse(tensors: list[int], sizes: list[int], fusion_bytes: float) -> list[list[int]]:
    """Pack `tensors`, in order, into buffers of at most `fusion_bytes` (a tensor larger
    than that goes alone)."""
    groups: list[list[int]] = []
    used = fusion_bytes
    for t in tensors:
        if used + sizes[t] > fusion_bytes:
            groups.append([])
            used = 0
        groups[-1].append(t)
        used += sizes[t]
    return groups
