"""The exercise checkers: every worked solution passes, typical wrong answers get the hint
that names their mistake, nothing raises, and the notebooks are saved as the course needs."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
import torch

from workbench.exercises import (
    Feedback,
    allreduce,
    data_parallel,
    laws,
    lr_scaling,
    overlap,
    parallelism,
    pipeline,
    ring,
    scaling,
    sharding,
    staleness,
    zero,
)
from workbench.exercises.feedback import call_student
from workbench.notebooks import write_all

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]
EXERCISES, SOLUTIONS = REPO / "notebooks" / "exercises", REPO / "notebooks" / "solutions"


def solution(notebook: str, name: str):
    """The function (or value) `name` defined by the saved worked-solution notebook."""
    nb = nbformat.read(SOLUTIONS / notebook, as_version=4)
    namespace: dict = {}
    for cell in nb.cells:
        if cell.cell_type == "code":
            exec(compile(cell.source, f"{notebook}:{cell.id}", "exec"), namespace)
    return namespace[name]


def assert_rejected(fb: Feedback, *phrases: str) -> None:
    """The answer failed, and the message or a hint contains every phrase."""
    assert isinstance(fb, Feedback)
    assert not fb.passed, str(fb)
    assert fb.hints, "a failing answer always gets a hint"
    text = fb.message + "\n" + "\n".join(fb.hints)
    for phrase in phrases:
        assert phrase in text, f"{phrase!r} not in:\n{fb}"


# --- 1. average gradients -----------------------------------------------------------------------

def test_average_gradients_solution_passes():
    fb = allreduce.check_average_gradients(solution("01_average_gradients.ipynb",
                                                    "average_gradients"))
    assert fb.passed and not fb.hints, str(fb)


def test_average_gradients_sum_instead_of_average():
    assert_rejected(allreduce.check_average_gradients(allreduce.allreduce_sum),
                    "sum of the gradients", "divide by the world size")


def test_average_gradients_fixed_divisor_instead_of_world_size():
    fb = allreduce.check_average_gradients(
        lambda grads: [t / 2 for t in allreduce.allreduce_sum(grads)])
    assert_rejected(fb, "always divide by 2", "len(rank_grads)")


def test_average_gradients_divided_twice():
    fb = allreduce.check_average_gradients(
        lambda grads: [t / len(grads) ** 2 for t in allreduce.allreduce_sum(grads)])
    assert_rejected(fb, "divided by the world size twice")


def test_average_gradients_without_communication():
    assert_rejected(allreduce.check_average_gradients(lambda grads: grads),
                    "Nothing was communicated")
    assert_rejected(allreduce.check_average_gradients(lambda g: [t / len(g) for t in g]),
                    "never combined the ranks")


def test_average_gradients_all_zeros_and_divided_by_p_minus_one():
    fb = allreduce.check_average_gradients(lambda grads: [torch.zeros_like(g) for g in grads])
    assert_rejected(fb, "holds zeros")
    fb = allreduce.check_average_gradients(
        lambda grads: [t / (len(grads) - 1) for t in allreduce.allreduce_sum(grads)])
    assert_rejected(fb, "world size minus one", "not by p − 1")
    assert "sum of the gradients" not in str(fb)


def test_average_gradients_bad_shapes_and_none():
    assert_rejected(allreduce.check_average_gradients(lambda grads: None), "returned None")
    assert_rejected(allreduce.check_average_gradients(
        lambda grads: allreduce.allreduce_sum(grads)[0]), "one per rank")
    assert_rejected(allreduce.check_average_gradients(
        lambda grads: [t.sum() for t in grads]), "shape")


# --- 2. sharding --------------------------------------------------------------------------------

def test_shard_solution_passes_and_strided_answer_too():
    assert sharding.check_shard(solution("02_shard_a_dataset.ipynb", "shard")).passed
    assert sharding.check_shard(lambda n, rank, p: range(rank, n, p)).passed


def test_shard_drops_the_remainder():
    def blocks(n, rank, p):
        size = n // p
        return list(range(rank * size, (rank + 1) * size))
    assert_rejected(sharding.check_shard(blocks), "Dropped samples", "on no rank")


def test_shard_last_rank_takes_the_rest():
    def last_takes_rest(n, rank, p):
        size = n // p
        return list(range(rank * size, n if rank == p - 1 else (rank + 1) * size))
    assert_rejected(sharding.check_shard(last_takes_rest), "Unbalanced shards", "its share")


def test_balanced_shards_still_take_unequal_numbers_of_steps():
    """n = 13, p = 4, b = 1: a right answer to the exercise, yet rank 0 takes one step more."""
    shard = solution("02_shard_a_dataset.ipynb", "shard")
    sizes = [len(shard(13, rank, 4)) for rank in range(4)]
    assert sizes == [4, 3, 3, 3]
    assert sharding.steps_per_rank(sizes, batch_size=1) == [4, 3, 3, 3]
    assert sharding.steps_per_rank([3, 3, 3, 3], batch_size=1) == [3, 3, 3, 3]  # dropped one
    assert "drop the incomplete last" in sharding.__doc__
    assert sharding.show_steps(shard, 13, 4, 1).endswith("[4, 3, 3, 3]")


def test_shard_overlapping_and_identical_shards():
    def overlap(n, rank, p):
        size = -(-n // p)
        return list(range(rank * size, min(n, (rank + 1) * size + 1)))
    assert_rejected(sharding.check_shard(overlap), "Overlapping shards")
    assert_rejected(sharding.check_shard(lambda n, rank, p: range(n)), "same shard")


def test_shard_indices_out_of_range():
    assert_rejected(sharding.check_shard(lambda n, rank, p: range(rank, n + 1, p)),
                    "outside 0..")


# --- 3. speedup and efficiency --------------------------------------------------------------------

def test_scaling_table_solution_passes():
    fb = scaling.check_scaling_table(solution("03_speedup_and_efficiency.ipynb",
                                              "scaling_table"))
    assert fb.passed, str(fb)


def test_scaling_table_inverted_ratio():
    fb = scaling.check_scaling_table(
        lambda t: {p: (tp / t[1], tp / t[1] / p) for p, tp in t.items()})
    assert_rejected(fb, "Inverted ratio", "T(1) / T(p)")


def test_scaling_table_efficiency_not_divided_by_p():
    fb = scaling.check_scaling_table(lambda t: {p: (t[1] / tp, t[1] / tp) for p, tp in t.items()})
    assert_rejected(fb, "Efficiency not divided by p")


def test_scaling_table_compared_with_previous_row_and_bad_shape():
    def previous(t):
        ps = sorted(t)
        out = {1: (1.0, 1.0)}
        for a, b in zip(ps, ps[1:], strict=False):
            out[b] = (t[a] / t[b], t[a] / t[b] / b)
        return out
    assert_rejected(scaling.check_scaling_table(previous), "row before it")
    assert_rejected(scaling.check_scaling_table(lambda t: [1, 2]), "expected a dict")
    assert_rejected(scaling.check_scaling_table(lambda t: {p: 1.0 for p in t}),
                    "not a pair of numbers")


def _rounded(t, decimals, percent=False):
    """The right table, rounded as a student might; efficiency in percent if asked."""
    out = {}
    for p, (s, e) in scaling.reference_table(t).items():
        out[p] = (round(s, decimals), round(100 * e if percent else e, decimals))
    return out


def test_scaling_table_rounded_to_two_decimals_passes():
    assert scaling.check_scaling_table(lambda t: _rounded(t, 2)).passed


def test_scaling_table_truncated_or_double_rounded_to_two_decimals_passes():
    import math

    def truncated(t):
        return {p: (math.floor(100 * s) / 100, math.floor(100 * e) / 100)
                for p, (s, e) in scaling.reference_table(t).items()}
    assert truncated(scaling.TIMES_S)[2] == (1.84, 0.92)        # 96/52 = 1.846..., E = 0.923
    assert scaling.check_scaling_table(truncated).passed
    # rounded twice, as from a three-decimal table: 1.8449 -> 1.845 -> 1.85
    twice = lambda t: {p: (round(round(s, 3) + 1e-9, 2), round(round(e, 3) + 1e-9, 2))  # noqa: E731
                       for p, (s, e) in scaling.reference_table(t).items()}
    assert scaling.check_scaling_table(twice).passed


def test_scaling_table_rounded_too_much_or_in_percent():
    fb = scaling.check_scaling_table(lambda t: _rounded(t, 1))
    assert_rejected(fb, "rounded too much", "two decimals")
    assert_rejected(scaling.check_scaling_table(lambda t: _rounded(t, 2, percent=True)),
                    "percentage", "as a fraction")


def test_scaling_reference_comes_from_the_scaling_metrics():
    from workbench.scaling import metrics
    s, e = scaling.reference_table(scaling.TIMES_S)[8]
    assert s == pytest.approx(96.0 / 21.0) and e == pytest.approx(metrics.efficiency(s, 8))


# --- 4. ring allreduce --------------------------------------------------------------------------

def _rs_variant(offset: int, direction: int, add: bool):
    def step(chunks, s):
        p = len(chunks)
        for r in range(p):
            i, dst = (r + offset - s) % p, (r + direction) % p
            data = chunks[r][i].clone()
            chunks[dst][i] = chunks[dst][i] + data if add else data
    return step


def test_ring_solutions_pass():
    rs = solution("04_ring_allreduce.ipynb", "reduce_scatter_step")
    ag = solution("04_ring_allreduce.ipynb", "my_allgather_step")
    assert ring.check_reduce_scatter_step(rs).passed
    assert ring.check_allgather_step(ag).passed
    gen = torch.Generator().manual_seed(1)
    tensors = [torch.randn(10, generator=gen) for _ in range(4)]
    total = torch.stack(tensors).sum(0)
    for out in ring.simulated_ring_allreduce(tensors, rs, ag):
        assert torch.allclose(out, total, atol=1e-6)


def test_ring_reduce_scatter_copy_instead_of_add():
    assert_rejected(ring.check_reduce_scatter_step(_rs_variant(0, +1, add=False)),
                    "replaced its chunk instead of adding", "should hold A2 + C2 but holds C2")


def test_ring_reduce_scatter_wrong_chunk_and_wrong_direction():
    assert_rejected(ring.check_reduce_scatter_step(_rs_variant(1, +1, add=True)),
                    "wrong chunk", "(r − s) mod p")
    assert_rejected(ring.check_reduce_scatter_step(_rs_variant(0, -1, add=True)),
                    "wrong way round")


def test_ring_reduce_scatter_that_does_nothing_or_crashes():
    assert_rejected(ring.check_reduce_scatter_step(lambda chunks, step: None),
                    "Nothing changed")
    assert_rejected(ring.check_reduce_scatter_step(lambda chunks, step: chunks[99]),
                    "IndexError")


def test_ring_allgather_add_instead_of_copy_and_wrong_chunk():
    assert_rejected(ring.check_allgather_step(_rs_variant(1, +1, add=True)),
                    "added the chunk instead of replacing", "2×")
    assert_rejected(ring.check_allgather_step(_rs_variant(0, +1, add=False)), "wrong chunk")


def test_ring_labels_decode_back_to_their_pieces():
    labels = ring.label_tensors(3)
    total = sum(labels)
    assert ring.name(ring.decode(float(total[1]), 3)) == "A1 + B1 + C1"
    assert ring.decode(0.5, 3) is None


# --- 5. pipeline bubble ---------------------------------------------------------------------------

def test_pipeline_solutions_pass():
    assert pipeline.check_bubble_fraction(solution("05_pipeline_bubble.ipynb",
                                                   "bubble_fraction")).passed
    answer = solution("05_pipeline_bubble.ipynb", "micro_batches_needed")
    assert pipeline.check_micro_batches(answer, stages=4, max_bubble=0.10).passed


def test_pipeline_schedule_counts_match_the_formula():
    for p, m in [(2, 3), (4, 8), (5, 20)]:
        assert pipeline.idle_fraction(p, m) == pytest.approx((p - 1) / (m + p - 1))


def test_pipeline_bubble_wrong_denominators():
    assert_rejected(pipeline.check_bubble_fraction(lambda p, m: (p - 1) / m),
                    "Megatron", "ideal (busy) time", "whole run")
    assert_rejected(pipeline.check_bubble_fraction(lambda p, m: (p - 1) / p),
                    "does not depend on M")
    assert_rejected(pipeline.check_bubble_fraction(lambda p, m: (p - 1) / (m + p)),
                    "Off by one slot")
    assert_rejected(pipeline.check_bubble_fraction(lambda p, m: m / (m + p - 1)), "busy share")


def test_bubble_rounded_or_in_percent_gets_a_hint_about_the_form_not_the_formula():
    three = pipeline.check_bubble_fraction(lambda p, m: round((p - 1) / (m + p - 1), 3))
    assert_rejected(three, "formula is right", "rounded")
    percent = pipeline.check_bubble_fraction(lambda p, m: 100 * (p - 1) / (m + p - 1))
    assert_rejected(percent, "formula is right", "percentage")
    assert "Count the slots" not in str(three) + str(percent)


def test_pipeline_micro_batches_wrong_answers():
    assert_rejected(pipeline.check_micro_batches(16), "not enough", "M = 4P", "16%")
    assert_rejected(pipeline.check_micro_batches(30), "not the smallest")
    assert_rejected(pipeline.check_micro_batches(None), "no answer yet")
    assert_rejected(pipeline.check_micro_batches(27.5), "whole number")
    assert_rejected(pipeline.check_micro_batches("27 micro-batches"), "whole number")
    assert_rejected(pipeline.check_micro_batches(True), "whole number")


def test_pipeline_micro_batches_accepts_a_whole_number_in_any_form():
    for answer in (27, 27.0, "27", " 27 "):
        assert pipeline.check_micro_batches(answer).passed, answer


# --- 6. data or model parallelism ---------------------------------------------------------------

def _rule(gb_per_s, state_bytes=None, with_activations=True, compare_cuts=True,
          ring_factor=True, cuts_twice=True):
    """The course's rule with one slip built in, as a student might write it."""
    def choose(s):
        per_param = s.state_bytes_per_param if state_bytes is None else state_bytes
        need = s.params * per_param / 1e9 + (s.activations_gb if with_activations else 0)
        if need > s.device_memory_gb:
            return "model"
        bandwidth = gb_per_s(s)
        factor = 2 * (s.workers - 1) / s.workers if ring_factor else 1.0
        ar = factor * 4 * s.params / bandwidth
        if ar <= s.compute_s:
            return "data"
        if not compare_cuts:
            return "model"
        cut = (2 if cuts_twice else 1) * s.cut_activations_mb * 1e6 / bandwidth
        return "model" if cut < ar else "data"
    return choose


