"""A run that continues another from its checkpoint (`workbench run --resume RUN_ID`),
merged before any rank starts (launch/starting.py, rank/context.py). See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import dataclasses
import json

from workbench.config import ConfigError, JobConfig
from workbench.records.private import read_own
from workbench.records.runs import load_run

CHECKPOINT = "checkpoint.pt"
#: Fields a resumed run does not take from the run it continues: the fault that ended it
#: (inheriting it would end the resumed run again) and where it resumes from.
NOT_INHERITED = ("fail_rank", "fail_at_step", "resume", "runs_dir")


def apply_resume(cfg: JobConfig) -> JobConfig:
    """`cfg` continuing `cfg.resume` (a run id or folder): fields not passed (`cfg.given`)
    are inherited; `ConfigError` if no such run of ours saved a checkpoint."""
    if not cfg.resume:
        return cfg
    bad = f"invalid --resume {cfg.resume!r}"
    try:
        record = load_run(cfg.resume, cfg.runs_dir)
    except FileNotFoundError as exc:
        raise ConfigError(f"{bad}: {exc}") from None
    config = record.run_dir / "config.json"
    try:  # its configuration (env, sbatch_arg, hosts) and checkpoint would be trusted
        data = read_own(config, record.run_dir)
    except OSError as exc:  # ForeignRecord is one
        raise ConfigError(f"{bad}: {exc}; resume only your own runs") from None
    if not (record.run_dir / CHECKPOINT).exists():
        raise ConfigError(f"{bad}: run {record.run_id} saved no checkpoint (run it with "
                          "--checkpoint-every N to save one every N epochs)")
    try:
        old = json.loads(data)
    except ValueError as exc:
        raise ConfigError(f"{bad}: {config}: not valid JSON ({exc})") from None
    if not isinstance(old, dict):
        raise ConfigError(f"{bad}: {config} does not hold a configuration (a JSON object)")
    fields = {f.name for f in dataclasses.fields(JobConfig)}
    inherited = {k: v for k, v in old.items()
                 if k in fields and k not in NOT_INHERITED and k not in cfg.given}
    return dataclasses.replace(cfg, **inherited, resume=str(record.run_dir))
