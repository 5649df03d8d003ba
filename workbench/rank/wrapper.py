"""Every rank the workbench starts runs here, in its context (protocol.py): the rank wrapper.

    python -m workbench.rank.wrapper --module workbench.training.ddp_rank  # a rank module
    python -m workbench.rank.wrapper --script train.py a b  # train.py, argv [train.py, a, b]
    python -m workbench.rank.wrapper                        # the function in user/function.pkl
    python -m workbench.rank.wrapper --fork 3               # the function on 3 forked ranks

It saves a function's value and keeps only your frames in a traceback. See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import cloudpickle

from workbench.rank.by_value import load_function
from workbench.rank.protocol import ENV_FILE, ENV_RUN_DIR, RankContext, attach, launcher_identity
from workbench.records.private import MAX_RETURN_BYTES, read_own
from workbench.records.store import atomic_file, make_folder

#: What a traceback leaves out in front of your code: the workbench's frames (its launching, an
#: exercise's checker) and the importers' (runpy, importlib, "<frozen ...>" or not); in front of
#: the workbench's own code (a lab's function, a rank module), only this folder's and theirs.
_WORKBENCH = os.path.join(Path(__file__).resolve().parents[1], "")  # ends in a separator
_IMPORTERS = (runpy.__file__, "<frozen runpy>", os.path.join(Path(importlib.__file__).parent, ""),
              "<frozen importlib")
_LAUNCHING = (os.path.join(Path(__file__).resolve().parent, ""), *_IMPORTERS)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--fork"]:
        fork_ranks(int(argv[1]))
    if argv[:1] in (["--module"], ["--script"]):
        run_rank(lambda ctx: run_as_main(argv[1], argv[2:], argv[0] == "--module"),
                 own_code=argv[0] == "--script")
    else:
        run_rank(lambda ctx: load_function(ctx.run_dir)())


def run_rank(body: Callable[[RankContext], Any], own_code: bool = True) -> None:
    """One rank: `body(ctx)` in its context; your own code's (`own_code`) value is saved."""
    if ENV_RUN_DIR not in os.environ:
        raise SystemExit("workbench.rank.wrapper runs the ranks of a workbench job; "
                         "start a rank module by hand with python -m MODULE")
    load_env_file()  # the job's secret --env values, from their 0600 file
    with RankContext(Path(os.environ[ENV_RUN_DIR]), *launcher_identity()) as ctx:
        value = run_attached(ctx, body, own_code)
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        if own_code:
            save_result(ctx.run_dir, ctx.rank, value)


def load_env_file(environ: dict[str, str] | None = None) -> None:
    """Add the variables of the 0600 file ENV_FILE names to os.environ, else exit in one line."""
    environ = os.environ if environ is None else environ
    if not environ.get(ENV_FILE):
        return
    path = Path(environ[ENV_FILE])
    try:
        data = read_own(path, path.parent, secret=True)
        environ.update({str(k): str(v) for k, v in json.loads(data).items()})
    except (OSError, ValueError, AttributeError) as exc:
        raise SystemExit(f"workbench: cannot read the job's variables from {path}: {exc}") from None


def run_attached(ctx: RankContext, body: Callable[[RankContext], Any], own_code: bool) -> Any:
    """`body(ctx)` with `ctx` attached; an error carries its traceback cut to your frames."""
    attach(ctx)
    try:
        return body(ctx)
    except BaseException as exc:
        exc.rank_traceback = user_traceback(exc, own_code)
        raise
    finally:
        attach(None)  # the context closes next: nothing may report into it after


def fork_ranks(size: int) -> NoReturn:
    """The `fork` engine's launcher: load the function and torch once, fork N ranks (safe: no
    thread, no GPU yet); exits 1 if any failed. Why: docs/ARCHITECTURE.md, "The labs' processes"."""
    import torch.distributed  # noqa: F401  (imported once here, not once per rank)

    call = load_function(Path(os.environ[ENV_RUN_DIR]))
    children = {}
    for rank in range(size):
        pid = os.fork()
        if pid == 0:
            os.environ.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank))
            _forked(call)
        children[pid] = rank
    failed = False
    for _ in children:
        pid, status = os.wait()
        if (code := os.waitstatus_to_exitcode(status)) != 0:
            print(f"rank {children[pid]} (pid {pid}) exited with code {code}", flush=True)
            failed = True
    sys.exit(1 if failed else 0)


def _forked(call: Callable[[], Any]) -> NoReturn:
    """A forked rank: `run_rank`, then `os._exit`, never a return into the loop."""
    code = 1
    try:
        run_rank(lambda ctx: call())
        code = 0
    except BaseException as error:
        if not hasattr(error, "rank_traceback"):  # not in its exit record: say it here
            traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_as_main(target: str, args: list[str], module: bool) -> None:
    """`python target args...` (or with `module`, `python -m`); `sys.exit(0)` is success."""
    sys.argv = [target, *args]
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, str(Path(target).parent))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise


def save_result(run_dir: Path, rank: int, value: Any) -> None:
    """Pickle the return value to results/rank<k>.pkl, atomically; at most MAX_RETURN_BYTES."""
    try:
        data = cloudpickle.dumps(value)
    except Exception as exc:
        raise TypeError(f"rank {rank} returned a {type(value).__name__} that cannot be pickled"
                        f" ({exc}): return numbers, lists, dicts or tensors") from None
    if len(data) > MAX_RETURN_BYTES:
        raise ValueError(f"rank {rank} returned {len(data) / 2**20:,.0f} MiB, more than the "
                         f"{MAX_RETURN_BYTES >> 20} MiB a return value may hold (each goes through "
                         "your notebook's memory): save it to a file and return its path")
    path = run_dir / "results" / f"rank{rank}.pkl"
    make_folder(path.parent)
    with atomic_file(path) as f:
        f.write(data)


def user_traceback(exc: BaseException, own_code: bool = True) -> str:
    """`exc`'s traceback from your own code's first frame (`own_code`), else past the launching."""
    stack = traceback.extract_tb(exc.__traceback__)
    first = next((i for i, frame in enumerate(stack) if own_code and
                  not frame.filename.startswith((_WORKBENCH, *_IMPORTERS))), None)
    if first is None:   # the workbench's own code failed: keep it, from the first frame past
        first = next((i for i, frame in enumerate(stack)   # the launching machinery
                      if not frame.filename.startswith(_LAUNCHING)), 0)  # (or it failed: all)
    report = traceback.TracebackException.from_exception(exc)
    report.stack = traceback.StackSummary.from_list(stack[first:])
    return "".join(report.format())


if __name__ == "__main__":
    try:
        main()
    except BaseException as error:
        if not hasattr(error, "rank_traceback"):
            raise
        # Already in the exit record and the log: a second, full traceback would bury it.
        sys.exit(error.code if isinstance(error, SystemExit) else 1)
