"""The α–β (latency–bandwidth) cost of an allreduce, and how to measure α and β.

Symbols, used the same way in every formula:

* p  workers taking part;
* n  bytes each worker contributes (the gradient size: parameters × bytes per parameter);
* α  latency per message, in seconds (start-up cost, independent of size);
* β  transfer time per byte on one link, in seconds per byte (1 / bandwidth);
* γ  reduction (adding) time per byte, in seconds per byte; often folded into β.

The formulas are Hockney's model applied to each algorithm's message schedule; the
summaries follow R. Thakur, R. Rabenseifner and W. Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 19(1), 2005.

The module is pure arithmetic: no torch, no numpy, no bokeh.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: The allreduce algorithms the simulator knows.
ALGORITHMS = ("ring", "rabenseifner", "recursive-doubling", "ps")
#: Former names, still accepted: "tree" was this model's first name for Rabenseifner's
#: halving and doubling, which is not NCCL's "tree" (a double binary tree).
ALIASES = {"tree": "rabenseifner"}
#: What ``--algorithm`` accepts.
ALGORITHM_NAMES = ALGORITHMS + tuple(ALIASES)


def algorithm_named(name: str) -> str:
    """The algorithm ``name`` stands for (an alias resolved); ValueError for an unknown one."""
    name = ALIASES.get(name, name)
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}: choose one of {', '.join(ALGORITHMS)}")
    return name


def ring_allreduce_time(n_bytes: float, p: int, alpha: float, beta: float,
                        gamma: float = 0.0) -> float:
    """Seconds for a ring allreduce: 2(p−1)·α + 2·(p−1)/p·n·β + (p−1)/p·n·γ.

    The ring runs a reduce-scatter then an allgather, each of p−1 steps in which every worker
    sends one chunk of n/p bytes to its neighbour: 2·(p−1)/p·n bytes per worker, the lower
    bound for any allreduce, with every link equally loaded. That is what makes the ring
    bandwidth-optimal; its latency term grows with p.
    Source: P. Patarasuk and X. Yuan, "Bandwidth optimal all-reduce algorithms for clusters
    of workstations", J. Parallel Distrib. Comput. 69(2), 2009.
    """
    if p <= 1:
        return 0.0
    share = (p - 1) / p
    return 2 * (p - 1) * alpha + 2 * share * n_bytes * beta + share * n_bytes * gamma


def rabenseifner_allreduce_time(n_bytes: float, p: int, alpha: float, beta: float,
                                gamma: float = 0.0) -> float:
    """Seconds for Rabenseifner's allreduce: 2·log₂p·α + 2·(p−1)/p·n·β + (p−1)/p·n·γ.

    A reduce-scatter by recursive halving, then an allgather by recursive doubling: the same
    bandwidth term as the ring, but only 2·log₂p message rounds, so it wins at large p and
    small n. Non-powers of two cost extra rounds; we use ⌈log₂p⌉.
    Source: R. Rabenseifner, "Optimization of collective reduction operations", ICCS 2004;
    Thakur, Rabenseifner & Gropp, IJHPCA 2005.
    """
    if p <= 1:
        return 0.0
    share = (p - 1) / p
    rounds = math.ceil(math.log2(p))
    return 2 * rounds * alpha + 2 * share * n_bytes * beta + share * n_bytes * gamma


def recursive_doubling_allreduce_time(n_bytes: float, p: int, alpha: float, beta: float,
                                      gamma: float = 0.0) -> float:
    """Seconds for recursive doubling: ⌈log₂p⌉·(α + n·β + n·γ).

    Every round each worker swaps its *whole* vector with a partner, so few rounds but n
    bytes each: the right choice for short messages only. Source: Thakur et al. 2005.
    """
    if p <= 1:
        return 0.0
    return math.ceil(math.log2(p)) * (alpha + n_bytes * beta + n_bytes * gamma)


def parameter_server_time(n_bytes: float, p: int, alpha: float, beta: float,
                          gamma: float = 0.0, servers: int = 1, colocated: bool = False,
                          pipelined: bool = False, busiest_share: float | None = None) -> float:
    """Seconds for a parameter-server step: push gradients, then pull the new weights.

    With one server (the defaults): 2·α + 2·p·n·β + (p−1)·n·γ. Every worker pushes its
    n-byte gradient and pulls n bytes of weights, so the server's one link carries 2·p·n
    bytes per step: a cost *linear* in p. That is the textbook case; deployed systems shard
    the parameters, and even so Uber's TensorFlow jobs lost about half of their GPUs' time
    to communication at 128 GPUs, which made Horovod move to ring allreduce (Sergeev &
    Del Balso 2018, arXiv:1802.05799).

    TensorFlow and BytePS **shard** the parameters over
    ``servers`` = k servers, each holding a share of them; a server then receives p shares
    and sends p shares back. Per phase (push, then pull) the step waits for the busiest link:

    * a server's link carries p·n_s bytes (p−1 if it is ``colocated`` with a worker, whose
      own share stays local), where n_s = ``busiest_share``·n is the largest shard. An even
      split gives n/k; TensorFlow placed whole variables on servers, so a shard is never
      smaller than the largest tensor (pass that tensor's share of n);
    * a worker's link carries its n bytes (n − n_s when a server shares its machine and
      every worker is one).

    Phases: TensorFlow pulled the weights at the start of a step and pushed the gradients at
    its end, so the two phases add up (``pipelined=False``). BytePS cuts tensors into small
    partitions and pulls one while pushing the next, and links are full duplex, so push
    (out of a worker) and pull (into it) overlap: one phase's time (``pipelined=True``).
    That is how k ≥ p dedicated servers beat the ring when bandwidth is scarce: each worker
    link carries n each way, the ring 2(p−1)/p·n (BytePS, docs/rationale.md).

    Each worker exchanges one message per server per phase: 2·k·α. The servers add their
    shards in parallel: (p−1)·n_s·γ.
    """
    if p <= 1:
        return 0.0
    if servers < 1:
        raise ValueError(f"servers must be ≥ 1, got {servers}")
    if colocated:
        servers = min(servers, p)  # a server per worker at most: fewer workers, fewer servers
    shard = max(1.0 / servers, busiest_share or 0.0) * n_bytes
    server_part = (p - 1 if colocated else p) * shard   # a server's bytes each way
    worker_part = n_bytes - shard if colocated and servers == p else n_bytes
    if not pipelined:     # push phase, then pull phase, each as long as its busiest link
        link_bytes = 2 * max(server_part, worker_part)
    elif colocated:       # one link sends its worker's push and its server's pull together
        shared = (n_bytes - shard) + server_part
        link_bytes = shared if servers == p else max(shared, n_bytes)
    else:                 # own links: every link sends one way while it receives the other
        link_bytes = max(server_part, worker_part)
    return 2 * servers * alpha + link_bytes * beta + (p - 1) * shard * gamma


_TIME_FUNCTIONS = {
    "ring": ring_allreduce_time,
    "rabenseifner": rabenseifner_allreduce_time,
    "recursive-doubling": recursive_doubling_allreduce_time,
    "ps": parameter_server_time,
}


@dataclass(frozen=True)
class ServerLayout:
    """How a parameter-server job places its servers (see :func:`parameter_server_time`)."""

    servers: int = 1
    colocated: bool = False
    pipelined: bool = False
    busiest_share: float | None = None

    def describe(self) -> str:
        where = "co-located with workers" if self.colocated else "on their own machines"
        how = "push and pull pipelined" if self.pipelined else "push, then pull"
        return f"{self.servers} server(s) {where}, {how}"


def allreduce_time(algorithm: str, n_bytes: float, p: int, alpha: float, beta: float,
                   gamma: float = 0.0, layout: ServerLayout | None = None) -> float:
    """Seconds to allreduce ``n_bytes`` over ``p`` workers with the named algorithm.

    ``layout`` places the parameter servers of ``"ps"`` (default: one dedicated server).
    """
    algorithm = algorithm_named(algorithm)
    fn = _TIME_FUNCTIONS[algorithm]
    if algorithm == "ps" and layout is not None:
        return parameter_server_time(n_bytes, p, alpha, beta, gamma, layout.servers,
                                     layout.colocated, layout.pipelined, layout.busiest_share)
    return fn(n_bytes, p, alpha, beta, gamma)


def coefficients(algorithm: str, p: int) -> tuple[float, float]:
    """(a, b) such that the algorithm's time is a·α + b·n·β (γ folded into β).

    These are the factors the fit needs: for the ring a = 2(p−1) and b = 2(p−1)/p.
    """
    if p <= 1:
        raise ValueError("an allreduce over one worker sends nothing: use p ≥ 2")
    share = (p - 1) / p
    rounds = math.ceil(math.log2(p))
    table = {
        "ring": (2 * (p - 1), 2 * share),
        "rabenseifner": (2 * rounds, 2 * share),
        "recursive-doubling": (rounds, rounds),
        "ps": (2, 2 * p),
    }
    return table[algorithm_named(algorithm)]


# --- nccl-tests bandwidth figures ---------------------------------------------------------

def algbw(n_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth in bytes/s: size ÷ time (nccl-tests, doc/PERFORMANCE.md)."""
    return n_bytes / time_s