def test_parallelism_solution_passes():
    fb = parallelism.check_parallelism_choice(solution("06_data_or_model_parallelism.ipynb",
                                                       "choose"))
    assert fb.passed, str(fb)
    assert parallelism.check_parallelism_choice(_rule(lambda s: s.link_gbit_s * 1e9 / 8)).passed


def test_parallelism_bits_taken_for_bytes():
    assert_rejected(parallelism.check_parallelism_choice(_rule(lambda s: s.link_gbit_s * 1e9)),
                    "Bits are not bytes", "1.25 GB/s")


def test_parallelism_memory_slips():
    bytes_ok = lambda s: s.link_gbit_s * 1e9 / 8  # noqa: E731
    assert_rejected(parallelism.check_parallelism_choice(_rule(bytes_ok, state_bytes=4)),
                    "16 bytes per parameter")
    assert_rejected(parallelism.check_parallelism_choice(
        _rule(bytes_ok, with_activations=False)), "Activations count too")
    assert_rejected(parallelism.check_parallelism_choice(lambda s: "data"), "Memory")


BYTES = lambda s: s.link_gbit_s * 1e9 / 8  # noqa: E731  (the right bandwidth, bytes/s)


def test_parallelism_wrong_cost_models_are_rejected():
    assert_rejected(parallelism.check_parallelism_choice(_rule(BYTES, ring_factor=False)),
                    "2(p − 1)/p", "270M")
    assert_rejected(parallelism.check_parallelism_choice(_rule(BYTES, cuts_twice=False)),
                    "twice per step", "long sequences")
    both = _rule(BYTES, ring_factor=False, cuts_twice=False)  # no factor, no backward pass
    assert_rejected(parallelism.check_parallelism_choice(both), "2(p − 1)/p")


