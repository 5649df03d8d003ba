"""`workbench classroom nbgrader`: the course it writes goes through nbgrader's own command
line. Worked solutions get full points, the released blanks none, and one typical wrong
answer loses exactly the points of its exercise (and no others)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from workbench.classroom import nbgrader as course
from workbench.notebooks import Task

BIN = Path(sys.executable).parent

#: One typical wrong answer per checked task: {(assignment, task number): code}.
WRONG = {
    ("01_average_gradients", 1): '''
def average_gradients(rank_grads):
    return ex.allreduce_sum(rank_grads)  # summed, never divided by the world size
''',
    ("02_shard_a_dataset", 1): '''
def shard(n_samples, rank, world_size):
    size = n_samples // world_size  # the remainder is dropped
    return list(range(rank * size, (rank + 1) * size))
''',
    ("03_speedup_and_efficiency", 1): '''
def scaling_table(times):
    return {p: (tp / times[1], tp / times[1] / p) for p, tp in times.items()}  # inverted
''',
    ("04_ring_allreduce", 1): '''
def reduce_scatter_step(chunks, step):
    p = len(chunks)
    sent = [chunks[r][(r - step) % p].clone() for r in range(p)]
    for r, data in enumerate(sent):
        chunks[(r + 1) % p][(r - step) % p] = data  # replaces instead of adding
''',
    ("04_ring_allreduce", 2): '''
def my_allgather_step(chunks, step):
    p = len(chunks)
    sent = [chunks[r][(r + 1 - step) % p].clone() for r in range(p)]
    for r, data in enumerate(sent):
        i = (r + 1 - step) % p
        chunks[(r + 1) % p][i] = chunks[(r + 1) % p][i] + data  # adds instead of copying
''',
    ("05_pipeline_bubble", 1): '''
def bubble_fraction(stages, micro_batches):
    return (stages - 1) / micro_batches  # forgets the fill and drain slots
''',
    ("05_pipeline_bubble", 2): "micro_batches_needed = 30  # from (P - 1) / M <= 0.1",
    ("06_data_or_model_parallelism", 1): '''
def choose(s):
    memory_gb = s.params * s.state_bytes_per_param / 1e9 + s.activations_gb
    if memory_gb > s.device_memory_gb:
        return "model"
    bytes_per_s = s.link_gbit_s * 1e9  # bits taken for bytes
    allreduce_s = 2 * (s.workers - 1) / s.workers * 4 * s.params / bytes_per_s
    if allreduce_s <= s.compute_s:
        return "data"
    return "model" if 2 * s.cut_activations_mb * 1e6 / bytes_per_s < allreduce_s else "data"
''',
    ("08_staleness", 1): '''
def staleness_per_push(events):
    version, pulled, out = 0, {}, []
    for action, worker in events:
        if action == "pull":
            pulled[worker] = version
        else:
            version += 1
            out.append(version - pulled[worker])  # counts its own update too
    return out
''',
    ("08_staleness", 2): '''
def staleness_lr(staleness, base_lr):
    return base_lr * max(1, staleness)  # a bigger step for an older gradient
''',
    ("09_linear_scaling_rule", 1): '''
def learning_rate(epoch, workers, batch_per_worker):
    return workers * batch_per_worker / ex.BASE_BATCH * ex.BASE_LR  # no warm-up
''',
    ("10_amdahl_or_gustafson", 1): '''
def serial_shares(p, speedup):
    return 100 * (p / speedup - 1) / (p - 1), 100 * (p - speedup) / (p - 1)  # in percent
''',
    ("10_amdahl_or_gustafson", 2): '''
def which_law(points):
    shares = [serial_shares(p, s) for p, s in points if p > 1]  # one point is not enough

    def spread(values):
        return (max(values) - min(values)) / (sum(values) / len(values))

    a, g = spread([x for x, _ in shares]), spread([y for _, y in shares])
    return "amdahl" if a <= g else "gustafson"
''',
    ("11_make_this_loop_data_parallel", 1): '''
def train_horovod(data, batch_size=8, lr=0.1, epochs=2, seed=0, checkpoint="runs/model.pt"):
    import horovod.torch as hvd
    hvd.init()
    (x, y), model = data, make_model(seed)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr),
                                         named_parameters=model.named_parameters(),
                                         op=hvd.Sum)  # summed, not averaged
    step = batch_size * hvd.size()
    for _epoch in range(epochs):
        for start in range(0, len(x) - step + 1, step):
            mine = slice(start + hvd.rank() * batch_size, start + (hvd.rank() + 1) * batch_size)
            optimizer.zero_grad()
            F.mse_loss(model(x[mine]), y[mine]).backward()
            optimizer.step()
    if hvd.rank() == 0:
        torch.save(model.state_dict(), checkpoint)
    return model.state_dict()
''',
    ("11_make_this_loop_data_parallel", 2): '''
def train_ddp(data, batch_size=8, lr=0.1, epochs=2, seed=0, checkpoint="runs/model.pt"):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
    (x, y), model = data, DDP(make_model(seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for _epoch in range(epochs):
        for start in range(0, len(x) - batch_size + 1, batch_size):  # the whole data, no shard
            optimizer.zero_grad()
            F.mse_loss(model(x[start:start + batch_size]), y[start:start + batch_size]).backward()
            optimizer.step()
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), checkpoint)
    return model.module.state_dict()
''',
    ("12_zero1_optimizer_step", 1): '''
def make_shard_optimizer(flat_params, rank, world, lr):
    shard = torch.nn.Parameter(flat_params)  # every rank steps everything
    return shard, torch.optim.SGD([shard], lr=lr, momentum=0.9)
''',
    ("12_zero1_optimizer_step", 2): '''
def zero1_step(flat_params, flat_grad, shard, optimizer, rank, world):
    dist.all_reduce(flat_grad)
    flat_grad /= world
    size = flat_params.numel() // world
    shard.grad = flat_grad[rank * size:(rank + 1) * size]
    optimizer.step()  # no all-gather
''',
}


def tasks(name: str) -> list[Task]:
    return [item for item in course.assignments()[name] if isinstance(item, Task)]


def test_every_checked_task_has_a_wrong_answer_and_the_course_has_its_metadata(tmp_path):
    course.write_course(tmp_path)
    names = course.assignments()
    assert {name for name, _ in WRONG} == set(names)
    for name in names:
        assert {k for n, k in WRONG if n == name} == set(range(1, len(tasks(name)) + 1))
        nb = nbformat.read(tmp_path / "source" / name / f"{name}.ipynb", as_version=4)
        meta = [c.metadata["nbgrader"] for c in nb.cells]
        solutions = [c for c in nb.cells if c.metadata["nbgrader"]["solution"]]
        graded = [m for m in meta if m["grade"]]
        assert len(solutions) == len(graded) == len(tasks(name))
        assert all(course.BEGIN in c.source and course.END in c.source for c in solutions)
        assert all(m["locked"] and m["points"] == course.POINTS for m in graded)
        assert all(m["locked"] for m in meta if not m["solution"])
        assert len({m["grade_id"] for m in meta}) == len(meta)


def submission(release: Path, answers: dict[int, str]) -> nbformat.NotebookNode:
    """The released notebook with task k's cell replaced by answers[k] (others blank)."""
    nb = nbformat.read(release, as_version=4)
    solution_cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    for k, cell in enumerate(solution_cells, 1):
        if k in answers:
            cell.source = answers[k].strip()
    return nb


