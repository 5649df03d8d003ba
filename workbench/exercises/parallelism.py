"""Exercise: choose data or model parallelism from memory and bandwidth numbers.

Plain data parallelism (Horovod, DDP) keeps a whole replica of the model on every device
and averages the gradients with an allreduce each step; model parallelism cuts the model
into parts on different devices and sends activations (forward) and their gradients
(backward) across the cuts. *Sharded* data parallelism, ZeRO stage 3 (Rajbhandari et al.,
"ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", SC 2020) and
PyTorch FSDP (Zhao et al., VLDB 2023), is still data parallel but keeps only 1/p of the
training state on each of p devices, gathering each layer's weights just before use, for
about 1.5 times the plain allreduce's traffic. The course's decision rule, in order:

1. **Memory.** A replica needs its training state (weights, gradients and optimizer state:
   16 bytes per parameter for fp32 with Adam) plus its activations. If that does not fit in
   one device's memory, plain data parallelism is impossible: choose model parallelism, or
   sharded data parallelism if 1/p of the training state plus the activations fits (both
   are right then; large systems often combine them).
2. **Communication.** If it fits, data parallelism is simpler and usually scales better, so
   choose it unless it is communication-bound: its ring allreduce of the fp32 gradients
   (Patarasuk & Yuan 2009: 2·(p − 1)/p · n bytes per worker) takes longer than the compute
   of one step.
3. When it is communication-bound, choose model parallelism only if it sends less: twice the
   activation bytes that cross a cut (forward and backward) against the gradient allreduce.

Bandwidths are quoted in Gbit/s, as network vendors do: 1 Gbit/s = 0.125 GB/s. Sizes use
decimal prefixes: 1 GB = 10⁹ bytes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from workbench.exercises.feedback import Feedback, call_student, correct, guarded, not_yet
from workbench.exercises.own_work import refusing


@dataclass(frozen=True)
class Scenario:
    """One training job to place on a cluster. Units in the field names."""

    name: str
    params: float                  # number of model parameters
    state_bytes_per_param: float   # weights + gradients + optimizer state, bytes per parameter
    activations_gb: float          # activation memory per device for the chosen batch, GB
    device_memory_gb: float        # memory of one device, GB
    workers: int                   # devices available, p
    link_gbit_s: float             # network bandwidth per device, Gbit/s (bits, not bytes)
    compute_s: float               # compute time of one training step, seconds
    cut_activations_mb: float      # activation bytes crossing a model-parallel cut per step, MB


SCENARIOS = (
    Scenario("ResNet-50 on 8 GPUs", 25.6e6, 16, 6.0, 16.0, 8, 100.0, 0.25, 50.0),
    Scenario("7-billion-parameter language model", 7e9, 16, 30.0, 80.0, 8, 200.0, 2.0, 64.0),
    Scenario("70-billion-parameter model, long context", 70e9, 16, 60.0, 80.0, 8, 400.0, 8.0,
             512.0),
    Scenario("wide MLP on slow Ethernet", 100e6, 16, 1.0, 16.0, 4, 10.0, 0.10, 8.0),
    Scenario("3-billion-parameter model, 24 GB cards", 3e9, 16, 4.0, 24.0, 4, 100.0, 1.0, 16.0),
    Scenario("long-sequence transformer", 500e6, 16, 20.0, 24.0, 4, 100.0, 0.8, 32.0),
    Scenario("CNN with large feature maps on slow Ethernet", 20e6, 16, 8.0, 16.0, 4, 10.0,
             0.05, 200.0),
    # Two scenarios with tight margins, so that a slip in either cost model changes the
    # choice: the allreduce is 1.50 s against 1 s of compute (0.86 s without the ring's
    # 2(p − 1)/p factor), and the cut sends 1.0 s or 2.0 s (half that if counted once).
    Scenario("270M-parameter transformer on 10 Gbit/s", 268e6, 16, 6.0, 16.0, 8, 10.0, 1.0,
             625.0),
    Scenario("270M-parameter transformer, long sequences", 268e6, 16, 6.0, 16.0, 8, 10.0, 1.0,
             1250.0),
    # Three where a field read as a constant changes the choice: 2 workers (the ring sends
    # n, not 1.5n or 2n: data), 16 workers (1.875n, not 1.75n: model), and 12 bytes a
    # parameter (SGD with momentum in fp32: weights, gradients, momentum; 16 would not fit).
    Scenario("100M-parameter model, 2 workers on 25 Gbit/s", 100e6, 16, 2.0, 16.0, 2, 25.0,
             0.14, 40.0),
    Scenario("1B-parameter model, 16 workers on 100 Gbit/s", 1e9, 16, 4.0, 24.0, 16, 100.0,
             0.576, 100.0),
    Scenario("1.5B-parameter model trained with SGD and momentum", 1.5e9, 12, 4.0, 24.0, 4,
             100.0, 1.0, 16.0),
)


def unseen_scenarios() -> tuple[Scenario, Scenario]:
    """Two scenarios drawn anew at each check, one where only data parallelism is right and
    one where only model parallelism is (so no fixed answer passes both), each far from
    every threshold of the rule (the quantities it compares differ by 20% at least), so
    that any right arithmetic decides it the same way."""
    from workbench.exercises import references as ref

    rng = random.Random()
    found: dict[frozenset[str], Scenario] = {}
    while len(found) < 2:
        s = Scenario(f"a job drawn for this check ({rng.randrange(10**4):04d})",
                     round(10 ** rng.uniform(7, 10.5), -5), rng.choice((12, 16, 18)),
                     round(rng.uniform(0.5, 40), 1), rng.choice((16.0, 24.0, 40.0, 80.0)),
                     rng.choice((2, 3, 4, 8, 16)), rng.choice((10.0, 25.0, 100.0, 200.0, 400.0)),
                     round(rng.uniform(0.05, 4.0), 2), round(rng.uniform(4, 1500)))
        pairs = ((ref.memory_needed_gb(s), s.device_memory_gb),
                 (ref.sharded_memory_gb(s), s.device_memory_gb),
                 (ref.allreduce_s(s), s.compute_s),
                 (ref.model_parallel_s(s), ref.allreduce_s(s)))
        kind = ref.choices(s)
        if kind in ({"data"}, {"model"}) and all(max(a, b) > 1.2 * min(a, b) for a, b in pairs):
            found.setdefault(kind, s)
    return found[frozenset({"data"})], found[frozenset({"model"})]


def describe(s: Scenario) -> str:
    """The scenario's numbers as a short paragraph for the notebook."""
    return (f"{s.name}: {s.params:.3g} parameters at {s.state_bytes_per_param:g} bytes each "
            f"of training state, {s.activations_gb:g} GB of activations, devices with "
            f"{s.device_memory_gb:g} GB; {s.workers} workers on {s.link_gbit_s:g} Gbit/s links; "
            f"{s.compute_s:g} s of compute per step; {s.cut_activations_mb:g} MB of activations "
            "per cut per step.")


