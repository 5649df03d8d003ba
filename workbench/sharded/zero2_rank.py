"""torchrun --standalone --nproc-per-node 2 -m workbench.sharded.zero2_rank

One rank of a ZeRO-2 job, started by `torchrun`: by the workbench (`workbench run --engine
zero2`), or by hand as above, with any flag of `workbench run`; then the ranks keep their
record in ./runs themselves. The steps are in zero_rank.py, shared with ZeRO-1; the
optimizer is zero2.py's.
"""

from workbench.rank.context import run_main
from workbench.sharded import zero_rank


def main() -> None:
    zero_rank.main("zero2")


if __name__ == "__main__":
    run_main(main)
