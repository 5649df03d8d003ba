"""Exercise: write the ZeRO-1 optimizer step (shard, step, all-gather), checked on real ranks.

The student writes two functions:

- `make_shard_optimizer(flat_params, rank, world, lr)` returns `(shard, optimizer)`: a
  Parameter that *is* this rank's slice of the flat parameter buffer, and SGD with momentum
  0.9 and learning rate `lr` over it alone, so the rank keeps momentum for 1/world of the
  model;
- `zero1_step(flat_params, flat_grad, shard, optimizer, rank, world)`: average the
  gradients over the ranks, step the slice, all-gather every rank's updated slice.

`check_zero1(make, step)` runs them on 2 and then 3 real ranks (torchrun, gloo; on warm
ranks when `workbench.ranks` runs with that many), with a different learning rate each
time, for two epochs of batch 8 per rank. The model has 161 parameters, which neither 2 nor
3 divides: the buffer is padded, as workbench/sharded/flat.py pads it. It requires
(Rajbhandari et al. 2020, stage P_os): the ranks end with the parameters of one process with
batch 8·world and SGD with momentum at that learning rate (what DDP gives, computed here in
one process, independently of any ZeRO code), and every rank's optimizer state holds
momentum for its own slice only. Each rank is watched by the checker's own instruments
(zero_rank.py): the collectives it started, in order with the optimizer's steps; what each
optimizer stepped, with which gradient; its settings; and whether the package's own ZeRO
ran. A wrong answer is named:

| what the checker sees | the mistake |
| --- | --- |
| other ranks' slices never changed | the all-gather is missing |
| the all-gather came before the optimizer's step | the slices gathered are stale |
| right parameters, momentum for the whole model on a rank | a rank steps everything |
| ranks agree, steps `world` times too large | gradients summed, not averaged |
| right at 2 ranks, 3/2 too large at 3 | divided by 2, not by the world size |
| the optimizer's lr or momentum is not the one asked | a constant where `lr` belongs |
| no all-reduce or reduce-scatter | nothing averaged the gradients |
| ranks start different collectives | a collective inside `if rank == 0` |
| an optimizer stepped what is not its slice of the average | one rank does everything |
| nothing sent after the optimizer's step | every rank updates every slice itself |
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from workbench.exercises.data_parallel import make_model
from workbench.exercises.feedback import (
    Feedback,
    call_student,
    correct,
    guarded,
    is_blank,
    not_written,
    not_yet,
    on_real_ranks,
    refuse_before_ranks,
)
from workbench.exercises.own_work import HINT as OWN_WORK_HINT
from workbench.exercises.own_work import refusing
from workbench.exercises.zero_rank import (
    BATCH,
    MOMENTUM,
    PACKAGE_ANSWERS,
    SEED,
    flatten,
    global_batches,
    run_on_rank,
)

PLAIN = {"momentum": MOMENTUM, "nesterov": False, "dampening": 0, "weight_decay": 0}
#: The world sizes the step is checked at, each with its own learning rate.
RUNS = ((2, 0.05), (3, 0.03))
ATOL = 1e-5
#: What the checker's network calls each kind of collective (ProcessGroup's method names).
_GATHERS = ("allgather", "all_gather", "broadcast", "send", "recv")
_REDUCES = ("allreduce", "reduce_scatter", "reduce")


def reference(world: int, lr: float, momentum: float = MOMENTUM) -> torch.Tensor:
    """One process with batch world × BATCH, plain torch SGD with momentum: the flat
    parameters DDP would end with."""
    model = make_model(SEED)
    flat = flatten(model, world)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    for xb, yb in global_batches(world):
        optimizer.zero_grad()
        F.mse_loss(model(xb), yb).backward()
        optimizer.step()
    return flat.clone()


@guarded
def check_zero1(make: Callable[..., Any], step: Callable[..., Any], *,
                runs_dir: str = "runs", timeout_s: float = 180.0) -> Feedback:
    """Run the student's `make_shard_optimizer` and `zero1_step` on 2, then 3 real ranks."""
    flat = torch.zeros(4)
    refused = (refuse_before_ranks(make, "make_shard_optimizer(flat_params, rank, world, lr)",
                                   flat, 0, 2, 0.1)
               or refuse_before_ranks(step, "zero1_step(flat_params, flat_grad, shard, "
                                      "optimizer, rank, world)", flat, flat, flat, None, 0, 2))
    if refused:
        return refused
    verdicts = []
    for world, lr in RUNS:
        results = on_real_ranks(run_on_rank, make, step, lr, np=world, name="check-zero1",
                                runs_dir=runs_dir, timeout_s=timeout_s, hang_hint=(
                                    "Every rank must call the same collectives in the same "
                                    "order: no all_reduce or all-gather inside `if rank == 0`."))
        verdict = results if isinstance(results, Feedback) else judge(results, lr)
        if not verdict.passed:
            return verdict
        verdicts.append(verdict)
    return correct(" ".join(v.message for v in verdicts))


