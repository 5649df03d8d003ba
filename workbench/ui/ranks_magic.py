"""`%%ranks`: run a notebook cell on every rank of a pool of warm ranks, as ipyparallel's `%%px`.

    import workbench                      # registers the magic in IPython (or %load_ext workbench)

    %%ranks -n 2 --engine torch
    import torch, torch.distributed as dist
    import workbench
    t = torch.tensor([workbench.rank() + 1.0])
    dist.all_reduce(t)
    print("rank", workbench.rank(), "sum", t.item())

Every rank runs the cell's code in a fresh namespace, with torch imported and the process
group joined (rank/pool.py); `%%ranks --keep` cells share one namespace instead, so a model
built in one is there in the next (until the pool restarts its ranks). What the ranks print
appears under the cell as it comes, each line labelled with its rank (`[rank 1] sum 3.0`,
ui/rank_output.py). The cell blocks until
every rank has finished; interrupting the kernel (the stop button) interrupts every rank. A
rank that raises makes the cell fail with that rank's traceback.

The first `%%ranks` cell starts the pool (seconds); later ones reuse it (milliseconds). The
pool is `workbench.ranks(np, engine)`, shared with your own `pool.run(fn)` calls.
"""

from __future__ import annotations

import sys
from typing import Any

from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from workbench.launch.pool import ranks


class RanksError(RuntimeError):
    """A `%%ranks` cell failed on a rank; shown as that rank's own traceback."""

    def __init__(self, summary: dict[str, Any]) -> None:
        failure = summary.get("failure") or {}
        rank = failure.get("rank")
        who = f"rank {rank}" if rank is not None else "the pool"
        super().__init__(f"{summary.get('status')} on {who}: {failure.get('error')}")
        self.traceback = failure.get("traceback") or ""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows in place of this frame's traceback: the rank's own."""
        return [f"[{self}]", *self.traceback.rstrip().splitlines()]


@magics_class
class RanksMagics(Magics):
    """The `%%ranks` cell magic."""

    @magic_arguments()
    @argument("-n", "--np", type=int, default=2, help="how many ranks (default 2)")
    @argument("--engine", default="horovod", help="horovod (default) or torch")
    @argument("--runs-dir", default="runs", help="where each run is recorded")
    @argument("--keep", action="store_true",
              help="run in the namespace that --keep cells share (names stay for the next)")
    @cell_magic
    def ranks(self, line: str, cell: str) -> None:
        """Run the cell on every rank of a pool of warm ranks (see workbench.ui.ranks_magic)."""
        args = parse_argstring(self.ranks, line)
        pool = ranks(args.np, args.engine, args.runs_dir)
        if not pool.ready:
            print(f"starting {args.np} warm {args.engine} ranks (once per kernel) ...",
                  flush=True)
        job = pool.run_code(cell, keep=args.keep)
        follower = _follow(job)
        job.wait()  # Ctrl-C / the kernel's stop button stops the call on every rank
        if follower is not None:
            follower.finished.wait(5)
        else:
            print(_as_text(job), end="")
        if job.status != "succeeded":
            raise RanksError(job.summary or {"status": job.status})


def _follow(job: Any) -> Any:
    """Show the ranks' output live under the cell (in a kernel), else None."""
    from workbench.launch.waiting import in_kernel

    if not in_kernel():
        return None
    from workbench.ui.rank_output import RankOutput

    return RankOutput(job).show()


def _as_text(job: Any) -> str:
    """Each rank's output, labelled, for a terminal IPython (no widgets there)."""
    record = job.record()
    return "".join(f"[rank {r}] {line}\n" for r in range(job.world_size)
                   for line in record.log(r).splitlines())


def load_ipython_extension(shell: Any) -> None:
    """`%load_ext workbench`: register `%%ranks`."""
    shell.register_magics(RanksMagics)


def register_in_running_shell() -> None:
    """Register `%%ranks` in the IPython shell this process runs, if it runs one."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None:
        load_ipython_extension(shell)
