"""The bytes a rank sends per step, counted at the collectives it calls.

Every call to `all_reduce`, or to an all-gather or reduce-scatter into one tensor (those
that ZeRO and FSDP2 call: `all_gather_single`, `reduce_scatter_single`, and their names
before torch 2.13, workbench/torch_versions.py) goes through a counter, which adds what a
bandwidth-optimal ring sends for it from this rank
(Patarasuk & Yuan, J. Parallel Distrib. Comput. 69(2), 2009), with B the bytes of the whole
tensor and N the ranks:

- all-reduce of B bytes: 2·B·(N−1)/N (a reduce-scatter, then an all-gather);
- all-gather into B bytes: B·(N−1)/N (each rank's 1/N travels to the N−1 others);
- reduce-scatter of B bytes: B·(N−1)/N.

These are the bytes the collectives were asked to move; how a library moves them (gloo's
own algorithm, NCCL's rings or trees) can differ, never below these figures. DDP's reducer
calls its collectives in C++, past any counter here: its rank takes the same ring's figure
for the gradients' bytes (`SENDS`, training/ddp_rank.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch.distributed as dist

#: Per collective: the position and name of its tensor argument whose bytes are B, the
#: position of its `group`, and the share of B one rank sends, as a function of N.
SENDS: dict[str, tuple[int, str, int, Callable[[int], float]]] = {
    "all_reduce": (0, "tensor", 2, lambda n: 2 * (n - 1) / n),
    "all_gather_single": (0, "output_tensor", 2, lambda n: (n - 1) / n),
    "all_gather_into_tensor": (0, "output_tensor", 2, lambda n: (n - 1) / n),
    "reduce_scatter_single": (1, "input", 3, lambda n: (n - 1) / n),
    "reduce_scatter_tensor": (1, "input", 3, lambda n: (n - 1) / n),
}


class Traffic:
    """Counts the bytes this process's collectives send; `install()` once per job: the
    latest counter counts (a warm rank runs job after job, rank/pool.py)."""

    def __init__(self) -> None:
        self.sent = 0.0

    def install(self) -> Traffic:
        """Route torch.distributed's collectives through the counter (those this torch has:
        an old name calls the new one inside torch, past the counter, so none counts twice)."""
        for name, how in SENDS.items():
            original = getattr(dist, name, None)
            if original is None:
                continue
            if getattr(original, "counted_by", None) is not None:
                original = original.__wrapped__     # counted before (a warm rank's last job)
            setattr(dist, name, self._counting(original, *how))
        return self

    def _counting(self, original: Callable, at: int, arg: str, group_at: int,
                  share: Callable[[int], float]):
        @functools.wraps(original)
        def counted(*args, **kwargs):
            tensor = args[at] if len(args) > at else kwargs[arg]
            group = args[group_at] if len(args) > group_at else kwargs.get("group")
            self.sent += tensor.numel() * tensor.element_size() * share(
                dist.get_world_size(group))
            return original(*args, **kwargs)

        counted.counted_by = self
        return counted

    def take(self) -> int:
        """Bytes sent since the last call (rounded to whole bytes)."""
        sent, self.sent = self.sent, 0.0
        return round(sent)
