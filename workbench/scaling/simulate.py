"""Predict how a data-parallel job scales, from four numbers: parameters, compute time per
step, network bandwidth and latency.

One synchronous data-parallel step (Horovod or DDP) is

    step time = compute time + communication time − the part of communication hidden
                behind the backward pass

* compute time  forward + backward + optimizer for one worker's batch, in seconds;
* communication the allreduce of the gradients, n = parameters × bytes per parameter, with
  the α–β cost of :mod:`workbench.scaling.costmodel` (ring, Rabenseifner's halving and
  doubling, or parameter servers: one, or k shards, on their own machines or co-located
  with the workers);
* overlap F     the fraction of communication that runs while backward is still computing.
  Horovod and DDP start allreducing a layer's gradient as soon as backward has produced it
  (Sergeev & Del Balso 2018; Li et al., VLDB 2020). The hidden part can never exceed the
  backward pass itself, about 2/3 of compute (backward costs about twice the forward).

Weak scaling (the default, and how Horovod's benchmark measured) keeps the batch per worker
fixed, so p workers process p batches per step: speedup = p · t₁ / t_p. Strong scaling keeps
the global batch fixed, so each worker's compute time shrinks as 1/p: speedup = t₁ / t_p.
Either way speedup is the throughput ratio and efficiency = speedup / p.

Oversubscription (more ranks than cores, as on a 2-core laptop running 3 ranks): the
workbench binds each rank to a core, wrapping round, so the busiest core runs ⌈ranks/cores⌉
ranks one after another, and a synchronous step waits for that core: compute takes
⌈ranks/cores⌉ times longer (2 for 3 ranks on 2 cores, not 1.5: the step is as slow as its
slowest core). Communication is not stretched: a rank waiting for a message leaves its core
to the other rank there.

Pure arithmetic: no torch, no numpy, no bokeh.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from workbench.scaling.costmodel import ServerLayout, algorithm_named, allreduce_time

#: Share of a step's compute time spent in the backward pass (backward ≈ 2 × forward).
BACKWARD_SHARE = 2.0 / 3.0


@dataclass(frozen=True)
class StepPrediction:
    """The simulator's prediction for one worker count (times in seconds)."""

    workers: int
    compute_time_s: float      # one worker's compute per step (after oversubscription)
    comm_time_s: float         # the full allreduce, as if nothing overlapped
    exposed_comm_s: float      # the part of comm_time_s that the step waits for
    step_time_s: float
    speedup: float
    efficiency: float

    def as_dict(self) -> dict:
        return asdict(self)


def hidden_comm_time(comm_time_s: float, compute_time_s: float, overlap: float) -> float:
    """Seconds of communication hidden behind backward: min(F · comm, backward time)."""
    if not 0.0 <= overlap <= 1.0:
        raise ValueError(f"overlap must be a fraction between 0 and 1, got {overlap}")
    return min(overlap * comm_time_s, BACKWARD_SHARE * compute_time_s)


def oversubscription(workers: int, cores: int | None) -> float:
    """How much longer a step computes when ``workers`` ranks are bound round-robin to
    ``cores`` cores: the number of ranks on the busiest core, ⌈workers / cores⌉ (≥ 1)."""
    return float(math.ceil(workers / cores)) if cores is not None and workers > cores else 1.0


def compute_time_per_rank(compute_time_s: float, workers: int, mode: str = "weak",
                          cores: int | None = None) -> float:
    """One rank's compute seconds per step for ``workers`` ranks.

    ``compute_time_s`` is the single-worker time per step. Strong scaling splits the global
    batch, dividing it by p; oversubscription (p > cores) multiplies it by ⌈p / cores⌉,
    the ranks on the busiest core, which take turns.
    """
    if mode not in ("weak", "strong"):
        raise ValueError(f"mode must be 'weak' or 'strong', got {mode!r}")
    t = compute_time_s / workers if mode == "strong" else compute_time_s
    return t * oversubscription(workers, cores)


def predict_step(workers: int, params: float, compute_time_s: float, bandwidth: float,
                 latency_s: float, algorithm: str = "ring", overlap: float = 0.0,
                 bytes_per_param: int = 4, mode: str = "weak",
                 cores: int | None = None, layout: ServerLayout | None = None
                 ) -> StepPrediction:
    """Predict one step for ``workers`` workers.

    ``bandwidth`` is per-link bytes/s (β = 1 / bandwidth), ``latency_s`` is α per message.
    ``layout`` places the parameter servers when ``algorithm`` is "ps".
    A single worker needs no communication, so its efficiency is exactly 1.
    """
    if workers < 1:
        raise ValueError(f"workers must be ≥ 1, got {workers}")
    algorithm = algorithm_named(algorithm)   # "tree" is still accepted for "rabenseifner"
    beta = 0.0 if bandwidth == float("inf") else 1.0 / bandwidth
    n_bytes = params * bytes_per_param
    compute = compute_time_per_rank(compute_time_s, workers, mode, cores)
    comm = (allreduce_time(algorithm, n_bytes, workers, latency_s, beta, layout=layout)
            if workers > 1 else 0.0)
    exposed = comm - hidden_comm_time(comm, compute, overlap)
    step = compute + exposed
    work_per_step = workers if mode == "weak" else 1.0   # in single-worker batches
    speedup = work_per_step * compute_time_s / step
    return StepPrediction(workers, compute, comm, exposed, step, speedup, speedup / workers)