def nbgrader(course_dir: Path, *args: str) -> None:
    start = time.monotonic()
    # nbgrader runs `alembic` from PATH: the environment's bin folder comes first.
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([str(BIN / "nbgrader"), *args], cwd=course_dir, capture_output=True,
                          text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(f"nbgrader {args[0]}: {time.monotonic() - start:.0f} s")


@pytest.mark.timeout(1200)  # 20 notebooks, each run in a fresh kernel: about a minute when idle
@pytest.mark.skipif(shutil.which("nbgrader", path=str(BIN)) is None,
                    reason="nbgrader is not installed: run `make setup` (the dev extra)")
def test_nbgrader_grades_solutions_blanks_and_typical_wrong_answers(tmp_path):
    root = tmp_path / "course"
    result = subprocess.run([sys.executable, "-m", "workbench.cli", "classroom", "nbgrader",
                             str(root)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    nbgrader(root, "generate_assignment", "*")
    expected: dict[tuple[str, str], tuple[int, int]] = {}   # (student, assignment): score, max
    for name in course.assignments():
        release = root / "release" / name / f"{name}.ipynb"
        n = len(tasks(name))
        solved = {k: t.solution for k, t in enumerate(tasks(name), 1)}
        students = {"solutions": (solved, n), "blanks": ({}, 0)}
        for k in range(1, n + 1):  # one wrong answer per exercise, the rest solved
            students[f"wrong{k}"] = ({**solved, k: WRONG[name, k]}, n - 1)
        for student, (answers, score) in students.items():
            folder = root / "submitted" / student / name
            folder.mkdir(parents=True)
            nbformat.write(submission(release, answers), folder / f"{name}.ipynb")
            expected[student, name] = (score * course.POINTS, n * course.POINTS)
    nbgrader(root, "autograde", "*")
    nbgrader(root, "export", "--to", str(root / "grades.csv"))
    with open(root / "grades.csv") as f:
        graded = {(row["student_id"], row["assignment"]): (float(row["score"]),
                                                           float(row["max_score"]))
                  for row in csv.DictReader(f)}
    got = {key: graded.get(key) for key in expected}
    print(json.dumps({f"{s}/{a}": v for (s, a), v in sorted(got.items())}, indent=1))
    assert got == {key: (float(s), float(m)) for key, (s, m) in expected.items()}


def test_classroom_nbgrader_refuses_a_file_for_out_dir(tmp_path, capsys):
    from workbench.cli import main

    (tmp_path / "course").write_text("")
    assert main(["classroom", "nbgrader", str(tmp_path / "course")]) == 2
    assert "is a file" in capsys.readouterr().err
