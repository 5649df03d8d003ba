"""workbench: run and study distributed deep-learning jobs from Jupyter.

    import workbench
    job = workbench.start(workbench.JobConfig(engine="horovod", np=2, epochs=3))
    job.wait(); job.summary

    job = workbench.launch(my_function, np=2)     # your own code on real ranks
    job.wait(); job.results()

    pool = workbench.ranks(np=2, engine="torch")  # warm ranks: each call in milliseconds
    pool.run(my_function).wait()                  # and %%ranks runs a cell on them

Inside your code: `workbench.report(step=..., loss=...)`, `workbench.rank()`, `size()`,
`local_rank()`, and `workbench.kept()` for what a pool's rank keeps between calls (see
workbench/rank/api.py).
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.config import ConfigError, JobConfig
    from workbench.launch.job import Job
    from workbench.launch.pool import ranks
    from workbench.launch.starting import launch, start, start_module
    from workbench.rank.api import kept, local_rank, rank, report, size
    from workbench.records import RunRecord, list_runs, load_run

__version__ = "0.1.0"

#: Where each public name lives. They are imported when first used (PEP 562), so that a
#: rank, which imports `workbench.training...` and so this package, does not load the
#: launcher, the core queue and the pool (tests/test_layers.py checks it). `launch` and
#: `rank` are packages that are also functions (`callable_package`).
_WHERE = {
    "ConfigError": "workbench.config", "JobConfig": "workbench.config",
    "Job": "workbench.launch.job", "start": "workbench.launch.starting",
    "start_module": "workbench.launch.starting", "ranks": "workbench.launch.pool",
    "kept": "workbench.rank.api", "local_rank": "workbench.rank.api",
    "rank": "workbench.rank", "report": "workbench.rank.api",
    "size": "workbench.rank.api", "launch": "workbench.launch",
    "RunRecord": "workbench.records", "list_runs": "workbench.records",
    "load_run": "workbench.records",
}
__all__ = ["ConfigError", "Job", "JobConfig", "RunRecord", "kept", "launch", "list_runs",
           "load_run", "local_rank", "rank", "ranks", "report", "size", "start", "start_module",
           "__version__"]


def lazy_names(namespace: dict[str, Any], where: dict[str, str]) -> Callable[[str], Any]:
    """A package's `__getattr__` (PEP 562) that imports each name of `where` ({name:
    module}) when first asked for, and keeps it in the package's `namespace`."""
    def get(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        module = importlib.import_module(where[name])
        package = module.__name__ == f"{namespace['__name__']}.{name}"  # the name is a package
        namespace[name] = module if package else getattr(module, name)
        return namespace[name]
    return get


def callable_package(package: str, module: str) -> None:
    """Make `package` callable as the function of `module` named like it: `workbench.launch`
    and `workbench.rank` are the packages launch/ and rank/ and the functions `launch(fn)`
    and `rank()` (importing a subpackage makes it its parent's attribute of that name)."""
    name = package.rpartition(".")[2]

    class CallablePackage(types.ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return getattr(importlib.import_module(module), name)(*args, **kwargs)

        def __reduce__(self) -> tuple[Any, ...]:  # pickled by name, as a module is
            return importlib.import_module, (self.__name__,)

    sys.modules[package].__class__ = CallablePackage


__getattr__ = lazy_names(globals(), _WHERE)


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})


def load_ipython_extension(shell) -> None:
    """`%load_ext workbench`: the `%%ranks` cell magic (workbench/ui/ranks_magic.py)."""
    from workbench.ui.ranks_magic import load_ipython_extension as load

    load(shell)


def _register_magic() -> None:
    """`import workbench` in IPython registers `%%ranks` too (IPython already loaded)."""
    if "IPython" in sys.modules:
        from workbench.ui.ranks_magic import register_in_running_shell

        register_in_running_shell()


_register_magic()