@guarded
@refusing(*PACKAGE_ANSWERS)
def check_shard_optimizer(make: Callable[..., Any]) -> Feedback:
    """Check `make_shard_optimizer` in this process (no ranks): for every rank of 2 and of
    3, its shard must be that rank's slice of the buffer, in the same memory, and its
    optimizer must step that shard alone, with momentum 0.9 and the learning rate given."""
    if is_blank(make):
        return not_written()
    for world, numel, lr in ((3, 12, 0.07), (2, 10, 0.02)):
        for rank in range(world):
            flat = torch.arange(numel, dtype=torch.float32)
            out, crash = call_student(make, flat, rank, world, lr)
            if crash:
                return crash
            problem = _shard_problem(out, flat, rank, world, lr)
            if problem:
                return problem
    return correct("each rank's shard is its slice of the buffer, and its optimizer steps "
                   "that slice alone, at the learning rate it was given.")


def _shard_problem(out: Any, flat: torch.Tensor, rank: int, world: int, lr: float,
                   ) -> Feedback | None:
    if not (isinstance(out, tuple) and len(out) == 2):
        return not_yet("return a pair: (shard, optimizer).",
                       "The function returns two things: the shard, then its optimizer.")
    shard, optimizer = out
    numel = flat.numel()
    lo, hi = rank * numel // world, (rank + 1) * numel // world
    where = f"with world = {world}, rank {rank}"
    if not isinstance(shard, torch.Tensor) or shard.numel() != hi - lo:
        return not_yet(f"{where}: the shard should hold {hi - lo} of the {numel} elements.",
                       "Each of the world ranks owns numel / world consecutive elements, "
                       "rank r the r-th such block.")
    if shard.data_ptr() != flat[lo:].data_ptr():
        return not_yet(f"{where}: the shard is not elements [{lo}, {hi}) of the buffer "
                       "itself (a copy, or another slice).",
                       "A Parameter made from a slice of the buffer shares the buffer's "
                       "memory; .clone() would not.")
    groups = getattr(optimizer, "param_groups", None)
    stepped = [p for group in groups or [] for p in group["params"]]
    if len(stepped) != 1 or stepped[0] is not shard:
        return not_yet(f"{where}: the optimizer must step the shard and nothing else.",
                       "Give the optimizer a list holding the shard alone.")
    wrong = _settings_wrong(groups[0], lr)
    if wrong:
        return not_yet(f"{where}: the optimizer {wrong}.", _settings_hint(wrong))
    return None


def judge(results: list[dict[str, Any]], lr: float) -> Feedback:
    """The verdict on one world size from what each rank measured."""
    world = len(results)
    for r, result in enumerate(results):
        if "error" in result:
            return not_yet(f"with {world} ranks, rank {r}: {result['error']}",
                           *_hints_for(result["error"]))
    for result in results:
        if result["used"]:
            return not_yet(f"your functions call {', '.join(result['used'])}: the package's "
                           "own ZeRO, which this exercise asks you to write.", OWN_WORK_HINT)
    setting = _setting_problem(results, lr)
    if setting:
        return setting
    got = [r["params"] for r in results]
    if not all(torch.allclose(got[0], g, atol=ATOL) for g in got[1:]):
        return _ranks_disagree(results)
    return _against_reference(results, lr) or _memory(results, lr)