def test_parallelism_scenarios_leave_no_slip_unnoticed():
    """Every slip of the cost model flips the choice of at least one scenario."""
    slips = [dict(ring_factor=False), dict(cuts_twice=False), dict(compare_cuts=False),
             dict(ring_factor=False, cuts_twice=False), dict(state_bytes=4),
             dict(with_activations=False)]
    for slip in slips:
        rule = _rule(BYTES, **slip)
        assert any(rule(s) not in parallelism.reference_choices(s)
                   for s in parallelism.SCENARIOS), slip


def test_parallelism_model_whenever_communication_bound():
    fb = parallelism.check_parallelism_choice(
        _rule(lambda s: s.link_gbit_s * 1e9 / 8, compare_cuts=False))
    assert_rejected(fb, "large feature maps", "even more")
    assert_rejected(parallelism.check_parallelism_choice(lambda s: 42), "'data' or 'model'")


def test_sharded_data_parallelism_is_right_where_only_a_shard_fits():
    plain = _rule(BYTES)   # answers 'model' wherever a replica does not fit
    shard = lambda s: s.params * s.state_bytes_per_param / 1e9 / s.workers + s.activations_gb  # noqa: E731

    def sharded(s):
        if plain(s) == "model" and shard(s) <= s.device_memory_gb < (
                s.params * s.state_bytes_per_param / 1e9 + s.activations_gb):
            return "FSDP"
        return plain(s)
    assert parallelism.check_parallelism_choice(plain).passed
    assert parallelism.check_parallelism_choice(sharded).passed
    seven_b = next(s for s in parallelism.SCENARIOS if s.name.startswith("7-billion"))
    assert parallelism.reference_choices(seven_b) == {"model", "sharded"}
    always_sharded = lambda s: "sharded" if plain(s) == "model" else plain(s)  # noqa: E731
    assert_rejected(parallelism.check_parallelism_choice(always_sharded),
                    "70-billion", "Cut the model itself")
    assert_rejected(parallelism.check_parallelism_choice(lambda s: "sharded"),
                    "A whole replica fits", "simpler")
    assert_rejected(parallelism.check_parallelism_choice(lambda s: "data"),
                    "Sharded data parallelism (ZeRO-3, FSDP) would fit")


