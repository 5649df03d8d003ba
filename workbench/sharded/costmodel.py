"""What each strategy holds per rank and sends per step, predicted; and what fits.

Pure functions of the model size, with the notation of Rajbhandari et al., "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models" (SC 2020, arXiv:1910.02054):
Ψ parameters, N data-parallel ranks, K bytes of optimizer state per parameter. Bytes are
bytes; the planner's device memory is in GB of 10⁹ bytes, as the paper's tables.

Model states per rank (§3 of the paper; mixed precision: 2-byte parameters and gradients,
and K = 12 for Adam: an fp32 copy of the parameters, momentum and variance):

    strategy   parameters   gradients    optimizer state
    ddp        2Ψ           2Ψ           KΨ
    zero1      2Ψ           2Ψ           KΨ/N
    zero2      2Ψ           2Ψ/N         KΨ/N
    zero3      2Ψ/N         2Ψ/N         KΨ/N

In fp32 the parameters and gradients take 4 bytes each and K counts the optimizer's own
state only (Adam 8: two moments; SGD with momentum 4; plain SGD 0), since the parameters
are already the fp32 copy. ZeRO-3 here is FSDP2 (`--engine fsdp`).

Traffic per rank per step, in parameter-sized values (bandwidth-optimal ring, Patarasuk &
Yuan 2009): DDP all-reduces the gradients, 2Ψ(N−1)/N; ZeRO-2 reduce-scatters them and
all-gathers the updated parameters, the same 2Ψ(N−1)/N; ZeRO-3 all-gathers the parameters
in the forward and again in the backward pass, and reduce-scatters the gradients,
3Ψ(N−1)/N (1.5× DDP). ZeRO-1 as written here (`zero1.py`) all-reduces the gradients and
then all-gathers the parameters, 3Ψ(N−1)/N; the paper's ZeRO-1 reduce-scatters, as ZeRO-2.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from math import prod

STRATEGIES = ("ddp", "zero1", "zero2", "zero3")
#: The engine that runs each strategy (`workbench run --engine ...`).
ENGINE_OF = {"ddp": "torch", "zero1": "zero1", "zero2": "zero2", "zero3": "fsdp"}
STRATEGY_OF = {engine: strategy for strategy, engine in ENGINE_OF.items()}
#: (gradient values, parameter values) each rank sends per step, in units of Ψ(N−1)/N.
SENT_PER_STEP = {"ddp": (2, 0), "zero1": (2, 1), "zero2": (1, 1), "zero3": (1, 2)}
#: The states each strategy shards over the ranks (the others every rank holds whole).
SHARDED_STATES = {"ddp": (), "zero1": ("optimizer",), "zero2": ("grads", "optimizer"),
                  "zero3": ("params", "grads", "optimizer")}


def optimizer_bytes_per_parameter(optimizer: str, momentum: float = 0.0,
                                  mixed: bool = False) -> int:
    """K: bytes of optimizer state per parameter (fp32 state; mixed adds an fp32 copy)."""
    if optimizer == "adam":
        k = 8
    elif optimizer == "sgd":
        k = 4 if momentum else 0
    else:
        raise ValueError(f"unknown optimizer {optimizer!r}: expected adam or sgd")
    return k + 4 if mixed else k


@dataclass(frozen=True)
class Memory:
    """Bytes one rank holds in model states."""

    params: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer


def model_states(psi: float, n: int, strategy: str, k: float,
                 value_bytes: int = 2) -> Memory:
    """Bytes per rank of Ψ=`psi` parameters on `n` ranks, K=`k` bytes of optimizer state per
    parameter, parameters and gradients of `value_bytes` each (2 mixed precision, 4 fp32)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: expected one of "
                         f"{', '.join(STRATEGIES)}")
    if n < 1:
        raise ValueError(f"n must be at least 1 rank, got {n}")
    share = {state: 1 / n if state in SHARDED_STATES[strategy] else 1.0
             for state in ("params", "grads", "optimizer")}
    return Memory(value_bytes * psi * share["params"], value_bytes * psi * share["grads"],
                  k * psi * share["optimizer"])


def backward_peak(psi: float, n: int, strategy: str, k: float, value_bytes: int = 2,
                  gathered: float = 0.0) -> Memory:
    """Bytes per rank at the peak of the backward pass, as the engines here run it, where
    `model_states` counts them after the step. At the end of backward() DDP, ZeRO-1 and
    ZeRO-2 all hold every gradient whole; ZeRO-2 keeps only its slice after its
    reduce-scatter (zero2.py; copying them into one flat buffer holds them twice for a
    moment, not counted here).
    ZeRO-3 (FSDP2) reduce-scatters each block's gradients as soon as backward has made them,
    so it holds its shards plus one block gathered whole, its parameters and their
    gradients: `gathered`, that block's parameter count (DeepSpeed's ZeRO-2 bounds the
    peak the same way, reduce-scattering bucket by bucket)."""
    after = model_states(psi, n, strategy, k, value_bytes)
    if strategy == "zero3":
        return Memory(after.params + value_bytes * gathered,
                      after.grads + value_bytes * gathered, after.optimizer)
    return Memory(after.params, value_bytes * psi, after.optimizer)


def sent_per_step(psi: float, n: int, strategy: str, value_bytes: int = 4,
                  grad_bytes: int | None = None) -> float:
    """Bytes one rank sends per training step: parameters of `value_bytes` each, gradients
    of `grad_bytes` (default the same; 2 when they are sent compressed to bf16)."""
    grads, params = SENT_PER_STEP[strategy]
    grad_bytes = value_bytes if grad_bytes is None else grad_bytes
    return (grads * grad_bytes + params * value_bytes) * psi * (n - 1) / n