def _setting_problem(results: list[dict[str, Any]], lr: float) -> Feedback | None:
    """The optimizer's own learning rate or other settings, where the exercise gives them."""
    for r, result in enumerate(results):
        for group in result["groups"]:
            wrong = _settings_wrong(group, lr)
            if wrong:
                return not_yet(f"with {len(results)} ranks, rank {r}'s optimizer {wrong}.",
                               _settings_hint(wrong))
    return None


def _settings_wrong(group: dict[str, Any], lr: float) -> str | None:
    """What in an optimizer's param group differs from the exercise's SGD, or None."""
    if group.get("lr") != lr:
        return (f"used lr = {group.get('lr')}, but make_shard_optimizer was given "
                f"lr = {lr}")
    for key, value in PLAIN.items():
        if group.get(key) != value:
            return (f"has {key} = {group.get(key)}: the exercise's optimizer is SGD with "
                    f"momentum {MOMENTUM} (the state ZeRO-1 shards) and nothing else")
    return None


def _settings_hint(wrong: str) -> str:
    """The hint for what _settings_wrong found: the learning rate, or another setting."""
    if wrong.startswith("used lr"):
        return "Use the lr argument: the checker passes a different one each time."
    return f"SGD with momentum {MOMENTUM}, no Nesterov, dampening or weight decay."


def _ranks_disagree(results: list[dict[str, Any]]) -> Feedback:
    world = len(results)
    size = results[0]["params"].numel() // world
    others_unchanged = all(
        torch.equal(r["params"][s * size:(s + 1) * size], r["initial"][s * size:(s + 1) * size])
        for rank, r in enumerate(results) for s in range(world) if s != rank)
    calls = results[0]["first_call"]
    if others_unchanged and not any(_is(c, _GATHERS) for c in calls):
        return not_yet(f"with {world} ranks each rank updated its own slice, but the other "
                       "slices never reached it: the all-gather is missing.",
                       "End the step by sending every rank's updated slice to every rank.")
    if _gathers_before_stepping(calls):
        return not_yet(f"with {world} ranks the ranks end with different parameters: in "
                       f"each step your calls came in the order {calls}, so the "
                       "all-gather sent the slices before the optimizer's step had updated "
                       "them.", "Step the shard first, then all-gather the updated slices.")
    return not_yet(f"with {world} ranks the ranks end with different parameters.",
                   "Average the gradients over the ranks (an all_reduce sums them: divide by "
                   "world) and all-gather the updated slices after the step.")


def _against_reference(results: list[dict[str, Any]], lr: float) -> Feedback | None:
    """The ranks agree; name why they do not agree with one process (None: they do)."""
    world = len(results)
    got = results[0]["params"]
    if torch.allclose(got, reference(world, lr), atol=ATOL):
        return None
    calls = results[0]["first_call"]
    if torch.equal(got, results[0]["initial"]):
        return not_yet(f"with {world} ranks the parameters never changed.",
                       "The optimizer must update the buffer itself: its shard has to share "
                       "the buffer's memory (no copy), and the all-gather must write into "
                       "flat_params.")
    if not any(_is(c, _REDUCES) for c in calls):
        return not_yet(f"with {world} ranks no all-reduce or reduce-scatter ran in a step "
                       f"(it called {calls}): each rank stepped with its own gradient, so "
                       "nothing averaged the gradients across ranks.",
                       "Average the gradients over the ranks before the optimizer steps.")
    if _steps_before_reducing(calls):
        return not_yet(f"with {world} ranks, in each step the optimizer stepped before the "
                       f"gradients were averaged (the order was {calls}).",
                       "Average the gradients first, then step, then all-gather.")
    for factor, name in ((world, f"summed over the {world} ranks, not averaged: steps "
                                 f"{world} times too large"),
                         (world / 2, "divided by 2, not by the world size: right with 2 ranks, "
                                     f"{world / 2:g} times too large with {world}"),
                         (1 / world, f"divided by the world size twice: steps {world} times "
                                     "too small")):
        if factor != 1 and torch.allclose(got, reference(world, lr * factor), atol=ATOL):
            return not_yet(f"with {world} ranks the ranks agree, but the gradients were "
                           f"{name}.", "An all_reduce sums: divide its result by world, the "
                           "number of ranks you were given, exactly once.")
    return not_yet(f"the ranks agree, but not with one process with batch {world * BATCH} "
                   "(what DDP would give).",
                   "Give the optimizer exactly this rank's slice, and set its .grad to the "
                   "same slice of the averaged gradients.")