# --- 8. staleness ------------------------------------------------------------------------------

def test_staleness_solutions_pass():
    nb = "08_staleness.ipynb"
    assert staleness.check_staleness(solution(nb, "staleness_per_push")).passed
    assert staleness.check_staleness_lr(solution(nb, "staleness_lr")).passed


def test_staleness_reference_matches_the_parameter_server_rule():
    assert staleness.reference_staleness(staleness.TRACE) == [0, 0, 0, 3, 0, 1]
    assert staleness.reference_staleness(staleness.ROUND_ROBIN) == [0, 1, 2, 2, 2]


def test_staleness_wrong_counts():
    right = staleness.reference_staleness
    assert_rejected(staleness.check_staleness(lambda ev: [t + 1 for t in right(ev)]),
                    "Off by one", "Its own update comes after")
    assert_rejected(staleness.check_staleness(staleness._absolute_versions),
                    "Subtract the version the worker pulled")
    assert_rejected(staleness.check_staleness(staleness._events_between),
                    "Pulls do not change the parameters")
    assert_rejected(staleness.check_staleness(lambda ev: [0] * 3), "one staleness for each")


def test_staleness_wrong_learning_rates():
    assert_rejected(staleness.check_staleness_lr(lambda tau, lr: lr / tau),
                    "ZeroDivisionError", "max(1, staleness)")
    assert_rejected(staleness.check_staleness_lr(lambda tau, lr: lr * max(1, tau)),
                    "You multiplied")
    assert_rejected(staleness.check_staleness_lr(lambda tau, lr: lr / (tau + 1)), "τ + 1")
    assert_rejected(staleness.check_staleness_lr(lambda tau, lr: lr), "does not depend")



