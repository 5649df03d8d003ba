"""The bucketed and overlapped engines, and gradient accumulation, on real ranks (torchrun,
horovodrun): each follows the serial run with the same global batch, N × b ≡ 1 × N·b and
N × k × b ≡ 1 × N·k·b, and the bytes all-reduced per sample fall by k."""

from __future__ import annotations

import pytest

import workbench
from workbench.records import of_kind

SMALL = dict(model="mlp", width=32, dataset="digits", epochs=1, threads_per_rank=1,
             stall_timeout=120.0, optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=1e-3)
#: The digits MLP's parameters (64 → 32 → 32 → 10, weights and biases) in float32 bytes.
PARAM_BYTES = 4 * (64 * 32 + 32 + 32 * 32 + 32 + 32 * 10 + 10)
#: Small enough that the MLP's gradients fill several buckets.
BUCKET_MB = 4096 / 2**20


def run_job(tmp_path, **fields) -> workbench.Job:
    job = workbench.start(workbench.JobConfig(runs_dir=str(tmp_path), **{**SMALL, **fields}))
    assert job.wait(240) == "succeeded", job.summary
    return job


def warm_job(warm, **fields) -> workbench.Job:
    """A 2-rank run on warm ranks (conftest.py's `warm`): the torch engines' runs first,
    then Horovod's, so each launcher starts once for the module."""
    job = run_job(warm(fields["engine"]) / "runs", np=2, cpu_bind="none", **fields)
    assert job.summary.get("pool"), "a call on the warm ranks"
    return job


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """The serial run's parameters for a global batch, each run once."""
    cache: dict[int, dict] = {}

    def get(batch: int) -> dict:
        if batch not in cache:
            job = run_job(tmp_path_factory.mktemp(f"serial-{batch}"), engine="serial", np=1,
                          batch_size=batch)
            cache[batch] = job.record().model_state()
        return cache[batch]

    return get


def worst_gap(job: workbench.Job, want: dict) -> float:
    got = job.record().model_state()
    assert got.keys() == want.keys()
    return max(float((got[k] - want[k]).abs().max()) for k in want)


def steps_of(job: workbench.Job) -> list[dict]:
    return of_kind(job.metrics(), "step")


def test_the_model_has_more_bytes_than_one_bucket():
    assert PARAM_BYTES > 3 * BUCKET_MB * 2**20


def test_bucketed_engine_equals_serial_and_sends_every_gradient_once(warm, serial):
    job = warm_job(warm, engine="bucketed", batch_size=8, bucket_mb=BUCKET_MB)
    assert worst_gap(job, serial(16)) < 1e-5
    assert {s["synced_bytes"] for s in steps_of(job)} == {PARAM_BYTES}