def _memory(results: list[dict[str, Any]], lr: float) -> Feedback:
    """Every rank must keep momentum for its own slice only, and do its own slice's work."""
    world = len(results)
    numel = results[0]["params"].numel()
    whole, slice_bytes = 4 * numel, 4 * numel // world       # float32 momentum, in bytes
    for r, result in enumerate(results):
        held = result["state_bytes"]
        if held >= 0.99 * whole:
            return not_yet(f"with {world} ranks the parameters are right, but rank {r} keeps "
                           f"momentum for the whole model ({held} bytes): it steps "
                           "everything.", "Give each rank's optimizer only that rank's "
                           "slice, and its .grad the same slice of the gradients.")
        if abs(held - slice_bytes) > 0.05 * slice_bytes:
            return not_yet(f"with {world} ranks rank {r} keeps {held} bytes of optimizer "
                           f"state, not the {slice_bytes} of its 1/{world} slice.",
                           "Every rank steps one slice of numel / world elements: each keeps "
                           "the momentum of its own.")
    return _work(results) or correct(
        f"{world} ranks (lr {lr:g}) ended with DDP's parameters, each keeping momentum for "
        f"its slice only ({slice_bytes} of {whole} bytes), and each rank's optimizer stepped "
        "its slice with that slice of the averaged gradient.")


def _work(results: list[dict[str, Any]]) -> Feedback | None:
    """Right parameters and memory, but not from the ZeRO-1 step's work: name what the
    checker's instruments saw instead."""
    world = len(results)
    for r, result in enumerate(results):
        if result["wrong_steps"]:
            return not_yet(f"with {world} ranks the parameters are right, but rank {r}'s "
                           f"optimizer stepped {'; '.join(result['wrong_steps'])}: the "
                           "parameters did not come from its step.",
                           "Each rank's optimizer must update its own slice, in the flat "
                           "buffer, with that slice of the average of every rank's gradient.")
        if result["quiet_steps"]:
            return not_yet(f"with {world} ranks, rank {r} started no collective in "
                           f"{result['quiet_steps']} of its steps: nothing crossed ranks.",
                           "Every step averages the gradients over the ranks and sends the "
                           "updated slices to every rank.")
        calls = result["first_call"]
        if "step" in calls and not any(_is(c, _GATHERS + _REDUCES)
                                       for c in calls[calls.index("step") + 1:]):
            return not_yet(f"with {world} ranks the parameters are right, but nothing was "
                           f"sent after the optimizer's step (your calls: {calls}): every "
                           "rank updated every slice itself, which needs the whole model's "
                           "optimizer state on every rank.",
                           "Step only your slice, then send it to every rank.")
    return None


def _is(call: str, words: tuple[str, ...]) -> bool:
    return call != "step" and any(word in call for word in words)


def _gathers_before_stepping(calls: list[str]) -> bool:
    """An all-gather in the step, and none after the optimizer's step."""
    if "step" not in calls:
        return False
    after = calls[calls.index("step") + 1:]
    return any(_is(c, _GATHERS) for c in calls) and not any(_is(c, _GATHERS) for c in after)


def _steps_before_reducing(calls: list[str]) -> bool:
    return "step" in calls and not any(_is(c, _REDUCES) for c in calls[:calls.index("step")])


def _hints_for(error: str) -> list[str]:
    if "different collectives" in error:
        return ["Every rank must call the same collectives in the same order: no "
                "all_reduce or all-gather inside `if rank == 0`."]
    if "cannot unpack" in error or "not iterable" in error:
        return ["make_shard_optimizer returns a pair: (shard, optimizer)."]
    return ["Read the error, fix that line of your function, and run the check again."]