def test_checkers_read_numbers_as_the_quiz_does():
    """One parser for every number a student gives: the quiz's `parse_number`."""
    from fractions import Fraction

    right = staleness.reference_staleness
    assert staleness.check_staleness(lambda ev: [float(t) for t in right(ev)]).passed
    assert staleness.check_staleness(lambda ev: [str(t) for t in right(ev)]).passed
    assert_rejected(staleness.check_staleness(lambda ev: [t + 0.5 for t in right(ev)]),
                    "whole numbers")
    assert_rejected(staleness.check_staleness(lambda ev: None), "whole numbers")
    assert staleness.check_staleness_lr(lambda tau, lr: Fraction(str(lr)) / max(1, tau)).passed
    assert_rejected(staleness.check_staleness_lr(lambda tau, lr: "a tenth"), "not a number")
    assert_rejected(staleness.check_staleness_lr(lambda tau, lr: float("nan")), "not a number")
    assert pipeline.check_bubble_fraction(lambda p, m: f"{p - 1}/{m + p - 1}").passed
    assert pipeline.check_micro_batches("27,0").passed  # a decimal comma, as in the quiz
    assert_rejected(laws.check_serial_shares(lambda p, s: (0.1,)), "pair")
    assert_rejected(laws.check_serial_shares(lambda p, s: "0.1, 0.2"), "pair")