def transformer_parameters(layers: int, hidden: int, vocab: int = 0) -> int:
    """Parameters of a transformer of `layers` layers of width h: 12·h² a layer, 4·h² in
    attention (the Q, K, V and output projections, h × h each) and 8·h² in the MLP (h × 4h,
    then 4h × h), plus a vocab × h embedding; biases and norms (about 13·h a layer) left
    out (Narayanan et al., SC 2021, arXiv:2104.04473, §3)."""
    return 12 * layers * hidden * hidden + vocab * hidden


def transformer_flops(layers: int, hidden: int, seq: int, micro_batch: int) -> float:
    """Floating-point operations of one forward pass, counting 2·m·k·n for each (m × k) ·
    (k × n) matrix product: 24·b·s·h² a layer in the four projections and the MLP, and
    4·b·s²·h in attention's two products over the sequence (Narayanan et al. 2021, §3; the
    logits left out). The backward pass costs about twice as much."""
    return layers * (24 * micro_batch * seq * hidden ** 2 + 4 * micro_batch * seq ** 2 * hidden)


def transformer_activations(layers: int, hidden: int, seq: int, micro_batch: int,
                            heads: int) -> float:
    """Bytes of activations a transformer keeps for its backward pass, in 16-bit, without
    recomputation: s·b·h·(34 + 5·a·s/h) per layer (Korthikanti et al., "Reducing Activation
    Recomputation in Large Transformer Models", 2022, arXiv:2205.05198, eq. 1). Data
    parallelism, sharded or not, does not divide them: they follow the batch of each rank."""
    per_layer = seq * micro_batch * hidden * (34 + 5 * heads * seq / hidden)
    return layers * per_layer


@dataclass(frozen=True)
class Plan:
    """The answer to "does it fit": bytes per device and the verdict."""

    strategy: str
    n: int
    device_gb: float
    states: Memory
    activations: float

    @property
    def per_device_gb(self) -> float:
        return (self.states.total + self.activations) / 1e9

    @property
    def fits(self) -> bool:
        return self.per_device_gb <= self.device_gb

    def __str__(self) -> str:
        verdict = "fits" if self.fits else "does not fit"
        return (f"{self.strategy} on {self.n} × {self.device_gb:g} GB: "
                f"{self.states.total / 1e9:.3g} GB model states + "
                f"{self.activations / 1e9:.3g} GB activations = {self.per_device_gb:.3g} GB"
                f" per device: {verdict}")


def plan(psi: float, n: int, device_gb: float, strategy: str, k: float = 12,
         activations: float = 0.0, value_bytes: int = 2) -> Plan:
    """Does a model of Ψ=`psi` parameters fit on `n` devices of `device_gb` GB each with
    `strategy`, `activations` bytes of activations per device included?"""
    if device_gb <= 0:
        raise ValueError(f"device_gb must be positive, got {device_gb}")
    return Plan(strategy, n, device_gb, model_states(psi, n, strategy, k, value_bytes),
                activations)


def smallest_fit(psi: float, device_gb: float, strategy: str, k: float = 12,
                 activations: float = 0.0, value_bytes: int = 2,
                 most: int = 1 << 20) -> int | None:
    """The fewest devices (a power of two) on which it fits, or None if none up to `most`."""
    n = 1
    while n <= most:
        if plan(psi, n, device_gb, strategy, k, activations, value_bytes).fits:
            return n
        n *= 2
    return None


def fsdp2_shard(shapes: list[tuple[int, ...]], n: int, rank: int) -> tuple[int, int]:
    """(padded, own): the elements of rank `rank`'s shard of parameters of `shapes` on `n`
    ranks, as FSDP2 (`fully_shard`) cuts them: each parameter on its dim 0, as torch.chunk
    does, ⌈d₀/n⌉ rows to each rank in turn, so the last ranks get fewer rows or none.

    Every shard is padded to ⌈d₀/n⌉ rows: the parameters, the gradients and the collectives
    use the padded size; the optimizer state, made from the real rows, the rank's own. Summed
    over ranks, `own` is Ψ, and the mean of either is Ψ/N when every d₀ divides by n, as the
    paper's formula assumes (FSDP2's sharding: the documentation of
    `torch.distributed.fsdp.fully_shard`, and its design, pytorch/pytorch issue 114299).
    """
    padded = own = 0
    for shape in shapes:
        rows, per_row = (shape[0], prod(shape[1:])) if shape else (1, 1)
        chunk = -(-rows // n)
        padded += chunk * per_row
        own += max(0, min(rows, (rank + 1) * chunk) - rank * chunk) * per_row
    return padded, own


def table_1(psi: float = 7.5e9, k: float = 12,
            devices: tuple[int, ...] = (1, 4, 16, 64, 256, 1024)) -> dict[int, list[str]]:
    """Per-device model states in GB for each N in `devices`, for DDP, ZeRO-1, 2 and 3, as
    Table 1 of the ZeRO paper prints them for its 7.5B-parameter example (K = 12)."""
    return {n: [as_printed(model_states(psi, n, s, k).total / 1e9) for s in STRATEGIES]
            for n in devices}


def as_printed(x: float) -> str:
    """`x` as the ZeRO paper's Table 1 prints it: three significant digits but at most two
    decimals, rounded half up, no trailing zeros (31.40625 → "31.4", 0.46875 → "0.47",
    30.0 → "30")."""
    d = Decimal(repr(x))
    step = Decimal(1).scaleb(max(d.adjusted() - 2, -2))
    return f"{d.quantize(step, rounding=ROUND_HALF_UP).normalize():f}"
