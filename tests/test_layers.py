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
import re
import subprocess
import sys
from pathlib import Path

import cloudpickle
import pytest

import workbench
from workbench.engines import ENGINES

#: Every module a process of a job runs: the engines' rank modules and the others.
RANK_MODULES = sorted({e.rank_module for e in ENGINES.values() if e.rank_module} | {
    "workbench.rank.wrapper", "workbench.rank.pool", "workbench.rank.workers",
    "workbench.scaling.allreduce_rank", "workbench.synchronization.ring_rank"})

#: What no rank may load (a name, or a package and everything under it).
LAUNCHER_AND_UI = ["workbench.launch", "workbench.cli", "workbench.ui", "workbench.lessons",
                   "workbench.exercises", "bokeh", "ipywidgets", "IPython"]

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
    import workbench.launch

    for package in (workbench, workbench.launch):
        for name in package.__all__:
            assert getattr(package, name) is not None, f"{package.__name__}.{name}"
    assert workbench.start is workbench.launch.start
    assert "report" in dir(workbench)


def test_launch_and_rank_are_both_packages_and_functions(monkeypatch, tmp_path):
    """Importing a module of launch/ or rank/ (every rank imports rank/) makes the package
    the attribute `workbench.launch` or `workbench.rank`: it must still be the function."""
    import workbench.launch.job
    import workbench.rank.protocol
    from workbench.config import ConfigError

    for name in ("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert workbench.rank.__name__ == "workbench.rank" and workbench.rank() == 0
    sent = cloudpickle.dumps(lambda: workbench.rank())  # a function of yours that uses it
    assert cloudpickle.loads(sent)() == 0               # travels to the ranks by value
    assert workbench.launch.__name__ == "workbench.launch"
    with pytest.raises(ConfigError, match="no script at"):
        workbench.launch(tmp_path / "missing.py")


# ------------------------------------------------------------ the layers (docs/ARCHITECTURE.md)
#: Each package's layer, lowest first. A module may import only from its own layer or below.
LAYERS = {
    0: ["hosts", "config", "engines", "flags", "caller", "torch_versions"],  # every layer reads
    1: ["records", "models", "data"],                           # a run's record; its inputs
    2: ["rank", "training"],                                    # what a rank runs
    3: ["launch"],                                              # launching and watching ranks
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
KNOWN_UP = {("workbench.launch.starting", "workbench.ui.rank_output")}


def layer(module: str) -> int:
    """The layer of a module: its package's, except the rank side of a concept package and
    the command-line front ends (each concept's `commands.py`, with `cli`)."""
    parts = module.split(".")
    if module in RANK_SIDE:
        return 2
    if parts[-1] == "commands" or module == "workbench":
        return 6
    return next(k for k, names in LAYERS.items() if parts[1] in names)


def absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module `from ... import` names, a relative one (`from .x import y`) made absolute."""
    if not node.level:
        return node.module or ""
    base = module.split(".")[:len(module.split(".")) - node.level + is_package]
    return ".".join(base + ([node.module] if node.module else []))


def imports(path: Path, module: str) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, names) of every import of the package in `path`: those inside
    functions, under `if TYPE_CHECKING:` (a module read for its annotations is read all the
    same) and relative ones too (a later import is still an arrow)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            found.append((node.lineno, absolute(node, module, path.name == "__init__.py"),
                          [a.name for a in node.names]))
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


def line_counts() -> dict[str, int]:
    """{module: its lines, all of them (code, blank, docstrings, comments)}."""
    return {name: len(path.read_text().splitlines()) for path, name in modules()}


def in_machinery(name: str) -> bool:
    return name.count(".") > 0 and name.split(".")[1] in MACHINERY


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
            if target == "workbench":  # its public names live in launch/, rank/, records/...
                targets = [workbench._WHERE[n] for n in names if n in workbench._WHERE]
            else:
                targets = [target]
            for t in targets:
                if layer(t) > layer(module) and (module, t) not in KNOWN_UP:
                    up.append(f"{path.name}:{line} {module} (layer {layer(module)}) -> {t} "
                              f"(layer {layer(t)})")
    assert up == []


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of the package it imports (every import `imports` finds).
    `from pkg import mod` is an arrow to the module `mod`, not to the package."""
    graph = {name: set() for _, name in modules()}
    for path, module in modules():
        for _, target, names in imports(path, module):
            subs = [f"{target}.{n}" for n in names]
            found = [m for m in subs if m in graph]
            graph[module] |= set(found if subs and len(found) == len(subs) else [target, *found])
        graph[module] &= set(graph) - {module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or round a loop (Tarjan's
    strongly connected components with more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    """No two modules need each other, even through others: each could be read, and
    tested, after what it imports (the circle finder itself is checked on a known one)."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    found = circles(import_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_import_graph_sees_every_kind_of_import(tmp_path):
    """A circle closed only under `if TYPE_CHECKING:`, inside a function, or by a relative
    import is still a circle: each kind of import makes an arrow."""
    (tmp_path / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                   "    from workbench.launch import job\n")
    (tmp_path / "b.py").write_text("def f():\n    from .pool import Pool\n")
    assert [t for _, t, _ in imports(tmp_path / "a.py", "workbench.rank.a")] == [
        "workbench.launch"]
    assert imports(tmp_path / "b.py", "workbench.launch.b") == [
        (2, "workbench.launch.pool", ["Pool"])]
    assert "workbench.launch.job" in import_graph()["workbench"]


def test_rank_imports_nothing_of_launch():
    """rank/ runs inside every rank, launch/ in the notebook or the CLI: no import in rank/
    reaches launch/, not under TYPE_CHECKING, not inside a function, not through a public
    name of `workbench` that lives there."""
    found = []
    for path, module in modules():
        if module.split(".")[:2] != ["workbench", "rank"]:
            continue
        for line, target, names in imports(path, module):
            reached = [target, *(workbench._WHERE.get(n, f"{target}.{n}") for n in names)]
            found += [f"{path.name}:{line} {module} -> {t}" for t in reached
                      if t.split(".")[:2] == ["workbench", "launch"]]
    assert found == []


def test_no_private_name_is_imported_from_another_module():
    """A name that starts with `_` is its module's own: no other module imports it."""
    crossing = []
    for path, module in modules():
        for line, target, names in imports(path, module):
            if target != module:
                crossing += [f"{path.name}:{line} {target}.{n}" for n in names
                             if n.startswith("_") and not n.startswith("__")]
    assert crossing == []


# ------------------------------------------------------------ the tests' map (tests/README.md)
#: The page sources: one row for each folder, tested by running the notebooks made from them.
PAGES = ("workbench/lessons/pages/", "workbench/exercises/pages/")
#: Modules no test exercises, the only rows that may say `none`. Keep it short.
UNTESTED = {
    "workbench/ui/metrics_emitter.py",  # a stand-in rank for benchmarks/ui_latency.py only
}
ROW = re.compile(r"\| `([^`|]+)` \| (.*) \|")
CELL = re.compile(r"none|`[^`]+`(, `[^`]+`){0,3}( \(indirectly\))?")


def map_rows(readme: Path) -> dict[str, str]:
    """{module: its "tested in" cell} from the table of `readme`."""
    rows: dict[str, str] = {}
    for line in readme.read_text().splitlines():
        if match := ROW.fullmatch(line.strip()):
            module, cell = match.groups()
            assert module not in rows, f"two rows for {module} in {readme}"
            rows[module] = cell.strip()
    return rows


def mentions(path: Path, module: str) -> bool:
    """Whether a test file names `module` (a path such as workbench/launch/job.py): by its
    dotted name, its path, or `from workbench.launch import job` (one import, several lines)."""
    dotted = module.removesuffix(".py").rstrip("/").replace("/", ".")
    package, _, name = dotted.rpartition(".")
    text = path.read_text()
    if module in text or re.search(rf"(?<![\w.]){re.escape(dotted)}\b", text):
        return True
    return path.suffix == ".py" and any(
        isinstance(node, ast.ImportFrom) and node.module == package
        and any(a.name == name for a in node.names) for node in ast.walk(ast.parse(text)))


def test_every_module_has_a_row_in_the_tests_map_and_its_tests_exist():
    """tests/README.md has one row per module of workbench/ (not the `__init__.py` files; one
    per page folder), each test file it names exists, and one of them names the module,
    unless the row says the module is reached `(indirectly)`."""
    repo = Path(workbench.__file__).parent.parent
    on_disk = set()
    for path in (repo / "workbench").rglob("*.py"):
        module = path.relative_to(repo).as_posix()
        if path.name != "__init__.py":
            on_disk.add(next((p for p in PAGES if module.startswith(p)), module))
    rows = map_rows(repo / "tests" / "README.md")
    wrong = [f"{m}: no row in tests/README.md" for m in sorted(on_disk - rows.keys())]
    wrong += [f"{m}: a row in tests/README.md, no such module" for m in
              sorted(rows.keys() - on_disk)]
    for module, cell in sorted(rows.items()):
        if not CELL.fullmatch(cell):
            wrong.append(f"{module}: write `tests/test_x.py`, ... (at most 4), then optionally "
                         f"(indirectly), or none: {cell!r}")
            continue
        named = re.findall(r"`([^`]+)`", cell)
        if (cell == "none") != (module in UNTESTED):
            wrong.append(f"{module}: `none` only for UNTESTED, and UNTESTED only for `none`")
        for name in named:
            if not (sorted(repo.glob(name)) if "*" in name else (repo / name).is_file()):
                wrong.append(f"{module}: no {name}")
        files = [repo / n for n in named if "*" not in n and (repo / n).is_file()]
        named_by = [f.name for f in files if mentions(f, module)]
        if cell.endswith("(indirectly)") and named_by:
            wrong.append(f"{module}: {named_by} name it: drop (indirectly)")
        elif named and not cell.endswith("(indirectly)") and not named_by:
            wrong.append(f"{module}: none of {named} names it; name the test that does, or "
                         f"say (indirectly)")
    assert not wrong, "\n".join(wrong)


#: The machinery's packages: their modules' docstrings say what, in at most ten lines, and
#: point to docs/ARCHITECTURE.md for the why.
MACHINERY = ("launch", "rank", "training", "records")


def test_the_machinerys_module_docstrings_are_short_and_point_to_the_why():
    """Each module of the machinery has a docstring of at most ten lines that names
    docs/ARCHITECTURE.md, where the why is written once."""
    wrong = {}
    for path, name in modules():
        tree = ast.parse(path.read_text())
        if in_machinery(name):
            doc = ast.get_docstring(tree) or ""
            lines = tree.body[0].end_lineno - tree.body[0].lineno + 1 if doc else 0
            if not doc or lines > 10 or "docs/ARCHITECTURE.md" not in " ".join(doc.split()):
                wrong[name] = f"{lines} lines" + ("" if "ARCHITECTURE" in doc else ", no pointer")
    assert wrong == {}


def test_no_module_is_over_400_lines():
    """A file a student can read in one sitting (and most are under 300)."""
    sizes = line_counts()
    assert {name: n for name, n in sizes.items() if n > 400} == {}
    assert sum(n > 300 for n in sizes.values()) < len(sizes) / 10


#: Lines (all of them: code, blank, docstrings, comments) the machinery may take for what it
#: does today: the jobs, launchers, core queue, pools, rank wrapper, loop and records.
MACHINERY_LINES = 5_400


def test_the_machinery_stays_within_its_line_budget():
    """The four machinery packages together; a feature that needs more says so here."""
    sizes = {name: n for name, n in line_counts().items() if in_machinery(name)}
    assert sum(sizes.values()) <= MACHINERY_LINES, sorted(sizes.items(), key=lambda s: -s[1])[:5]