# --- 9. linear scaling rule -----------------------------------------------------------------------

def test_linear_scaling_solution_passes_and_follows_goyal():
    fb = lr_scaling.check_learning_rate(solution("09_linear_scaling_rule.ipynb",
                                                 "learning_rate"))
    assert fb.passed, str(fb)
    assert lr_scaling.reference_lr(10, 32, 32) == pytest.approx(0.4)   # 1024 = 4 × 256
    assert lr_scaling.reference_lr(0, 32, 32) == pytest.approx(0.1)    # warm-up starts at η
    assert lr_scaling.reference_lr(2.5, 32, 32) == pytest.approx(0.25)  # half-way


def _lr_rule(scale, warmup="linear"):
    """The rule with one slip: `scale(p, b)` gives k; warm-up 'linear', 'none' or 'from0'."""
    def lr(epoch, p, b):
        target = scale(p, b) * lr_scaling.BASE_LR
        if warmup == "none" or epoch >= lr_scaling.WARMUP_EPOCHS:
            return target
        start = 0.0 if warmup == "from0" else lr_scaling.BASE_LR
        return start + (target - start) * epoch / lr_scaling.WARMUP_EPOCHS
    return lr


def test_linear_scaling_wrong_answers():
    check, B = lr_scaling.check_learning_rate, lr_scaling.BASE_BATCH
    assert_rejected(check(_lr_rule(lambda p, b: p)), "scaled by the number of workers")
    assert_rejected(check(_lr_rule(lambda p, b: b / B)), "batch of one worker")
    assert_rejected(check(_lr_rule(lambda p, b: (p * b / B) ** 0.5)), "square-root")
    assert_rejected(check(_lr_rule(lambda p, b: p * b / B, warmup="none")), "No warm-up")
    assert_rejected(check(_lr_rule(lambda p, b: p * b / B, warmup="from0")), "starts at 0")


# --- 10. Amdahl or Gustafson --------------------------------------------------------------------

def test_laws_solutions_pass():
    nb = "10_amdahl_or_gustafson.ipynb"
    assert laws.check_serial_shares(solution(nb, "serial_shares")).passed
    assert laws.check_which_law(solution(nb, "which_law")).passed


def test_laws_serial_shares_invert_the_course_formulas():
    from workbench.scaling import metrics
    for p in (2, 4, 8):
        s_a, _ = laws.serial_shares(p, metrics.amdahl(p, 0.9))
        _, s_g = laws.serial_shares(p, metrics.gustafson(p, 0.9))
        assert s_a == pytest.approx(0.1) and s_g == pytest.approx(0.1)
        assert s_a == pytest.approx(metrics.karp_flatt(metrics.amdahl(p, 0.9), p))


