#!/usr/bin/env bash
# GPU check: on a CUDA machine, run np=1 and np=2 on both engines (ranks may share one GPU)
# and print the device each rank used and the samples/s of each run.
#
# Usage: bash benchmarks/gpu_check.sh   (after `make setup`; uses .venv/bin/python)
# What it checks: each rank takes the GPU of its local rank (cuda:local_rank % GPUs), torch
# jobs use NCCL, Horovod uses its GPU operations when built with them (gloo otherwise), and
# step timings wait for CUDA (torch.cuda.synchronize) before reading the clock.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" - <<'PYEOF'
import json
import tempfile

import torch

import workbench
from workbench.records import events

if not torch.cuda.is_available():
    raise SystemExit("gpu_check: no CUDA device visible to torch; nothing to check here")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s):"
      f" {torch.cuda.get_device_name(0)}; NCCL available: {torch.distributed.is_nccl_available()}")
try:
    import horovod.torch as hvd
    print(f"Horovod: NCCL built {hvd.nccl_built()}, gloo built {hvd.gloo_built()}")
except ImportError as exc:
    print(f"Horovod not importable: {exc}")

runs = tempfile.mkdtemp()
for engine in ("torch", "horovod"):
    for np in (1, 2):
        cfg = workbench.JobConfig.from_preset("compute-bound", engine=engine, np=np, epochs=2,
                                              samples=4096, runs_dir=runs)
        try:
            job = workbench.start(cfg)
        except workbench.ConfigError as exc:
            print(f"{engine} np={np}: skipped ({exc})")
            continue
        status = job.wait(600)
        devices = sorted({(e["rank"], e["device"]) for e in events(job.metrics(), "ready")})
        s = job.summary
        print(f"{engine:8s} np={np}: {status:9s} devices {devices}  "
              f"{s['samples_per_s']:,.0f} samples/s  (final loss {s['final_loss']})")
        if status != "succeeded":
            print(json.dumps(s.get("failure"), indent=2)[:2000])
PYEOF