@guarded
@refusing("workbench.exercises.references:choice", "workbench.exercises.references:choices",
          "workbench.exercises.parallelism:numbers_table")
def check_parallelism_choice(fn) -> Feedback:
    """Check `fn(scenario) -> 'data', 'model' or 'sharded'` on every scenario, and on one
    drawn at each check."""
    from workbench.exercises.references import choices

    for s in (*SCENARIOS, *unseen_scenarios()):
        out, crash = call_student(fn, s)
        if crash:
            return crash
        choice = _normalise(out)
        if choice is None:
            return not_yet(f"for '{s.name}' your function returned {_short(out)}.",
                           "Return one choice, the string 'data' or 'model' ('sharded' for "
                           "sharded data parallelism, ZeRO-3 or FSDP).")
        if choice not in choices(s):
            return not_yet(f"for '{s.name}' you chose {choice} parallelism.", *_hints(s, choice))
    return correct(
        f"all {len(SCENARIOS) + 2} choices are right. Memory decides first (a replica must fit; "
        "where only 1/p of it does, sharded data parallelism or model parallelism), then "
        "communication: the gradient allreduce against the compute time and against the "
        "activations model parallelism would send."
    )


def _short(out: object) -> str:
    text = repr(out) if isinstance(out, str | int | float | type(None)) else type(out).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _normalise(out: object) -> str | None:
    """'data', 'model' or 'sharded' from the answer's first words; None for anything else,
    and for a hedge ("model or data", "data/model") that names two."""
    text = out.strip().lower() if isinstance(out, str) else ""
    if any(mark in text for mark in (" or ", "/", ",", "|", " and ")):
        return None
    for kind, words in (("data", ("data", "plain")), ("model", ("model", "pipeline", "tensor")),
                        ("sharded", ("sharded", "fsdp", "zero"))):
        if text.startswith(words):
            return kind
    return None