def test_laws_serial_share_slips():
    a_of = lambda p, s: (p / s - 1) / (p - 1)  # noqa: E731
    g_of = lambda p, s: (p - s) / (p - 1)  # noqa: E731
    assert_rejected(laws.check_serial_shares(lambda p, s: (g_of(p, s), a_of(p, s))), "Swapped")
    assert_rejected(laws.check_serial_shares(lambda p, s: (a_of(p, s), a_of(p, s))),
                    "One number for both laws")
    assert_rejected(laws.check_serial_shares(lambda p, s: (1 - a_of(p, s), 1 - g_of(p, s))),
                    "parallel share")
    assert_rejected(laws.check_serial_shares(lambda p, s: (100 * a_of(p, s), 100 * g_of(p, s))),
                    "percentages")


def test_laws_which_law_slips():
    assert_rejected(laws.check_which_law(lambda pts: "amdahl"), "varies relative to its size")
    assert_rejected(laws.check_which_law(lambda pts: "gustafson"), "varies")

    def two_points_are_enough(pts):  # the right comparison, but never says "cannot tell"
        return laws.reference_law(pts) or "amdahl"
    assert_rejected(laws.check_which_law(two_points_are_enough), "fits it exactly",
                    "three worker counts")

    def absolute_spread(pts):  # the spread not relative to the share's size
        shares = [laws.serial_shares(p, s) for p, s in pts if p > 1]
        if len(shares) < 2:
            return None
        spread = [max(x) - min(x) for x in zip(*shares, strict=True)]
        return "amdahl" if spread[0] < spread[1] else "gustafson"
    assert_rejected(laws.check_which_law(absolute_spread), "never larger than s_G")


# --- every checker: never raises, same shape ----------------------------------------------------

CHECKERS = [allreduce.check_average_gradients, sharding.check_shard,
            scaling.check_scaling_table, ring.check_reduce_scatter_step,
            ring.check_allgather_step, pipeline.check_bubble_fraction,
            parallelism.check_parallelism_choice, staleness.check_staleness,
            staleness.check_staleness_lr, lr_scaling.check_learning_rate,
            laws.check_serial_shares, laws.check_which_law]


@pytest.mark.parametrize("checker", CHECKERS, ids=lambda c: c.__name__)
def test_checkers_never_raise_on_bad_answers(checker):
    def unfinished(*args):
        raise NotImplementedError

    for answer in (unfinished, lambda *a: 1 / 0, lambda *a: "nonsense", 42, None):
        fb = checker(answer)
        assert isinstance(fb, Feedback) and not fb.passed and fb.hints
    assert "not written yet" in checker(unfinished).message
    assert "ZeroDivisionError" in checker(lambda *a: 1 / 0).message
    assert "expected a function, got int" in checker(42).message


def test_feedback_renders_as_text_and_html():
    fb = Feedback(False, "a < b", ["use <b>bold</b>"])
    assert str(fb) == "Not yet: a < b\n  Hint: use <b>bold</b>"
    page = fb._repr_html_()
    assert "a &lt; b" in page and "&lt;b&gt;bold" in page and "Not yet" in page
    assert "Correct" in Feedback(True, "fine")._repr_html_()
    _, crash = call_student(len)  # len() without an argument: a TypeError, as feedback
    assert crash is not None and "TypeError" in crash.message and "line" in crash.hints[0]


# --- the notebooks ----------------------------------------------------------------------------

def test_notebooks_are_up_to_date_with_their_description():
    assert write_all(check=True) == []


def test_at_least_six_exercises_each_with_a_solution_of_the_same_name():
    names = sorted(p.name for p in EXERCISES.glob("*.ipynb"))
    assert len(names) >= 6
    assert names == sorted(p.name for p in SOLUTIONS.glob("*.ipynb"))


