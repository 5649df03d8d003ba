"""What tensor parallelism sends, and why it wants a fast bus.

Bytes (Shoeybi et al. 2019, Section 3): a Megatron MLP block all-reduces its (tokens × h)
activation twice per training step, once forward (g) and once backward (f), so

    bytes per block per step = 2 · tokens · h · bytes per value
    bytes per step           = layers · that

(a transformer layer has two such blocks, attention and MLP: four all-reduces). Unlike data
parallelism, which all-reduces the *gradients* once per step whatever the batch, these
bytes grow with the batch (tokens), and every one sits on the critical path: the next layer
needs this one's all-reduced output before it can start.

Time: each all-reduce is a ring, 2(p−1)·α + 2·(p−1)/p·n·β (costmodel.py). The block's
compute is 3 × 2 × tokens × 8h² floating-point operations (two h × 4h matrix products,
forward and twice that backward), split over p ranks. Their ratio,

    communication / compute ≈ (2·2(p−1)/p · tokens · h · bytes / bandwidth)
                              / (48 · tokens · h² / (p · flop/s))
                            = (p − 1) · bytes · flop/s / (12 · h · bandwidth),

does not depend on the batch: a faster accelerator or more ranks make it worse, a wider
layer better, and the link's bandwidth decides. Hence Megatron keeps tensor parallelism
inside one server, on NVLink, and uses data (and pipeline) parallelism between servers.
"""

from __future__ import annotations

from workbench.scaling.costmodel import ring_allreduce_time
from workbench.scaling.simulate import NETWORKS

#: NVIDIA V100's peak half-precision tensor-core throughput, 125 Tflop/s (V100 datasheet),
#: the accelerator of Megatron-LM's paper. Real layers reach a fraction of it.
V100_FLOPS = 125e12


def activation_bytes(tokens: int, hidden: int, bytes_per_value: int = 4) -> int:
    """Bytes of one all-reduced activation: tokens × h values."""
    return tokens * hidden * bytes_per_value


def block_bytes_per_step(tokens: int, hidden: int, bytes_per_value: int = 4) -> int:
    """Bytes a Megatron MLP block all-reduces in one step: forward (g) plus backward (f)."""
    return 2 * activation_bytes(tokens, hidden, bytes_per_value)


def step_bytes(layers: int, tokens: int, hidden: int, bytes_per_value: int = 4) -> int:
    """Bytes all-reduced per training step by `layers` MLP blocks."""
    return layers * block_bytes_per_step(tokens, hidden, bytes_per_value)


def block_flops(tokens: int, hidden: int, expansion: int = 4) -> float:
    """Floating-point operations of one MLP block's forward + backward (3 × the forward)."""
    return 3 * 2 * 2 * tokens * hidden * expansion * hidden


def block_times(tokens: int, hidden: int, ranks: int, network: str,
                flops_per_s: float = V100_FLOPS, bytes_per_value: int = 2) -> dict[str, float]:
    """Seconds per MLP block per step on `ranks` tensor-parallel accelerators over `network`
    (a key of the simulator's NETWORKS): compute, communication and their ratio."""
    link = NETWORKS[network]
    one = ring_allreduce_time(activation_bytes(tokens, hidden, bytes_per_value), ranks,
                              link.latency_s, 1.0 / link.bandwidth)
    compute = block_flops(tokens, hidden) / (ranks * flops_per_s)
    return {"compute_s": compute, "comm_s": 2 * one, "comm_over_compute": 2 * one / compute}


def bus_table(tokens: int = 2048, hidden: int = 4096, ranks: int = 8) -> list[dict]:
    """One MLP block at Megatron's scale on NVLink and on 25 Gbit/s Ethernet, side by side."""
    return [{"network": NETWORKS[name].name, **block_times(tokens, hidden, ranks, name)}
            for name in ("nvlink", "25gbe")]