def _hints(s: Scenario, choice: str) -> list[str]:
    """Explain the scenario's deciding numbers, and the likely slip behind a wrong choice."""
    from workbench.exercises.references import (
        GRADIENT_BYTES_PER_PARAM,
        allreduce_s,
        memory_needed_gb,
        model_parallel_s,
        sharded_memory_gb,
    )

    need, have = memory_needed_gb(s), s.device_memory_gb
    state = s.params * s.state_bytes_per_param / 1e9
    ar, mp, comp = allreduce_s(s), model_parallel_s(s), s.compute_s
    if choice == "sharded" and need > have:  # not even a shard fits
        return [f"Memory: sharded over {s.workers} devices, each still needs "
                f"{sharded_memory_gb(s):.3g} GB (1/p of {state:.3g} GB of training state plus "
                f"its own {s.activations_gb:g} GB of activations), more than its {have:g} GB. "
                "Cut the model itself."]
    if choice == "sharded":
        return [f"A whole replica fits ({need:.3g} GB of {have:g} GB): plain data parallelism "
                "does the same work with less traffic (sharding gathers the weights again in "
                "every step, about 1.5 times the allreduce's bytes). Choose the simpler one."]
    if need > have:  # the answer was 'data' for a replica that does not fit
        hints = [f"Memory: a replica needs {state:.3g} GB of training state + "
                 f"{s.activations_gb:g} GB of activations = {need:.3g} GB, but a device has "
                 f"{have:g} GB. Plain data parallelism puts a whole replica on every device."]
        if sharded_memory_gb(s) <= have:
            hints.append(f"Sharded data parallelism (ZeRO-3, FSDP) would fit: 1/p of the state "
                         f"plus the activations is {sharded_memory_gb(s):.3g} GB. Answer "
                         "'sharded' (or 'model') here.")
        if state <= have < need:
            hints.append("Activations count too: they are kept from the forward pass for the "
                         "backward pass.")
        if s.params * GRADIENT_BYTES_PER_PARAM / 1e9 + s.activations_gb <= have:
            hints.append("The weights alone would fit, but training also stores gradients and "
                         "optimizer state: 16 bytes per parameter with Adam in fp32, not 4.")
        return hints
    fits = f"A replica fits ({need:.3g} GB of {have:g} GB)."
    if choice == "model" and ar <= comp:
        return [f"{fits} The allreduce takes {ar:.3g} s, less than the {comp:g} s of compute, so "
                "data parallelism is not communication-bound: it is the simpler choice."]
    if choice == "model":
        hints = [f"{fits} The job is communication-bound (allreduce {ar:.3g} s > compute "
                 f"{comp:g} s), but model parallelism would send {mp:.3g} s of activations and "
                 "their gradients, even more. Compare both before switching."]
        if mp / 2 < ar:
            hints.append("Activations cross each cut twice per step: forward, and their "
                         f"gradients backward. Counted once they would take {mp / 2:.3g} s.")
        return hints
    hints = [f"{fits} But the gradient allreduce takes {ar:.3g} s, more than the {comp:g} s of "
             f"compute, while model parallelism would send only {mp:.3g} s of activations."]
    if allreduce_s(s, bytes_per_s=s.link_gbit_s * 1e9) <= comp:
        hints.append(f"Bits are not bytes: {s.link_gbit_s:g} Gbit/s is "
                     f"{s.link_gbit_s / 8:g} GB/s. Divide by 8 before dividing bytes by it.")
    if _ring_factor(s) * ar <= comp:
        hints.append(f"The ring sends 2(p − 1)/p × n bytes per worker, {1 / _ring_factor(s):.3g}"
                     f" times the gradient's n bytes for p = {s.workers}, not n once: "
                     "reduce-scatter, then allgather.")
    return hints


def _ring_factor(s: Scenario) -> float:
    """n ÷ the bytes a ring allreduce sends per worker: p / (2(p − 1))."""
    return s.workers / (2 * (s.workers - 1))


def numbers_table() -> str:
    """Every scenario's deciding numbers, as aligned text: the choice is the reader's."""
    from workbench.exercises.references import allreduce_s, memory_needed_gb, model_parallel_s

    head = f"{'scenario':<46}{'needs GB':>9}{'has GB':>8}{'allreduce s':>12}" \
           f"{'compute s':>10}{'cuts s':>8}"
    rows = [head, "-" * len(head)]
    for s in SCENARIOS:
        rows.append(f"{s.name:<46}{memory_needed_gb(s):>9.3g}{s.device_memory_gb:>8g}"
                    f"{allreduce_s(s):>12.3g}{s.compute_s:>10g}{model_parallel_s(s):>8.3g}")
    return "\n".join(rows)