@pytest.mark.parametrize("path", sorted(EXERCISES.glob("*.ipynb")) + sorted(
    SOLUTIONS.glob("*.ipynb")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebook_saved_clean_with_goals_time_and_summary(path):
    raw = json.loads(path.read_text())
    assert raw["metadata"]["kernelspec"] == {"name": "python3", "display_name": "Python 3",
                                             "language": "python"}
    nb = nbformat.reads(path.read_text(), as_version=4)
    nbformat.validate(nb)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code_cells)
    first, last = nb.cells[0], nb.cells[-1]
    assert first.cell_type == "markdown" and "**Goals.**" in first.source
    assert "**Time:** about" in first.source
    assert last.cell_type == "markdown" and last.source.startswith("## Summary")
    assert all(len(c.source.splitlines()) <= 20 for c in code_cells), "logic lives in the package"
    unfinished = any("NotImplementedError" in c.source for c in code_cells)
    assert unfinished == (path.parent == EXERCISES and path.name != "07_review_questions.ipynb")


# --- every checker, fed odd answers: a Feedback, at once, never an exception -------------------

class _Hostile:
    """An answer whose every use raises: comparison, conversion, iteration, length."""

    def __getattr__(self, name):
        raise RuntimeError(f"hostile {name}")

    def __eq__(self, other):
        raise RuntimeError("hostile ==")

    def __float__(self):
        raise RuntimeError("hostile float")

    def __iter__(self):
        raise RuntimeError("hostile iter")

    def __len__(self):
        raise RuntimeError("hostile len")

    __hash__ = object.__hash__


def _raises(*_a, **_k):
    raise ValueError("broken")


ODD_VALUES = [None, float("nan"), float("inf"), -1, 0, 10**9, 10**400, "text", "", b"x",
              [], [1, 2], {"a": 1}, torch.zeros(3, 3), torch.tensor(float("nan")),
              range(10**12), _Hostile(), True]
def _returning(value):
    return lambda *_a, **_k: value


ODD_FUNCTIONS = [_raises, lambda: 1, lambda a, b, c, d, e, f, g: 1, print,
                 *[_returning(v) for v in ODD_VALUES]]


#: Checkers that run the answer on real ranks, by name: each is given only answers it must
#: refuse before starting any (not a function, or one it cannot call as the exercise does).
RANK_CHECKERS = {
    "check_data_parallel": lambda fn: data_parallel.check_data_parallel(fn, engine="torch"),
    "check_zero1": lambda fn: zero.check_zero1(fn, fn),
    "check_launch_hook": lambda fn: overlap.check_launch_hook(fn),
}
FUNCTION_CHECKERS = [*CHECKERS, zero.check_shard_optimizer, *RANK_CHECKERS.values()]
_NAMES = {id(c): name for name, c in RANK_CHECKERS.items()}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("checker", FUNCTION_CHECKERS,
                         ids=lambda c: _NAMES.get(id(c), getattr(c, "__name__", "?")))
def test_every_checker_answers_odd_inputs_with_feedback(checker):
    on_ranks = id(checker) in _NAMES
    answers = ODD_VALUES if on_ranks else ODD_VALUES + ODD_FUNCTIONS   # no ranks started
    if on_ranks:
        answers = answers + [lambda: 1, lambda x: 1, lambda *, x: 1]  # refused by signature
    for answer in answers:
        fb = checker(answer)
        assert isinstance(fb, Feedback), (answer, fb)
        assert not fb.passed and fb.hints and fb.message, (answer, str(fb))


@pytest.mark.parametrize("answer", [*ODD_VALUES, 10**9, 10**18, 12.5, "12", " 12 ", "1e9",
                                    float("-inf"), [12], (12,)], ids=lambda a: type(a).__name__)
def test_micro_batches_answers_any_value_without_counting_a_huge_schedule(answer):
    fb = pipeline.check_micro_batches(answer)
    assert isinstance(fb, Feedback) and not fb.passed and fb.hints


def test_a_division_that_reaches_zero_for_some_world_size_is_named():
    fb = allreduce.check_average_gradients(
        lambda g: [t * (2 // len(g)) for t in allreduce.allreduce_sum(g)])
    assert_rejected(fb, "holds zeros", "integer division")