def simulate(workers: Sequence[int], params: float, compute_time_s: float, bandwidth: float,
             latency_s: float, algorithm: str = "ring", overlap: float = 0.0,
             bytes_per_param: int = 4, mode: str = "weak",
             cores: int | None = None, layout: ServerLayout | None = None) -> list[dict]:
    """One prediction row per worker count (see :func:`predict_step` for the arguments).

    Rows carry ``workers, compute_time_s, comm_time_s, exposed_comm_s, step_time_s,
    speedup, efficiency``.
    """
    return [
        predict_step(p, params, compute_time_s, bandwidth, latency_s, algorithm, overlap,
                     bytes_per_param, mode, cores, layout).as_dict()
        for p in workers
    ]


# --- presets for published setups ---------------------------------------------------------

@dataclass(frozen=True)
class Network:
    """A link: bandwidth in bytes/s per worker, latency α in seconds per message."""

    name: str
    bandwidth: float
    latency_s: float
    note: str


@dataclass(frozen=True)
class Workload:
    """A model: parameters, compute seconds per step on one accelerator, bytes per gradient,
    and its largest tensor (parameters): the smallest shard a server holding whole tensors
    can be given."""

    name: str
    params: float
    compute_time_s: float
    batch_per_worker: int
    bytes_per_param: int
    note: str
    largest_tensor: float = 0.0

    @property
    def largest_share(self) -> float:
        """The largest tensor's share of the parameters."""
        return self.largest_tensor / self.params


@dataclass(frozen=True)
class Preset:
    """A published setup to reproduce, and the efficiency its authors reported (if any)."""

    name: str
    workload: Workload
    network: Network
    workers: int
    algorithm: str
    overlap: float
    published_efficiency: float | None
    source: str
    layout: ServerLayout | None = None

    def predict(self, workers: int | None = None, overlap: float | None = None) -> StepPrediction:
        """The simulator's prediction for this setup (optionally at another size or overlap)."""
        w = self.workload
        return predict_step(workers or self.workers, w.params, w.compute_time_s,
                            self.network.bandwidth, self.network.latency_s, self.algorithm,
                            self.overlap if overlap is None else overlap, w.bytes_per_param,
                            layout=self.layout)


NETWORKS = {
    "25gbe": Network(
        "25 Gbit/s RoCE", 25e9 / 8, 5e-6,
        "Horovod's 512-GPU benchmark network. 4 GPUs share one NIC per server, but a ring "
        "ordered server by server crosses each NIC once per direction, so every inter-server "
        "hop carries the same 2(p−1)/p·n bytes as one worker's link: a flat ring of p workers "
        "at 25 Gbit/s each models it. 5 µs is a typical RoCE message latency.",
    ),
    "ib100": Network(
        "100 Gbit/s InfiniBand (EDR)", 100e9 / 8, 2e-6,
        "EDR InfiniBand: 100 Gbit/s line rate, about 1–2 µs hardware latency; we take 2 µs "
        "per message to include software overhead.",
    ),
    "nvlink": Network(
        "NVLink 2 (DGX-1, V100)", 130e9, 2e-6,
        "Six NVLink 2 links of 25 GB/s per direction give each V100 150 GB/s; NCCL's "
        "allreduce bus bandwidth inside a DGX-1 reaches roughly 130 GB/s, which we use "
        "as the per-worker link. Latency 2 µs per hop is an order of magnitude only.",
    ),
}

WORKLOADS = {
    "resnet101": Workload(
        "ResNet-101", 44.5e6, 0.62, 64, 4,
        "44.5M parameters (He et al. 2016). 0.62 s per batch of 64 on a Pascal P100: "
        "Horovod's benchmark page prints 1656.82 images/s for 16 GPUs at batch 64, i.e. "
        "103.6 images/s = 0.62 s per batch per GPU. Largest tensor: a 3×3 convolution "
        "of 512 to 512 channels, 2.36M parameters.",
        largest_tensor=2.36e6,
    ),
    "inception3": Workload(
        "Inception V3", 23.8e6, 0.45, 64, 4,
        "23.8M parameters (Szegedy et al. 2016). About 5.7 GFLOPs per image against "
        "ResNet-101's 7.8, so 0.62 s × 5.7/7.8 ≈ 0.45 s per batch of 64 on the same GPU "
        "(TensorFlow's 2017 P100 benchmark table gives a similar ~140 images/s). Largest "
        "tensor: the 2048 × 1001 classifier, 2.05M parameters.",
        largest_tensor=2.05e6,
    ),
    "vgg16": Workload(
        "VGG-16", 138e6, 0.42, 64, 4,
        "138M parameters (Simonyan & Zisserman 2015), 124M of them in the fully connected "
        "layers. VGG-16 has twice ResNet-101's FLOPs but its large dense convolutions run "
        "near the GPU's peak: TensorFlow's 2017 P100 benchmark table lists about 150 "
        "images/s, i.e. ≈ 0.42 s per batch of 64. Few FLOPs per parameter make it "
        "communication-bound. Largest tensor: fc6, 25088 × 4096 = 102.8M parameters.",
        largest_tensor=102.8e6,
    ),
    "bert-large": Workload(
        "BERT-large", 340e6, 0.19, 32, 2,
        "340M parameters (Devlin et al. 2019). Batch of 32 sequences × 128 tokens: "
        "6 × 340M × 4096 tokens ≈ 8.4 TFLOP per step; a V100 in mixed precision sustains "
        "about 45 TFLOP/s on it, ≈ 0.19 s. Gradients are allreduced in fp16 (2 bytes), as "
        "NVIDIA's BERT recipe does. Largest tensor: the 30522 × 1024 word embeddings, "
        "31.3M parameters.",
        largest_tensor=31.3e6,
    ),
}

