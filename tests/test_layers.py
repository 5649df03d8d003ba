"""The package's layers: what a rank process loads, and which way the imports point.

A rank imports `workbench.training...` (or another rank module), and so the `workbench`
package itself. Its public names are imported when first used (workbench/__init__.py), so
the rank does not load the launcher (the job, the core queue, the pool), the widgets, the
charts or the lessons, which it has no use for and which would tie the low layer to the
high one.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import workbench
from workbench.engines import ENGINES

#: Every module a process of a job runs: the engines' rank modules and the others.
RANK_MODULES = sorted({e.rank_module for e in ENGINES.values() if e.rank_module} | {
    "workbench.jobs.user_rank", "workbench.jobs.pool_rank", "workbench.jobs.workers",
    "workbench.scaling.allreduce_rank", "workbench.synchronization.ring_rank"})

#: What no rank may load (a name, or a package and everything under it).
LAUNCHER_AND_UI = ["workbench.jobs.job", "workbench.jobs.starting", "workbench.jobs.ending",
                   "workbench.jobs.launchers",
                   "workbench.jobs.pool", "workbench.jobs.cores",
                   "workbench.jobs.watch", "workbench.jobs.slurm", "workbench.cli",
                   "workbench.ui", "workbench.lessons", "workbench.exercises", "bokeh",
                   "ipywidgets", "IPython"]

PROBE = """
import importlib, json, sys
forbidden = json.loads(sys.argv[1])
out, seen = {}, set()
for name in json.loads(sys.argv[2]):
    importlib.import_module(name)
    out[name] = sorted(m for m in set(sys.modules) - seen
                       if any(m == f or m.startswith(f + ".") for f in forbidden))
    seen.update(out[name])
print(json.dumps(out))
"""


def test_no_rank_module_loads_the_launcher_or_the_ui():
    """One interpreter imports them all, in turn: a forbidden module is named beside the
    rank module that loaded it first."""
    assert len(RANK_MODULES) >= 12, RANK_MODULES
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(LAUNCHER_AND_UI),
                           json.dumps(RANK_MODULES)], capture_output=True, text=True,
                          timeout=120, check=True)
    assert json.loads(proc.stdout) == {name: [] for name in RANK_MODULES}


def test_the_public_names_are_all_there_when_asked_for():
    import workbench
    import workbench.jobs

    for package in (workbench, workbench.jobs):
        for name in package.__all__:
            assert getattr(package, name) is not None, f"{package.__name__}.{name}"
    assert workbench.start is workbench.jobs.start
    assert "report" in dir(workbench)


# ------------------------------------------------------------ the layers (docs/ARCHITECTURE.md)
#: Each package's layer, lowest first. A module may import only from its own layer or below.
LAYERS = {
    0: ["hosts", "config", "engines", "flags"],                 # what every layer reads
    1: ["records", "models", "data"],                           # a run's record; its inputs
    2: ["training"],                                            # what a rank runs
    3: ["jobs"],                                                # launching and watching ranks
    4: ["data_parallel", "sharded", "tensor_parallel", "model_parallel", "synchronization",
        "scaling"],                                             # the concepts and their labs
    5: ["ui"],                                                  # widgets and every chart
    6: ["lessons", "exercises", "quiz", "classroom", "doctor", "notebooks", "cli"],
}
#: Modules of a concept package that the ranks import (layer 2): what a rank measures and
#: the collective it runs by hand.
RANK_SIDE = {"workbench.sharded.memory", "workbench.sharded.traffic",
             "workbench.synchronization.ring_allreduce"}
#: The one arrow that still runs up, and why: `workbench.launch(fn)` shows its ranks' output
#: in the cell it was called from.
KNOWN_UP = {("workbench.jobs.user_code", "workbench.ui.rank_output")}


def layer(module: str) -> int:
    """The layer of a module: its package's, except the rank side of a concept package and
    the command-line front ends (each concept's `commands.py`, with `cli`)."""
    parts = module.split(".")
    if module in RANK_SIDE:
        return 2
    if parts[-1] == "commands" or module == "workbench":
        return 6
    return next(k for k, names in LAYERS.items() if parts[1] in names)


def imports(path: Path, module: str) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, names) of every import of the package in `path`, those
    inside functions too (a later import is still an arrow)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names]
    return [(n, m, names) for n, m, names in found if m.split(".")[0] == "workbench"]


def modules() -> list[tuple[Path, str]]:
    root = Path(workbench.__file__).parent
    out = []
    for path in sorted(root.rglob("*.py")):
        name = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        out.append((path, name.removesuffix(".__init__")))
    return out


def test_every_package_has_a_layer():
    packages = {name.split(".")[1] for _, name in modules() if name.count(".")}
    placed = {p for names in LAYERS.values() for p in names}
    assert packages == placed, "give the new package a layer here and in ARCHITECTURE.md"


def test_imports_point_down_only():
    """No arrow from a lower layer to a higher one: charts in ui/ (none in the maths), the
    rank side free of the launcher, the launcher free of the widgets."""
    up = []
    for path, module in modules():
        for line, target, names in imports(path, module):
            if target == "workbench":  # its names live in jobs/, records/, config
                targets = [workbench._WHERE.get(n, "workbench.jobs") for n in names] or \
                          ["workbench.jobs"]
            else:
                targets = [target]
            for t in targets:
                if layer(t) > layer(module) and (module, t) not in KNOWN_UP:
                    up.append(f"{path.name}:{line} {module} (layer {layer(module)}) -> {t} "
                              f"(layer {layer(t)})")
    assert up == []


def test_no_private_name_is_imported_from_another_package():
    crossing = []
    for path, module in modules():
        for line, target, names in imports(path, module):
            if target.count(".") and module.count(".") and \
                    target.split(".")[1] != module.split(".")[1]:
                crossing += [f"{path.name}:{line} {target}.{n}" for n in names
                             if n.startswith("_")]
    assert crossing == []
