"""python -m workbench.training.serial_rank

The sequential baseline, the distributed engines' loop in one process (`workbench run
--engine serial`, or by hand with its flags, recording in ./runs): with `--batch-size N·b`
it follows exactly the trajectory of N data-parallel ranks with batch b (docs/ARCHITECTURE.md).
"""

from workbench.models import make_optimizer
from workbench.rank.context import job_config, job_record, run_main
from workbench.training.loop import train
from workbench.training.results import evaluate_and_save, restore
from workbench.training.setup import build, pick_device, pin_cpu
from workbench.training.synchronizer import Synchronizer


def main() -> None:
    cfg = job_config("serial")  # the launcher's config.json, or `workbench run`'s flags
    ctx = job_record(cfg)       # the run's record: the launcher's, or a new one in ./runs
    pin_cpu(cfg, 0)  # its threads; one process has no other rank to keep off its cores
    setup = build(cfg, pick_device(cfg.device, 0))
    optimizer = make_optimizer(cfg.optimizer, setup.model.parameters(), cfg.lr,
                               cfg.momentum, cfg.weight_decay)
    setup.first_epoch = restore(ctx, setup.model, optimizer)  # 0 unless resuming
    sync = Synchronizer()
    evaluate_and_save(ctx, setup, sync, train(ctx, setup, optimizer, sync))


if __name__ == "__main__":
    run_main(main)