#: Overlap used by every preset: the one free knob, set so ResNet-101 lands at Horovod's 90%.
PRESET_OVERLAP = 0.4

_HOROVOD_BENCH = ("Horovod docs/benchmarks: 128 servers × 4 Pascal GPUs, 25 Gbit/s RoCE; "
                  "Sergeev & Del Balso 2018, arXiv:1802.05799")

_HOROVOD_PAPER = ("Sergeev & Del Balso 2018, arXiv:1802.05799: at 128 GPUs Horovod kept "
                  "about 88% scaling efficiency on Inception V3 and ResNet-101, standard "
                  "distributed TensorFlow (parameter servers) about half")


def tensorflow_ps(workload: Workload, workers: int, gpus_per_server: int = 4) -> ServerLayout:
    """TensorFlow's parameter servers as its benchmarks deployed them: one server process on
    each machine (co-located with its workers), variables placed whole, so the busiest
    server holds at least the largest tensor; weights pulled at the start of a step,
    gradients pushed at its end (two phases)."""
    return ServerLayout(servers=workers // gpus_per_server, colocated=True, pipelined=False,
                        busiest_share=workload.largest_share)


PRESETS = {
    "resnet101-25gbe": Preset("resnet101-25gbe", WORKLOADS["resnet101"], NETWORKS["25gbe"],
                              512, "ring", PRESET_OVERLAP, 0.90, _HOROVOD_BENCH),
    "inception3-25gbe": Preset("inception3-25gbe", WORKLOADS["inception3"], NETWORKS["25gbe"],
                               512, "ring", PRESET_OVERLAP, 0.90, _HOROVOD_BENCH),
    "vgg16-25gbe": Preset("vgg16-25gbe", WORKLOADS["vgg16"], NETWORKS["25gbe"],
                          512, "ring", PRESET_OVERLAP, 0.68, _HOROVOD_BENCH),
    "vgg16-25gbe-ps": Preset("vgg16-25gbe-ps", WORKLOADS["vgg16"], NETWORKS["25gbe"],
                             512, "ps", PRESET_OVERLAP, None,
                             "what-if: the same VGG-16 job with one parameter server"),
    "inception3-25gbe-128": Preset("inception3-25gbe-128", WORKLOADS["inception3"],
                                   NETWORKS["25gbe"], 128, "ring", PRESET_OVERLAP, 0.88,
                                   _HOROVOD_PAPER),
    "inception3-25gbe-tfps": Preset("inception3-25gbe-tfps", WORKLOADS["inception3"],
                                    NETWORKS["25gbe"], 128, "ps", PRESET_OVERLAP, 0.50,
                                    _HOROVOD_PAPER,
                                    tensorflow_ps(WORKLOADS["inception3"], 128)),
    "resnet101-25gbe-128": Preset("resnet101-25gbe-128", WORKLOADS["resnet101"],
                                  NETWORKS["25gbe"], 128, "ring", PRESET_OVERLAP, 0.88,
                                  _HOROVOD_PAPER),
    "resnet101-25gbe-tfps": Preset("resnet101-25gbe-tfps", WORKLOADS["resnet101"],
                                   NETWORKS["25gbe"], 128, "ps", PRESET_OVERLAP, 0.50,
                                   _HOROVOD_PAPER,
                                   tensorflow_ps(WORKLOADS["resnet101"], 128)),
    "bert-large-ib100": Preset("bert-large-ib100", WORKLOADS["bert-large"], NETWORKS["ib100"],
                               64, "ring", PRESET_OVERLAP, None,
                               "what-if: 64 V100s over 100 Gbit/s InfiniBand"),
    "bert-large-nvlink": Preset("bert-large-nvlink", WORKLOADS["bert-large"],
                                NETWORKS["nvlink"], 8, "ring", PRESET_OVERLAP, None,
                                "what-if: one DGX-1, 8 V100s over NVLink"),
}
