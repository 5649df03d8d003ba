"""Facts the lessons state, checked against the course's own formulas and sources.

Each test pins one correction, so a later edit cannot quietly bring the error back. The text
is read from every saved notebook (lessons and exercises), so the checks hold however the
lessons are split into notebooks.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from workbench.model_parallel.schedule import idle_fraction
from workbench.scaling import metrics

REPO = Path(__file__).resolve().parents[1]
PATHS = sorted((REPO / "notebooks").glob("*.ipynb")) + sorted(
    (REPO / "notebooks" / "exercises").glob("*.ipynb"))


def _text(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


TEXT = {p.name: _text(p) for p in PATHS}
ALL = "\n".join(TEXT.values())
#: Every page, checker, docstring, doc and quiz item, for statements that must not return.
SOURCES = {p: p.read_text() for p in sorted((REPO / "workbench").rglob("*.py"))
           + [REPO / "workbench" / "quiz" / "bank.yaml"] + sorted((REPO / "docs").glob("*.md"))}


def _one(pattern: str) -> str:
    """The one notebook whose text matches `pattern` (a regular expression)."""
    hits = [t for t in TEXT.values() if re.search(pattern, t)]
    assert len(hits) == 1, f"{pattern!r} in {len(hits)} notebooks"
    return hits[0]


def test_memory_check_agrees_with_its_own_arithmetic():
    text = _one(r"2-billion-parameter model")
    state_gb = 2e9 * 16 / 1e9
    assert f"= {state_gb:.0f} GB" in text
    assert state_gb < 40 and "On 40 GB it fits" in text
    assert state_gb > 24 and "On 24 GB it does not fit" in text
    assert "activations" in text and "buffers" in text


def test_bubble_at_four_micro_batches_per_stage_is_given_as_a_number():
    # (P-1)/(5P-1): 1/9 at P = 2, 2/14 at P = 3, 3/19 at P = 4, towards 1/5 as P grows
    assert [round(100 * idle_fraction(p, 4 * p), 1) for p in (2, 3, 4)] == [11.1, 14.3, 15.8]
    assert all(idle_fraction(p, 4 * p) < 0.2 for p in (2, 8, 64, 4096))
    assert "small once $M \\ge 4P$" not in ALL
    assert "16–20%" not in ALL and "between 16% and 20%" not in ALL
    assert "11.1% for\n$P = 2$" in ALL or "11.1% for $P = 2$" in ALL
    assert "(P-1)/M" in ALL and "ideal" in ALL


def test_data_parallelism_has_a_sharded_form_that_holds_no_whole_replica():
    text = _one(r"ZeRO stage 3")
    assert "Rajbhandari et al. 2020" in text and "Zhao et al. 2023" in text
    assert "Data parallelism needs the whole model on every worker." not in ALL


def test_small_corrections_stay_corrected():
    assert "Notebook 05 shows these negotiations on a timeline" not in ALL
    assert "Notebook 06 shows these negotiations on a timeline" in ALL
    assert "buckets* of 25 MB" not in ALL
    # A rank left in a collective waits until Horovod reports a peer gone or the back-end's
    # timeout ends the job: not "for ever", in any lesson, checker, docstring or quiz item.
    for_ever = re.compile(r"\bwait\w*\b[^.]{0,60}?\bfor\s*ever\b", re.IGNORECASE)
    assert [str(p.relative_to(REPO)) for p, text in SOURCES.items() if for_ever.search(text)] == []
    costmodel = SOURCES[REPO / "workbench" / "scaling" / "costmodel.py"]
    assert "No deployment used one server" not in costmodel
    bank = SOURCES[REPO / "workbench" / "quiz" / "bank.yaml"]
    assert "between 16% and 20%" not in bank and "16% and 20%" not in bank   # 11.1% at P = 2
    assert "skips this round-trip" not in bank and "still runs every cycle" in bank
    assert "costs no extra time" not in bank
    buckets = [t for t in TEXT.values() if "bucket_cap_mb" in t]
    assert buckets and all("1 MiB" in t for t in buckets)
    assert "every node must send and receive at least" not in ALL and "busiest" in ALL
    assert "NCCL and MPI libraries\nswitch" not in ALL and "double binary tree" in ALL
    assert "No deployed system used one server" not in ALL
    assert "speeds up training only while the global batch stays below" not in ALL
    assert "*assumes*" in ALL                      # a one-parameter law through one point
    assert "changes two things at once" in ALL     # run 4: the rate and the warm-up
    assert "Adam" in _one(r"exact, not an approximation")
    assert "$\\eta$\nto $k\\eta$ over the first 5 epochs" in ALL   # Goyal et al.'s warm-up


def test_one_f_one_b_is_pipedream_flush_and_pipedream_is_asynchronous():
    text = _one(r"1F1B with a flush")
    assert "ICML 2021" in text and "SOSP 2019" in text and "asynchronous" in text


def test_hybrid_parallelism_puts_tensor_parallelism_inside_a_server():
    assert "tensor parallelism" in ALL.lower()
    assert "model (or pipeline) parallelism inside a server" not in ALL
    assert "pipeline and data parallelism across servers" in ALL


def test_horovod_steps_are_the_documented_six_and_sharding_is_the_users_job():
    text = _one(r"## 5. Horovod's documented steps")
    steps = ["`hvd.init()`", "Pin a device", "Scale the learning rate", "Wrap the optimizer",
             "Broadcast the initial state", "Checkpoint on rank 0 only"]
    where = [text.index(s) for s in steps]
    assert where == sorted(where)
    assert "Sharding the data is your job" in text
    assert "HOROVOD_FUSION_THRESHOLD" in text and "128 MiB" in text and "64 MB" not in ALL
    assert "negotiate" in text


def test_ring_is_bandwidth_optimal_because_of_the_lower_bound():
    assert "lower bound" in ALL and "Rabenseifner" in ALL
    assert "**whatever $p$ is**: that\nis why the ring is bandwidth-optimal" not in ALL


def test_averaging_is_exact_except_for_batch_norm():
    text = _one(r"exact, not an approximation")
    assert "SyncBatchNorm" in text


def test_two_laws_two_serial_shares_and_karp_flatt_for_strong_scaling():
    text = _one(r"Gustafson\*\* \(1988\)")
    assert "s_A" in text and "s_G" in text and "one-worker" in text
    assert "\\dfrac{1}{(1-f) + f/p}" not in text
    assert "meant for **strong scaling**" in text
    assert "inferred" in text                                # the timeline's compute
    assert "less compute *time*" in text and "GFLOPs" in text  # VGG-16 vs ResNet-101
    assert "stale gradients" in text                         # accuracy caveat


def test_karp_flatt_is_above_one_exactly_when_a_run_got_slower():
    for s in (0.3, 0.99, 1.0, 1.5):
        assert (metrics.karp_flatt(s, 2) > 1) == (s < 1)


@pytest.mark.parametrize("counter", [(13, 4)])
def test_balanced_shards_are_not_equal_steps(counter):
    n, p = counter
    sizes = [n // p + (r < n % p) for r in range(p)]
    assert max(sizes) - min(sizes) == 1                      # balanced ...
    assert "differ by at most one sample guarantee" not in ALL
    assert "Equal step counts need **equal** shards" in ALL  # ... yet unequal steps


def test_the_review_links_every_exercise_and_the_nbgrader_course_grades_every_checked_one():
    from workbench.classroom.nbgrader import assignments
    from workbench.lessons.pages.p09_review import EXERCISES

    names = sorted(p.stem for p in (REPO / "notebooks" / "exercises").glob("*.ipynb"))
    assert [n for n, _ in EXERCISES] == names
    review = TEXT["09_review.ipynb"]
    assert all(f"(exercises/{n}.ipynb)" in review for n in names)
    assert set(assignments()) == set(names) - {"07_review_questions"}   # the quiz: no checker


def test_what_an_expert_flagged_in_the_parallelism_lessons_stays_corrected():
    # Megatron's bubble (P-1)/M at M = 4P is (P-1)/4P: it tends to 25%, it is not 25%.
    assert [100 * (p - 1) / (4 * p) for p in (2, 4)] == [12.5, 18.75]
    assert "25% for any" not in ALL
    assert "12.5% for $P = 2$ and 18.75% for\n$P = 4$" in _one(r"Ultra-Scale Playbook")
    sharded = _one(r"## 4\. bf16 autocast")
    # ZeRO's K = 12: an fp32 master copy plus Adam's two moments (Micikevicius et al. 2018)
    assert "fp32 master copy" in sharded and "Micikevicius et al. 2018" in sharded
    # autocast keeps float32 parameters and gradients: only the wire is 16-bit
    assert "16-bit compute and 16-bit gradients" not in ALL and "stay float32" in sharded
    # fp16 needs loss scaling for its 5-bit exponent, on any device
    assert "fp16, on GPUs" not in ALL and "5-bit exponent" in sharded
    # FSDP2's per-parameter dim-0 sharding is not FSDP1's paper; resharding has a default
    assert "issue 114299" in sharded and "reshard_after_forward=True" in sharded
    assert "the root" in sharded
    # counted after the step, not at the full-gradient peak of backward
    assert "after every step." not in sharded and "peak" in sharded
    assert "notebook 05 deals with models that do not fit" not in ALL
    # an all-reduce's payload is not the bytes each rank sends
    for text in (sharded, _one(r"## 3\. Gradient accumulation")):
        assert "*payload*" in text
    exercise = SOURCES[REPO / "workbench" / "exercises" / "pages" /
                       "p06_data_or_model_parallelism.py"]
    assert 'Return "data", "model" or "sharded"' in exercise