def busbw(n_bytes: float, time_s: float, p: int) -> float:
    """Bus bandwidth in bytes/s for allreduce: algbw × 2(p−1)/p (nccl-tests).

    The factor counts the bytes each worker really moves in an optimal allreduce, so busbw
    can be compared across p and against the link's hardware speed.
    """
    return algbw(n_bytes, time_s) * 2 * (p - 1) / p


# --- fitting α and β to measurements ------------------------------------------------------

@dataclass(frozen=True)
class AlphaBeta:
    """A fitted latency α (seconds per message) and inverse bandwidth β (seconds per byte)."""

    alpha_s: float
    beta_s_per_byte: float

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """1 / β: the per-link bandwidth the fit implies, in bytes/s."""
        return 1.0 / self.beta_s_per_byte if self.beta_s_per_byte > 0 else math.inf


def fit_alpha_beta(sizes_bytes: Sequence[float], times_s: Sequence[float], p: int,
                   algorithm: str = "ring") -> AlphaBeta:
    """Fit α and β of the named algorithm to measured allreduce times.

    The model time = a·α + b·n·β is a straight line t = c₀ + c₁·n, with c₀ = a·α and
    c₁ = b·β (a, b from :func:`coefficients`). We fit the line by *weighted* least squares
    with weights 1/t², i.e. we minimise the *relative* error. An ordinary fit would let the
    64 MB point (tens of milliseconds) swamp the 4 KB points (tens of microseconds) and
    leave α, the latency, decided by noise. γ cannot be told apart from β here and is
    folded into it. Negative estimates (possible with noisy data) are clipped to 0.
    """
    if len(sizes_bytes) != len(times_s):
        raise ValueError("sizes_bytes and times_s must have the same length")
    if len(set(sizes_bytes)) < 2:
        raise ValueError("fitting α and β needs timings at two or more different sizes")
    a, b = coefficients(algorithm, p)
    c0, c1 = _weighted_line_fit(sizes_bytes, times_s, [1.0 / t**2 for t in times_s])
    return AlphaBeta(alpha_s=max(c0, 0.0) / a, beta_s_per_byte=max(c1, 0.0) / b)


def _weighted_line_fit(xs: Sequence[float], ys: Sequence[float],
                       ws: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) minimising Σ w·(y − c₀ − c₁x)² (the normal equations, solved)."""
    sw = sum(ws)
    mx = sum(w * x for w, x in zip(ws, xs, strict=True)) / sw
    my = sum(w * y for w, y in zip(ws, ys, strict=True)) / sw
    sxx = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs, strict=True))
    sxy = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys, strict=True))
    slope = sxy / sxx
    return my - slope * mx, slope
