#!/usr/bin/env bash
# The supported torch range, both ends: every engine, one epoch at np=2, on the oldest and
# on the newest torch that pyproject.toml admits.
#
# Usage: bash benchmarks/torch_range.sh [--prepare] [VERSION ...]
#   VERSION    e.g. 2.9.1, in the range or not (default: the range's two ends)
#   --prepare  make the environments (downloads, Horovod's builds) and stop
#
# For each end it makes a scratch environment in .cache/torch-range/ (torch__2.7.0/, never
# .venv/): torch (the lower end exactly; for the upper end the newest release pip finds in
# the range), the workbench and its other dependencies (pip install -e . --no-deps, so
# that a release outside the range is the one tried), and Horovod built
# against that torch by scripts/build_horovod.sh, whose wheel cache keys by torch version.
# Where that torch sees no GPU, Horovod is built without GPU operations
# (WORKBENCH_HOROVOD_GPU=0): a CUDA build of torch needs nvcc of its own CUDA major version.
# An environment already made is reused. Then, in each, every training engine (the serial one
# at np=1) trains the default MLP on digits for one epoch on the CPU, and a table gives each
# run's status, samples/s, final loss, the largest difference of its final parameters from
# the torch engine's (every data-parallel engine at np=2 with batch b takes the same steps:
# the N x b invariant, test_engine.py; the serial engine, at np=1, is not compared) and, for
# the engines that count bytes (DDP and the sharded ones), the worst ratio of bytes held or
# sent to the cost model's (1.00 = exact). It exits non-zero if any run failed, any
# parameters differ by more than 1e-5, or any bytes are off by more than 5%.
#
# Cost: PyPI's Linux torch wheels are CUDA builds: a torch with its nvidia-* packages is
# about 3 GB to download (2.6.0: 2.9 GB) and 5.5 GB installed; plus two Horovod builds of
# about 2 minutes each on 2 cores, and about 20 s per run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BASE_PYTHON=${PYTHON:-python3}
OUT="$ROOT/.cache/torch-range"
# pyproject.toml's dependencies but torch (Python 3.10 has tomllib only inside pip).
DEPS_BUT_TORCH='
try: import tomllib
except ModuleNotFoundError: from pip._vendor import tomli as tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
print(*(d for d in deps if not d.startswith("torch")))'
mkdir -p "$OUT"

range=$(sed -n 's/^ *"torch\([<>=][^"]*\)",.*/\1/p' pyproject.toml)
[ -n "$range" ] || { echo "torch_range: no torch range in pyproject.toml" >&2; exit 1; }
lower=$(sed -n 's/.*>=\([0-9.]*\).*/\1/p' <<<"$range")
prepare=0
if [ "${1:-}" = --prepare ]; then prepare=1; shift; fi
if [ $# = 0 ]; then set -- "==$lower.0" "$range"; fi

# make_env SPEC: the environment of `torch$SPEC`, made once; prints its python.
make_env() {
    local spec=$1 label py version
    label=torch$(tr -c 'A-Za-z0-9.\n' '_' <<<"$spec")
    py="$OUT/$label/bin/python"
    if [ ! -x "$py" ] || [ ! -f "$OUT/$label/.made" ]; then
        echo "==> torch$spec: a new environment in $OUT/$label" >&2
        rm -rf "${OUT:?}/$label"
        "$BASE_PYTHON" -m venv "$OUT/$label"
        "$py" -m pip install -q --progress-bar off --upgrade pip setuptools wheel >&2
        "$py" -m pip install -q --progress-bar off "torch$spec" "packaging>=23" numpy >&2
        # The workbench without its torch requirement, so a release outside the range
        # stays the one installed (pip would replace it by one inside).
        "$py" -m pip install -q --progress-bar off $("$py" -c "$DEPS_BUT_TORCH") >&2
        "$py" -m pip install -q --progress-bar off --no-deps -e . >&2
        touch "$OUT/$label/.made"
    fi
    version=$("$py" -c 'import torch; print(torch.__version__)')
    if ! "$py" -c 'import horovod.torch' 2>/dev/null; then
        echo "==> Horovod against torch $version" >&2
        local gpu=1
        "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' || gpu=0
        PATH="$(dirname "$py"):$PATH" WORKBENCH_HOROVOD_GPU=$gpu \
            bash scripts/build_horovod.sh "$py" >&2 || true   # the table says it is missing
    fi
    echo "$py"
}

pythons=()
for spec in "$@"; do
    case "$spec" in [0-9]*) spec="==$spec" ;; esac
    pythons+=("$(make_env "$spec")")
done
[ "$prepare" = 0 ] || exit 0

status=0
for py in "${pythons[@]}"; do
    PATH="$(dirname "$py"):$PATH" "$py" - "$OUT/runs" <<'PYEOF' || status=1
"""Every training engine for one epoch at np=2 on this environment's torch: one table row each."""
import sys
import time
import warnings

import torch

from workbench.config import ENGINES, JobConfig
from workbench.engines import ENGINES as TABLE
from workbench.launch import start
from workbench.sharded.costmodel import STRATEGY_OF
from workbench.sharded.measured import comparison

warnings.simplefilter("ignore")          # a job's warnings: the table says what matters
failed, rows, models = 0, [], {}
print(f"\ntorch {torch.__version__} (Python {sys.version.split()[0]})")
print(f"{'engine':<11} {'status':<10} {'samples/s':>10} {'final loss':>11} "
      f"{'vs torch':>9} {'bytes/model':>12} {'wall s':>7}  note")
for engine in ENGINES:
    missing = TABLE[engine].available()
    if missing:
        rows.append((engine, "missing", "", "", "", "", missing))
        failed += 1
        continue
    cfg = JobConfig(engine=engine, np=1 if engine == "serial" else 2, epochs=1,
                    threads_per_rank=1, runs_dir=sys.argv[1])
    began = time.monotonic()
    job = start(cfg)
    outcome = job.wait(600)
    wall = time.monotonic() - began
    summary = job.summary or {}
    if outcome != "succeeded":
        failed += 1
        error = (summary.get("failure") or {}).get("error", outcome)
        rows.append((engine, outcome, "", "", "", f"{wall:.1f}", error))
        continue
    ratio = ""
    if engine in STRATEGY_OF:
        worst = max(comparison(job), key=lambda row: abs(row["ratio"] - 1))["ratio"]
        ratio = f"{worst:.3f}"
        failed += abs(worst - 1) > 0.05
    if engine != "serial":
        models[engine] = job.record().model_state()
    rows.append((engine, outcome, f"{summary.get('samples_per_s', 0):.0f}",
                 f"{summary.get('final_loss', float('nan')):.4f}", ratio, f"{wall:.1f}", ""))
for engine, outcome, rate, loss, ratio, wall, note in rows:
    differs = ""
    if engine in models and "torch" in models:
        ref = models["torch"]
        differs = max(float((models[engine][k] - ref[k]).abs().max()) for k in ref)
        failed += differs > 1e-5
        differs = f"{differs:.1e}"
    print(f"{engine:<11} {outcome:<10} {rate:>10} {loss:>11} {differs:>9} {ratio:>12} "
          f"{wall:>7}  {note}")
sys.exit(1 if failed else 0)
PYEOF
done
exit $status
