"""The curriculum notebooks: saved as the course needs them, and the lesson helpers they call.

Running the notebooks themselves is the browser test's job (tests/browser/test_every_notebook.py,
or `python -m pytest --nbmake notebooks/0*.ipynb`); here we check what a run would not: that the
files match their description, carry no outputs, open without a kernel dialog, have goals,
a time estimate, a summary, exercises and questions, and link only to notebooks that exist.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from workbench import notebooks
from workbench.lessons import sgd
from workbench.lessons.show import module_source, table
from workbench.notebooks import function_task, md_table

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = [REPO / "notebooks" / name for name in notebooks.pages(notebooks.LESSON_PAGES)]
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def test_notebooks_are_up_to_date_with_their_description():
    assert notebooks.write_all(check=True) == []


def test_notebooks_numbered_from_00_without_gaps():
    numbers = [int(p.name[:2]) for p in NOTEBOOKS]
    assert len(numbers) >= 10 and numbers == list(range(len(numbers)))
    assert (REPO / "notebooks" / "00_welcome.ipynb") in NOTEBOOKS  # `make lab` opens it


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_saved_clean_and_complete(path):
    raw = json.loads(path.read_text())
    assert raw["metadata"]["kernelspec"] == KERNELSPEC
    assert raw["metadata"]["language_info"]["name"] == "python"
    nb = nbformat.reads(path.read_text(), as_version=4)
    nbformat.validate(nb)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code_cells)
    first = nb.cells[0].source
    last = [c.source for c in nb.cells if c.cell_type == "markdown"][-1]
    assert "**Goals.**" in first and re.search(r"\*\*Time:\*\* about \d+ minutes", first)
    for heading in ("## Summary", "## Exercises", "## Check yourself"):
        assert heading in last, f"{path.name}: the last text cell lacks {heading!r}"
    after = nb.cells[[c.source for c in nb.cells].index(last) + 1:]
    assert all(re.fullmatch(r"from workbench.quiz import Quiz\n\nQuiz\(lesson=\"\w+\"\)",
                            c.source) for c in after), f"{path.name}: only the quiz may follow"
    assert "exercises/" in last, "the exercises must link to notebooks/exercises"
    long = [c.source.splitlines()[0] for c in code_cells if len(c.source.splitlines()) > 20]
    assert not long, f"cells over 20 lines (logic lives in workbench/): {long}"


def test_the_welcome_lists_every_lesson_in_order_linked():
    """Notebook 00's course table is made from the lesson pages: a lesson added or
    renumbered is listed, under its own number, linked to its notebook."""
    welcome = nbformat.read(NOTEBOOKS[0], as_version=4).cells[1].source
    rows = re.findall(r"^\| (?:\[(\d\d)\]\(([^)]+)\)|(\d\d) \(this one\)) \| (.+) \|$", welcome,
                      re.MULTILINE)
    assert [link or NOTEBOOKS[0].name for _, link, _, _ in rows] == [p.name for p in NOTEBOOKS]
    assert all((number or this) == link_name[:2] for (number, _, this, _), link_name
               in zip(rows, [p.name for p in NOTEBOOKS], strict=True))
    assert all(summary.strip() for *_, summary in rows)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_links_point_to_existing_notebooks(path):
    text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells
                     if c.cell_type == "markdown")
    links = re.findall(r"\]\(([^)#]+)\)", text)
    local = [link for link in links if not link.startswith("http")]
    assert local, f"{path.name} links to no exercise"
    for link in local:
        assert (path.parent / link).exists(), f"{path.name} links to missing {link}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_bokehjs_loaded_before_the_first_chart(path):
    cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    uses = [i for i, s in enumerate(cells) if re.search(r"curves\(|figure_widget\(|Panel\(", s)]
    if not uses:
        return
    loads = [i for i, s in enumerate(cells) if "charts.load_bokehjs()" in s]
    assert loads and loads[0] <= uses[0], f"{path.name} shows a chart before loading BokehJS"


@pytest.mark.parametrize("path", NOTEBOOKS[1:7], ids=lambda p: p.name)
def test_each_lab_has_a_visible_size_knob(path):
    code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells
                     if c.cell_type == "code")
    assert re.search(r"^[A-Z_]+ = .+#", code, re.MULTILINE), "no labelled KNOB = value  # ..."


def test_check_mode_reports_a_stale_notebook(tmp_path):
    exercises = notebooks.pages(notebooks.EXERCISE_PAGES)
    everything = len(NOTEBOOKS) + 2 * len(exercises)  # an exercise and its solution each
    assert len(notebooks.write_all(tmp_path, check=True)) == everything
    assert len(notebooks.write_all(tmp_path)) == everything
    assert notebooks.write_all(tmp_path, check=True) == []
    victims = [tmp_path / "notebooks" / NOTEBOOKS[3].name,
               tmp_path / "notebooks" / "solutions" / next(iter(exercises))]
    for victim in victims:
        victim.write_text(victim.read_text().replace("Goals", "Aims"))
    assert notebooks.write_all(tmp_path, check=True) == victims


def test_the_builder_is_the_one_command_and_the_lessons_need_nothing_from_the_exercises():
    """`python -m workbench.notebooks --check` runs (as __main__, a second copy of the module)."""
    run = subprocess.run([sys.executable, "-m", "workbench.notebooks", "--check"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    lessons = REPO / "workbench" / "lessons"
    imports = re.compile(r"^\s*(from|import) workbench\.exercises", re.MULTILINE)
    # Only the lessons' own Python counts; the code of a notebook cell is the student's.
    for path in lessons.rglob("*.py"):
        source = re.sub(r'""".*?"""|\'\'\'.*?\'\'\'', "", path.read_text(encoding="utf-8"),
                        flags=re.DOTALL)
        assert not imports.search(source), path


def test_a_function_task_gives_the_exercise_its_solutions_signature_and_docstring():
    double = function_task('''
def double(x):
    """Twice x."""
    return 2 * x
''', todo="Your code here:\nmultiply.")
    assert double.exercise == ('def double(x):\n    """Twice x."""\n    # Your code here:\n'
                               "    # multiply.\n    raise NotImplementedError")
    undocumented = function_task("def f(a,\n      b):\n    return a\n")
    assert undocumented.exercise == ("def f(a,\n      b):\n    # Your code here.\n"
                                     "    raise NotImplementedError")


# --- the lesson helpers ---------------------------------------------------------------------

def test_minibatch_sgd_lowers_the_loss_and_records_a_curve():
    torch.set_num_threads(1)
    curve = sgd.minibatch_sgd(batch_size=32, lr=0.1, epochs=1)
    assert len(curve["step"]) == len(curve["samples"]) == len(curve["loss"]) > 10
    assert curve["step"][-1] == len(sgd.digits()) // 32
    assert curve["loss"][-1] < 0.6 * curve["loss"][0]
    diverged = sgd.minibatch_sgd(batch_size=32, lr=30.0, epochs=1)
    assert diverged["loss"][-1] > curve["loss"][-1]


def test_minibatch_sgd_refuses_impossible_settings():
    with pytest.raises(ValueError, match="batch_size must be between 1 and 1797"):
        sgd.minibatch_sgd(batch_size=0, lr=0.1)
    with pytest.raises(ValueError, match="lr must be positive"):
        sgd.minibatch_sgd(batch_size=8, lr=-1.0)


def test_gradient_noise_falls_as_one_over_the_batch_size():
    rows = sgd.gradient_noise([1, 16, 256], trials=40)
    noise = [r["noise"] for r in rows]
    assert noise[0] > noise[1] > noise[2]
    # σ²/b: 16 times the batch, about 1/16 of the noise (sampling error allowed)
    assert 6 < noise[0] / noise[1] < 40 and 6 < noise[1] / noise[2] < 40


def test_shard_gradients_average_equals_the_global_batch_and_sum_does_not():
    for n in (2, 4):
        r = sgd.shard_gradients(batch_size=32, world_size=n)
        assert r["max_diff_average"] < 1e-6
        assert r["max_diff_sum"] > 0.5 * (n - 1) * r["gradient_max"]
    with pytest.raises(ValueError, match="multiple of world_size"):
        sgd.shard_gradients(batch_size=30, world_size=4)


def test_module_source_reads_without_importing():
    script = ("import sys; from workbench.lessons.show import module_source; "
              "text = module_source('workbench.training.horovod_rank', 'def main'); "
              "assert text.startswith('def main') and 'hvd.init()' in text; "
              "assert 'horovod' not in sys.modules, 'Horovod was imported'")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    with pytest.raises(ModuleNotFoundError):
        module_source("workbench.no_such_module")


def test_the_loop_shown_in_notebook_02_reads_as_the_sgd_step():
    page = (Path(__file__).parents[1] / "workbench/lessons/pages/p02_data_parallelism.py")
    shown = re.search(r'source\("workbench\.training\.loop", \("([^"]+)", "([^"]+)"\)\)',
                      page.read_text())
    assert shown, "notebook 02 no longer shows the loop's step"
    loop = module_source("workbench.training.loop", *shown.groups())
    assert loop.startswith("def train_step") and shown.group(2) not in loop
    step = ["optimizer.zero_grad()", "out = model(x)", "loss = F.cross_entropy(out, y)",
            "loss.backward()", "sync.wait_for_gradients(optimizer)", "optimizer.step()"]
    where = [loop.index(line) for line in step]
    assert where == sorted(where), "the step's lines are out of order"


def test_table_formats_and_escapes():
    html = table([{"a": 0.123456, "b": "<x>", "c": None}],
                 [("a", "A", ".2f"), ("b", "B", "s"), ("c", "C", "d")]).data
    assert "0.12" in html and "&lt;x&gt;" in html and "–" in html and "<th" in html


def test_md_table_builds_rows():
    assert md_table(("a", "b"), ("1", "2")) == "| a | b |\n| --- | --- |\n| 1 | 2 |"


def test_parameter_gap_and_step_losses_on_real_serial_runs(tmp_path):
    import workbench
    from workbench.lessons.runs import parameter_gap, step_losses

    base = workbench.JobConfig(engine="serial", np=1, model="logreg", dataset="digits",
                               epochs=1, max_steps=5, batch_size=32, lr=0.1,
                               threads_per_rank=1, runs_dir=str(tmp_path))
    jobs = [workbench.start(base), workbench.start(base),
            workbench.start(workbench.JobConfig(**{**base.to_dict(), "lr": 0.5}))]
    try:
        assert [job.wait(timeout=240) for job in jobs] == ["succeeded"] * 3
    finally:
        for job in jobs:
            job.stop()
    assert parameter_gap(jobs[0], jobs[1]) == 0.0
    assert parameter_gap(jobs[0], jobs[2]) > 1e-3
    steps, losses = step_losses(jobs[0].run_dir)
    assert steps == [0, 1, 2, 3, 4] and all(loss > 0 for loss in losses)


def test_every_package_names_the_lessons_it_serves_and_they_exist() -> None:
    """d2l's habit: a package's docstring points back to the notebooks that use it."""
    root = Path(__file__).parents[1]
    for init in sorted((root / "workbench").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        named = re.findall(r"notebooks/[\w/]*?\d\d_\w+\.ipynb", doc.split("Lessons it serves:")[-1])
        assert "Lessons it serves:" in doc and named, f"{init.parent.name}: name its lessons"
        missing = [n for n in named if not (root / n).exists()]
        assert missing == [], f"{init.parent.name} names notebooks that do not exist: {missing}"
