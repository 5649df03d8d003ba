"""Notebook 00: welcome, the set-up check, and how to use the panels."""

import importlib
import pkgutil

from workbench.notebooks import code, md

NAME = "00_welcome.ipynb"


def course_table() -> str:
    """The course's lessons as a Markdown table: one row per lesson page, linked, with the
    first paragraph of its docstring. Made from the pages, so that a lesson added or
    renumbered is listed without anyone editing this page."""
    package = importlib.import_module(__package__)
    pages = [importlib.import_module(f"{__package__}.{info.name}")
             for info in pkgutil.iter_modules(package.__path__) if not info.name.startswith("_")]
    rows = ["| notebook | what you learn |", "| --- | --- |"]
    for page in sorted(pages, key=lambda page: page.NAME):
        summary = " ".join(page.__doc__.split("\n\n")[0].split()).split(": ", 1)[1]
        number = page.NAME[:2]
        link = f"{number} (this one)" if page.NAME == NAME else f"[{number}]({page.NAME})"
        rows.append(f"| {link} | {summary.rstrip('.')} |")
    return "\n".join(rows)


CELLS = [
    md(r"""
# 00 · Welcome to the distributed training workbench

**Goals.** After this notebook you can
- check that this machine can run distributed training jobs, and read what is missing if not,
- start, watch and stop a real data-parallel job from the training panel,
- find the record of every run and open a past run again.

**Time:** about 15 minutes.
"""),
    md(rf"""
## What this course is about

Training a deep-learning model means running stochastic gradient descent (SGD) for many
steps. *Distributed training* spreads those steps over several workers (processes, GPUs or
machines) so that training finishes sooner, or so that a model or a dataset too big for one
device fits at all. The price is coordination: the workers must exchange what they learned,
and they wait for each other.

In this workbench every job is real. Pressing **Start** launches separate operating-system
processes with [Horovod](https://horovod.ai) or PyTorch's DistributedDataParallel (DDP); they
train on this machine's CPU cores and talk to each other over gloo, and the charts follow
them live. Nothing is simulated unless a notebook says so.

{course_table()}

Each notebook ends with a summary, exercises from [`exercises/`](exercises/) (worked
solutions in [`solutions/`](solutions/)) and questions to check yourself.

**How to work.** Run the cells from top to bottom with *Shift + Enter*. Settings you are
invited to change are at the top of a cell in CAPITALS, such as `EPOCHS = 1`; the defaults
are small so that every notebook runs in about a minute.
"""),
    code(r"""
from workbench.lessons.show import table, until_finished
from workbench.ui import TrainingPanel, charts

# The live charts need BokehJS in the page; it is loaded from disk, no network needed.
charts.load_bokehjs()
print("Charts ready.")
"""),
    md(r"""
## 1. Check the set-up

The doctor checks what a job needs, in the order a job needs it:

1. Python and PyTorch, with the `torch.distributed` back-ends (gloo for CPUs, NCCL for NVIDIA
   GPUs);
2. Horovod and what it was built with: a *controller* (gloo or MPI) that lets the workers
   agree on what to send, and *tensor operations* that move the data;
3. the CPU cores and GPUs the workers will run on;
4. the notebook side: JupyterLab, ipywidgets, Bokeh, and the `jupyter_bokeh` extension that
   draws live charts.

A green ✔ is fine; a red ✘ comes with the command that fixes it. After a fix, press
**Check again**. In a terminal, `workbench doctor` prints the same report.
"""),
    code(r"""
from workbench.doctor import doctor_widget

doctor = doctor_widget()
doctor
"""),
    code(r"""
if doctor.report["ready"]:
    print("Ready: Horovod jobs can run here.")
else:
    print("Not ready yet: fix the lines marked ✘ above "
          "(the serial and torch engines may still work).")
"""),
    md(r"""
## 2. The training panel

The panel below sets up one data-parallel job. From top to bottom:

- **Settings**: the engine (`horovod`, `torch` for PyTorch DDP, or `serial` for one plain
  process), the number of ranks (workers), the model and dataset, epochs, the batch size *per
  rank*, the learning rate, the optimizer, the random seed and the CPU threads per rank.
- **Start** and **Stop**, a status line and a progress bar.
- **Four live charts**: the training loss and accuracy of every rank (thin lines) and of the
  whole job (thick line); the throughput in samples per second; and how each rank's step time
  splits into *computing* gradients and *synchronizing* them with the other ranks.
- **Logs of each rank** (click to open), and **past runs** with an **Open** button.

The job below trains a softmax regression on 1,797 images of handwritten digits with two
Horovod ranks, each on half of every batch.
"""),
    code(r"""
EPOCHS = 1  # more epochs give longer curves

panel = TrainingPanel(engine="horovod", np=2, model="logreg", dataset="digits",
                      epochs=EPOCHS, batch_size=32, lr=0.1, threads_per_rank=1)
panel
"""),
    md(r"""
Now press **Start** in the panel. (When the notebook runs unattended, the next cell presses
it for you; if you pressed it yourself, the cell just waits.)

Watch the status line: for the first seconds the ranks are *starting*. `horovodrun` launches
two Python processes, each imports PyTorch and Horovod and loads the data, and only then does
training begin. For a small model this start-up takes longer than the training itself: keep
that in mind when you time jobs.
"""),
    code(r"""
panel.start_button.click()      # the same as pressing Start: returns at once
await until_finished(panel)     # wait while the panel keeps its charts live

summary = panel.job.summary
print(f"{summary['status']}: start-up {summary['startup_s']:.1f} s, "
      f"training {summary['train_time_s']:.1f} s, final loss {summary['final_loss']:.3f}")
"""),
    md(r"""
**Stop** ends every rank of the job within a few seconds and records the run as *stopped*.
Interrupting the kernel (■) or restarting it stops the job too: no rank outlives the
notebook.

## 3. Every run leaves a record

Each job writes a folder `runs/<run id>/` next to the notebook:

| file | what it holds |
| --- | --- |
| `config.json` | the settings of the job |
| `metrics/rank<k>.jsonl` | a line per step and per epoch of each rank: loss, accuracy, seconds |
| `logs/rank0.log`, ... | what each rank printed |
| `summary.json` | how the job ended, its throughput, its start-up and training times |
| `model.pt` | the trained parameters |

The **past runs** list of the panel shows them; **Open** redraws the charts and logs of the
chosen run. The cell below does the same from code.
"""),
    code(r"""
panel.open_run(panel.run_picker.value)   # the newest run, as if you pressed Open
print(panel.run_picker.label)
"""),
    code(r"""
import workbench
from workbench.ui.run_controls import what_ran

rows = [{"run": r.run_id, "status": r.status, "what": what_ran(r.config), **r.config}
        for r in workbench.list_runs()[-5:]]
table(rows, [("run", "run", "s"), ("status", "status", "s"), ("engine", "engine", "s"),
             ("np", "ranks", "d"), ("what", "what ran", "s")],
      caption="The last runs in runs/")
"""),
    md(r"""
The other panel of the course, the **scaling panel** (notebook 06), works the same way: choose
the numbers of workers, press **Run**, and it runs the same job at each size, one after the
other, adding a point to its speedup and efficiency charts as each run ends.

Everything the panels do is also one line of Python or one command in a terminal:

```python
import workbench
job = workbench.start(workbench.JobConfig(engine="horovod", np=2, model="logreg", epochs=1))
job.wait(); job.summary
```

```bash
workbench run --engine horovod --np 2 --model logreg --epochs 1
workbench runs               # list past runs
workbench show <run id>      # one run's settings, outcome and log tail
```

## 4. Your own code on real ranks

The panels run the workbench's own training. `workbench.launch` runs *your* function on
real ranks, as `horovod.run(fn, np=2)` does: the function is sent to each rank, what a rank
prints appears under the cell with its rank number, and `job.results()` collects what each
rank returned. Inside, `workbench.rank()` and `workbench.size()` say who is who:
"""),
    code(r"""
def hello():
    return f"rank {workbench.rank()} of {workbench.size()}"

job = workbench.launch(hello, np=2)
job.wait(), job.results()
"""),
    md(r"""
Notebook 02 uses it to run the Horovod steps you write yourself.
"""),
    md(r"""
## Summary

- `workbench doctor` (or the table above) says whether distributed jobs can run here and
  how to fix what is missing.
- The training panel starts real processes: the ranks. Its charts follow every rank live;
  Stop, an interrupted kernel or a restarted one ends them all.
- Small jobs spend most of their time starting up, not training.
- Every run leaves a folder in `runs/` with its settings, metrics, logs, summary and model.
- `workbench.launch(fn, np=2)` runs your own function on real ranks and returns a job, like
  the panels' jobs.

## Exercises

1. Set the panel to 1 rank and press Start again. Compare the throughput (samples/s) and the
   share of the step time spent synchronizing with the 2-rank run.
2. Start a job with 5 epochs and press **Stop** halfway. Find the stopped run in the past
   runs list and open it.
3. Set the learning rate to `-1` and press Start. Read the message: the settings are checked
   before anything is launched.

The exercise notebooks of the course are in [`exercises/`](exercises/); the first one,
[average the gradients](exercises/01_average_gradients.ipynb), belongs with notebook 02.

## Check yourself

1. Why did the first loss appear only several seconds after you pressed Start?
2. Where would you look to see why a rank failed?
3. What happens to the ranks of a running job when you restart the kernel?

<details><summary>Answers</summary>

1. The ranks are new processes: they are launched, import PyTorch and Horovod, and load the
   data before the first step. The summary reports this start-up time separately.
2. In the panel's logs of each rank, or in `runs/<run id>/logs/`; `summary.json` names the
   failed rank and keeps the end of its log.
3. They are stopped: the workbench ends every process of a job when the kernel that
   launched it goes away.
</details>
"""),
]
