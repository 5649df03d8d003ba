"""A rank module that writes made-up training metrics at a steady rate, without training.

It follows the rank protocol (see :mod:`workbench.rank.protocol`), so it runs as the ranks
of a real job through :func:`workbench.launch.start_module`, under any engine:

    from workbench.launch import start_module
    job = start_module("serial", np=1, module="workbench.ui.metrics_emitter",
                       args=["--rate", "100", "--seconds", "10"])

Why: to measure how quickly the live charts follow the run's metrics files
(``metrics/rank<k>.jsonl``) at a known load (``benchmarks/ui_latency.py``),
and to demonstrate the panels without spending CPU on a model.
Each step line also carries ``wall``, the wall-clock time (seconds since the epoch) at which
it was written, so a reader can tell how long the line took to reach a chart.
"""

from __future__ import annotations

import argparse
import math
import random
import time

from workbench.rank.context import this_rank
from workbench.rank.protocol import RankContext


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0,
                        help="step lines per second per rank (default 100)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="how long to emit, in seconds (default 10)")
    return parser.parse_args(argv)


def emit(ctx: RankContext, rate: float, seconds: float) -> int:
    """Write step lines at ``rate`` per second for ``seconds``; return how many were written.

    Lines are paced against a fixed schedule (not a fixed sleep), so the rate holds even when
    a write is slow. The loss decays like a real training curve, with noise.
    """
    rng = random.Random(ctx.rank)
    n_steps = int(rate * seconds)
    start = time.perf_counter()
    ctx.metric("event", message="ready", steps_per_epoch=n_steps, epochs=1)
    for step in range(n_steps):
        delay = start + step / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        loss = 2.3 * math.exp(-step / (0.3 * n_steps)) + 0.05 * rng.random()
        ctx.metric("step", epoch=0, step=step, loss=loss, accuracy=1 - loss / 2.5,
                   samples=32, step_time_s=1 / rate, compute_s=0.7 / rate, sync_s=0.3 / rate,
                   wall=time.time())
    elapsed = time.perf_counter() - start
    ctx.metric("epoch", epoch=0, loss=loss, accuracy=1 - loss / 2.5, samples=32 * n_steps,
               epoch_time_s=elapsed, samples_per_s=32 * n_steps / elapsed)
    return n_steps


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    ctx = this_rank()  # opened by the rank wrapper (rank/wrapper.py)
    emit(ctx, args.rate, args.seconds)


if __name__ == "__main__":
    main()