def test_overlapped_engine_equals_serial_with_and_without_accumulation(warm, serial):
    plain = warm_job(warm, engine="overlapped", batch_size=8, bucket_mb=BUCKET_MB)
    assert worst_gap(plain, serial(16)) < 1e-5
    accumulated = warm_job(warm, engine="overlapped", batch_size=8, bucket_mb=BUCKET_MB,
                           accumulate=2)
    assert worst_gap(accumulated, serial(32)) < 1e-5
    # Measured: bytes all-reduced per sample trained, with k = 1 and k = 2 micro-batches.
    per_sample = [sum(s["synced_bytes"] for s in steps_of(j)) / sum(s["samples"] for s in
                  steps_of(j)) for j in (plain, accumulated)]
    assert per_sample[0] == pytest.approx(2 * per_sample[1])
    assert {s["samples"] for s in steps_of(accumulated)} == {16}   # k·b per rank per step
    assert len(steps_of(plain)) == 2 * (1617 // 16)                # two ranks' lines
    assert len(steps_of(accumulated)) == 2 * (1617 // 32)


@pytest.mark.parametrize("engine", ["torch", "horovod"])
def test_accumulation_equals_serial_with_batch_nkb(warm, serial, engine):
    """DDP's no_sync() and Horovod's backward_passes_per_step: 2 ranks × 2 × 8 ≡ 1 × 32."""
    job = warm_job(warm, engine=engine, batch_size=8, accumulate=2)
    assert worst_gap(job, serial(32)) < 1e-5
    # Every gradient once per step of k micro-batches (counted from the gradients' sizes,
    # as DDP's buckets and Horovod's allreduces take them): the bytes per sample fall by k.
    assert {s["synced_bytes"] for s in steps_of(job)} == {PARAM_BYTES}


def test_horovod_fp16_compression_halves_the_bytes_and_stays_near_serial(warm, serial):
    """Horovod's Compression.fp16: each gradient sent in 16 bits, half the bytes, and the
    parameters within half precision's rounding of the serial run, not equal to it."""
    job = warm_job(warm, engine="horovod", batch_size=16, grad_compression="fp16")
    assert {s["synced_bytes"] for s in steps_of(job)} == {PARAM_BYTES // 2}
    assert 1e-7 < worst_gap(job, serial(32)) < 1e-2


def test_the_training_panel_sets_the_bucket_size_and_micro_batches(tmp_path):
    from workbench.ui import TrainingPanel

    panel = TrainingPanel(runs_dir=str(tmp_path), engine="overlapped", np=2, model="mlp",
                          dataset="digits", epochs=1, threads_per_rank=1)
    try:
        assert {"bucketed", "overlapped"} <= set(panel.controls["engine"].options)
        panel.controls["bucket_mb"].value = 1.5
        panel.controls["accumulate"].value = 4
        cfg = panel.config()
        assert (cfg.engine, cfg.bucket_mb, cfg.accumulate) == ("overlapped", 1.5, 4)
        panel.controls["accumulate"].value = 0
        panel.start_button.click()
        assert "--accumulate 0" in panel.alert.value and panel.job is None
        assert not any(tmp_path.iterdir())
    finally:
        panel.close()


def test_notebook_08s_bucket_picker_runs_both_engines_at_the_size_picked(tmp_path, warm):
    """Pressed once the notebook has closed its warm ranks (as its last cell does), the
    picker still runs both engines on warm ranks, opened for them, and closes those; warm
    ranks the notebook still holds it uses and leaves open."""
    from workbench.launch.pool_call import running_pool
    from workbench.lessons.bucket_picker import BucketPicker

    fields = dict(np=2, model="mlp", width=32, dataset="digits", epochs=1, max_steps=4,
                  batch_size=16, threads_per_rank=1, cpu_bind="none", bucket_mb=0.0625)
    for runs_dir in (str(tmp_path / "runs"), str(warm("torch") / "runs")):
        picker = BucketPicker({**fields, "runs_dir": runs_dir})
        picker.size.value = 2 ** -6
        picker.button.click()
        assert [row["engine"] for row in picker.rows] == ["bucketed", "overlapped"]
        assert [job.config.bucket_mb for job in picker.jobs] == [2 ** -6] * 2
        assert all(job.summary.get("pool") for job in picker.jobs), "on warm ranks"
        left_open = running_pool("torch", 2, runs_dir) is not None
        assert left_open == (runs_dir != str(tmp_path / "runs")), runs_dir


def test_the_bucket_picker_says_it_starts_ranks_before_it_waits_for_them(tmp_path, monkeypatch):
    """A start of ranks takes seconds (more on a busy host): the student who pressed Run
    must see why nothing else has happened yet while they start."""
    import workbench
    from workbench.lessons.bucket_picker import BucketPicker

    picker = BucketPicker({"np": 2, "runs_dir": str(tmp_path / "runs")})
    shown_while_starting = []

    def ranks(**_):
        shown_while_starting.extend(o.get("text", "") for o in picker.shown.outputs)
        raise RuntimeError("ranks stopped here")

    monkeypatch.setattr(workbench, "ranks", ranks)
    with pytest.raises(RuntimeError, match="ranks stopped here"):
        picker.run()
    assert any("starting 2 warm ranks" in text for text in shown_while_starting)
