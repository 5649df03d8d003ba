#!/usr/bin/env bash
# GPU check: run on a machine with one or more NVIDIA GPUs, after `make setup` with a CUDA
# build of PyTorch (and `make horovod`, which then builds Horovod with NCCL).
#
# Usage: bash benchmarks/gpu_check.sh        (PYTHON=... to use another interpreter)
#        EXPECTED_BUSBW_GBPS=400 bash benchmarks/gpu_check.sh   (your interconnect's figure)
#
# What it runs and prints, in order (N = the number of visible GPUs):
#  1. `workbench doctor`; fails if it is not ready, or if Horovod has no NCCL.
#  2. Throughput: a CNN on synthetic images with --device cuda, on both engines (torch =
#     DDP over NCCL, horovod = Horovod over NCCL) at np=1 and np=N: samples/s of each run,
#     each rank's device (every rank must have a GPU of its own), the clock the ranks used
#     (must be CUDA events), and the efficiency samples/s(N) / (N x samples/s(1)).
#  3. The N x b invariant on GPU: N ranks with batch b end with the same parameters as
#     one process with batch N*b, to 1e-4 in float32 and 1e-5 in float64, on both engines
#     and on the sharded engines (zero1, zero2, fsdp: NCCL on cuda:<local rank>), whose
#     bytes held and sent per rank must also be the cost model's within 5%.
#     Section 2 runs the sharded engines too.
#  4. busbw (with N >= 2): `workbench bench allreduce --device cuda` on both engines, the
#     best busbw over 1 MB..256 MB against the NCCL bus bandwidth expected for the
#     interconnect (0.8 x the GPU's NVLink bandwidth per direction from `nvidia-smi nvlink
#     -s`, else 0.75 x the PCIe link's; EXPECTED_BUSBW_GBPS overrides); fails below half.
#  5. The compute/sync split (with N >= 2): a Horovod job with its timeline; the exposed
#     synchronization per step measured by CUDA events must lie between 0 and the time per
#     step that Horovod's timeline shows communicating (negotiation + allreduce), + 0.5 ms.
#  6. The workbench's loop against a hand-written one, at np=1 (CNN width 128, batch 256):
#     in one torch job and one horovod job, each rank trains with the workbench's loop and
#     with a plain DDP (Horovod) loop in turn, 12 pairs of 128-step epochs
#     (benchmarks/loop_overhead.py); the median ratio of samples/s must be at least 0.90.
# Then a summary of every figure, and "GPU CHECK PASSED" (exit 0) or "GPU CHECK FAILED"
# with each failure (exit 1). It runs on the machine's own torch (any release of the range
# pyproject.toml declares), as it is: what it cannot run there (Horovod missing or built
# without NCCL, a torch without NCCL, busbw on one GPU) is skipped and named under "NOT
# RUN" in the summary, and an engine that fails is a failure, not the end of the check.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
export PATH="$(cd "$(dirname "$PY")" && pwd):$PATH"    # horovodrun and workbench
exec "$PY" - <<'PYEOF'
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import torch

from workbench.config import ConfigError, JobConfig
from workbench.launch import devices
from workbench.launch import start
from workbench.records import events, of_kind
from workbench.scaling.bench import BenchError, run_allreduce_bench
from workbench.scaling.timeline import load_timeline

FAILURES: list[str] = []
FIGURES: list[str] = []
NOT_RUN: list[str] = []
RUNS = tempfile.mkdtemp(prefix="gpu-check-")
ENGINES = ("torch", "horovod")
SHARDED = ("zero1", "zero2", "fsdp")   # workbench/sharded/: NCCL on cuda:<local rank>


def section(title: str) -> None:
    print(f"\n== {title}", flush=True)


def fail(message: str) -> None:
    FAILURES.append(message)
    print(f"  FAIL: {message}", flush=True)


def not_run(what: str, why: str) -> None:
    NOT_RUN.append(f"{what}: {why}")
    print(f"  NOT RUN: {what}: {why}", flush=True)


def figure(text: str) -> None:
    FIGURES.append(text)
    print(f"  {text}", flush=True)


def run(cfg: JobConfig, what: str, timeout_s: float = 600):
    """Start and wait for one job; None (and a failure) if it was refused or did not succeed."""
    try:
        job = start(cfg)
    except ConfigError as exc:
        fail(f"{what}: refused: {exc}")
        return None
    status = job.wait(timeout_s)
    if status == "running":
        job.stop()
        status = "timed out"
    if status != "succeeded":
        failure = (job.summary or {}).get("failure") or {}
        fail(f"{what}: {status}: {failure.get('error')}")
        print("    " + "\n    ".join(str(failure.get("log_tail") or "").splitlines()[-15:]))
        return None
    return job


def check_ranks(job, what: str) -> None:
    """Every rank on a GPU of its own, timed by CUDA events."""
    ready = {e["rank"]: e for e in events(job.metrics(), "ready")}
    used = [ready[r]["device"] for r in sorted(ready)]
    print(f"    ranks' devices {used}, clock: {ready[0].get('timing')}")
    if len(set(used)) != len(used) or not all(d.startswith("cuda") for d in used):
        fail(f"{what}: ranks do not each have a GPU of their own: {used}")
    if not all("CUDA events" in str(e.get("timing")) for e in ready.values()):
        fail(f"{what}: the ranks did not time with CUDA events")


# ------------------------------------------------------------------------------ 0. premise
gpus = devices.gpu_count()
if gpus == 0:
    print(f"GPU CHECK FAILED: no CUDA GPU is visible (torch {torch.__version__}, CUDA "
          f"{torch.version.cuda}): run it on a GPU machine, with a CUDA build of PyTorch")
    sys.exit(1)
# GPU names from the driver: asking torch would create a CUDA context in this process,
# which would sit on GPU 0 (memory and all) while the jobs run.
names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], text=True,
                       capture_output=True, timeout=60).stdout.strip().splitlines()
nccl = torch.cuda.nccl.version()
nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {nccl}, {gpus} GPU(s): "
      f"{', '.join(names)}")
print(f"runs in {RUNS}")
counts = sorted({1, gpus})

# ------------------------------------------------------------------------------ 1. doctor
section("1. workbench doctor")
doctor = subprocess.run([sys.executable, "-m", "workbench.cli", "doctor"], text=True,
                        capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
print(doctor.stdout + doctor.stderr)
report = json.loads(subprocess.run([sys.executable, "-m", "workbench.cli", "doctor", "--json"],
                                   text=True, capture_output=True, timeout=300,
                                   stdin=subprocess.DEVNULL).stdout)
# What this machine cannot run, said once and skipped below: Horovod jobs without a
# Horovod that has NCCL operations, the torch.distributed engines without NCCL.
CANNOT: dict[str, str] = {}
horovod = report.get("horovod", {})
if not horovod.get("installed"):
    CANNOT["horovod"] = f"Horovod is not usable ({horovod.get('error')}): make horovod"
elif not (horovod.get("tensor_operations") or {}).get("nccl"):
    CANNOT["horovod"] = "Horovod was built without NCCL: make horovod (with nvcc on PATH)"
if not report.get("torch", {}).get("backends", {}).get("nccl"):
    for engine in ("torch", *SHARDED):
        CANNOT[engine] = f"torch {torch.__version__} has no NCCL back-end"
for engine, why in CANNOT.items():
    not_run(f"every {engine} job", why)
broken = [c["name"] for c in report.get("checks", []) if c.get("status") == "fail"
          and not c["name"].lower().startswith("horovod")]
if broken:
    fail(f"workbench doctor: not ready: {', '.join(broken)} (see above)")

# ------------------------------------------------------------------------------ 2. throughput
section(f"2. samples/s at np = {', '.join(map(str, counts))}, both engines (CNN, "
        "synthetic images, --device cuda)")
throughput: dict[tuple[str, int], float] = {}
for engine in [e for e in ENGINES + SHARDED if e not in CANNOT]:
    for np in counts:
        what = f"{engine} np={np}"
        cfg = JobConfig(engine=engine, np=np, device="cuda", model="cnn", width=128,
                        dataset="synthetic-images", samples=32768, batch_size=256, epochs=3,
                        lr=0.05, runs_dir=RUNS, stall_timeout=300, name=f"tput-{engine}")
        job = run(cfg, what)
        if job is None:
            continue
        throughput[engine, np] = job.summary["samples_per_s"]
        figure(f"{what}: {throughput[engine, np]:,.0f} samples/s  (run {job.run_id})")
        check_ranks(job, what)
    if gpus > 1 and (engine, 1) in throughput and (engine, gpus) in throughput:
        eff = throughput[engine, gpus] / (gpus * throughput[engine, 1])
        figure(f"{engine} efficiency at np={gpus}: {eff:.2f}  (samples/s at np={gpus} / "
               f"({gpus} x samples/s at np=1))")
    elif gpus == 1:
        print(f"  {engine} efficiency: n/a with 1 GPU (np=all is np=1)")

# ------------------------------------------------------------------------------ 3. invariant
section(f"3. the N x b invariant on GPU: np={gpus} x batch 16 == 1 process x batch {16 * gpus}")
TOLERANCE = {"float32": 1e-4, "float64": 1e-5}
small = dict(model="mlp", width=64, dataset="digits", epochs=1, device="cuda",
             runs_dir=RUNS, stall_timeout=300)
for dtype, tol in TOLERANCE.items():
    serial = run(JobConfig(engine="serial", np=1, batch_size=16 * gpus, dtype=dtype,
                           name="serial", **small), f"serial {dtype}")
    if serial is None:
        continue
    reference = serial.record().model_state()
    for engine in [e for e in ENGINES + SHARDED if e not in CANNOT]:
        what = f"{engine} np={gpus} {dtype}"
        job = run(JobConfig(engine=engine, np=gpus, batch_size=16, dtype=dtype,
                            name=f"inv-{engine}", **small), what)
        if job is None:
            continue
        state = job.record().model_state()
        err = max(float((state[k].cpu() - reference[k].cpu()).abs().max()) for k in reference)
        figure(f"invariant {what}: max |parameter difference| {err:.2e} (bound {tol:g})")
        if not err < tol:
            fail(f"invariant {what}: parameters differ by {err:.2e} >= {tol:g}")
        if engine in SHARDED or engine == "torch":
            from workbench.sharded.measured import comparison
            off = [r for r in comparison(job) if abs(r["ratio"] - 1) > 0.05]
            figure(f"bytes {what}: {len(off)} of rank fields off the cost model by > 5%")
            if off:
                fail(f"bytes {what}: measured vs predicted: {off[:3]}")

# ------------------------------------------------------------------------------ 4. busbw
section("4. allreduce bus bandwidth (workbench bench allreduce --device cuda)")


def expected_busbw() -> tuple[float | None, str]:
    """NCCL's allreduce busbw to expect, GB/s, and how it was estimated."""
    if os.environ.get("EXPECTED_BUSBW_GBPS"):
        return float(os.environ["EXPECTED_BUSBW_GBPS"]), "EXPECTED_BUSBW_GBPS"
    try:
        links = subprocess.run(["nvidia-smi", "nvlink", "-s", "-i", "0"], text=True,
                               capture_output=True, timeout=60).stdout
        per_link = [float(x) for x in re.findall(r"Link \d+: ([\d.]+) GB/s", links)]
        if per_link:
            return 0.8 * sum(per_link), (f"NVLink: {len(per_link)} links, {sum(per_link):.0f} "
                                         "GB/s per direction; expect 0.8 x that")
        pcie = subprocess.run(["nvidia-smi", "--query-gpu=pcie.link.gen.max,pcie.link.width.max",
                               "--format=csv,noheader,nounits", "-i", "0"], text=True,
                              capture_output=True, timeout=60).stdout
        gen, width = (int(x) for x in pcie.strip().split(","))
        lane = {3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}.get(gen)   # GB/s per lane
        if lane:
            return 0.75 * lane * width, (f"PCIe gen {gen} x{width}: {lane * width:.0f} GB/s "
                                         "per direction; expect 0.75 x that")
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return None, f"interconnect unknown ({exc}); set EXPECTED_BUSBW_GBPS"
    return None, "interconnect unknown; set EXPECTED_BUSBW_GBPS"


expected, how = expected_busbw()
print(f"  expected busbw: {f'{expected:.0f} GB/s' if expected else 'unknown'} ({how})")
if gpus < 2:
    print("  busbw: n/a with 1 GPU (an allreduce over one GPU moves no bytes between GPUs)")
for engine in [e for e in ENGINES if e not in CANNOT] if gpus >= 2 else ():
    try:
        res = run_allreduce_bench(engine, gpus, [1 << 20, 16 << 20, 256 << 20], runs_dir=RUNS,
                                  budget_s=1.0, device="cuda", timeout_s=600)
    except (ConfigError, BenchError) as exc:
        fail(f"busbw {engine}: {exc}")
        continue
    for r in res["rows"]:
        print(f"    {engine} {r['size_bytes'] >> 20:>4} MB: {1e3 * r['time_s']:8.3f} ms, "
              f"algbw {r['algbw_GBps']:7.1f} GB/s, busbw {r['busbw_GBps']:7.1f} GB/s")
    best = max(r["busbw_GBps"] for r in res["rows"])
    ratio = f" = {best / expected:.2f} of the expected {expected:.0f} GB/s" if expected else ""
    figure(f"busbw {engine} np={gpus}: {best:.1f} GB/s{ratio}")
    if expected and best < 0.5 * expected:
        fail(f"busbw {engine}: {best:.1f} GB/s is under half the expected {expected:.0f} GB/s")

# ------------------------------------------------------------------------------ 5. split
section("5. compute/sync split (CUDA events) against Horovod's timeline")


def union_s(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of the (start, end) spans."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


if gpus < 2:
    print("  n/a with 1 GPU: Horovod does not allreduce with one rank")
elif "horovod" in CANNOT:
    not_run("the compute/sync split", CANNOT["horovod"])
else:
    job = run(JobConfig(engine="horovod", np=gpus, device="cuda", model="cnn", width=128,
                        dataset="synthetic-images", samples=16384, batch_size=256, epochs=1,
                        max_steps=40, timeline=True, runs_dir=RUNS, stall_timeout=300,
                        name="split"), f"horovod np={gpus} with timeline")
    if job is not None:
        steps = [s for s in of_kind(job.metrics(), "step") if s["rank"] == 0]
        sync_ms = 1e3 * sum(s["sync_s"] for s in steps) / len(steps)
        compute_ms = 1e3 * sum(s["compute_s"] for s in steps) / len(steps)
        tl = load_timeline(job.run_dir / "timeline.json")
        spans = [(n.start, n.end) for n in tl.negotiations] + \
                [(o.start, o.end) for o in tl.operations if o.name == "ALLREDUCE"]
        comm_ms = 1e3 * union_s(spans) / len(steps)
        figure(f"split horovod np={gpus}: per step, compute {compute_ms:.2f} ms and exposed "
               f"sync {sync_ms:.2f} ms (CUDA events); Horovod's timeline shows "
               f"{comm_ms:.2f} ms communicating (negotiation + allreduce, overlapping compute)")
        if not 0 <= sync_ms <= comm_ms + 0.5:
            fail(f"split: exposed sync {sync_ms:.2f} ms per step is outside [0, the "
                 f"timeline's {comm_ms:.2f} ms + 0.5 ms]")

# ------------------------------------------------------------------------------ 6. overhead
section("6. the workbench's loop against a hand-written one (np=1, CNN width 128, batch 256)")
sys.path.insert(0, "benchmarks")
from loop_overhead import SETTINGS, compare, median_interval  # noqa: E402

for engine in [e for e in ENGINES if e not in CANNOT]:
    fields = {**SETTINGS, "engine": engine, "np": 1, "device": "cuda", "model": "cnn",
              "width": 128, "dataset": "synthetic-images", "samples": 32768,
              "batch_size": 256, "max_steps": 128, "stall_timeout": 300}
    try:
        wb_rate, hand_rate, ratios = compare(fields, pairs=12, runs_dir=RUNS)
    except SystemExit as exc:                     # a job that failed: named, and on
        fail(f"overhead {engine}: {exc}")
        continue
    median, (low, high) = statistics.median(ratios), median_interval(ratios)
    figure(f"overhead {engine} np=1: workbench {wb_rate:,.0f} samples/s, by hand "
           f"{hand_rate:,.0f} samples/s, workbench / hand-written loop per pair "
           f"{' '.join(f'{r:.3f}' for r in ratios)}, median {median:.3f} (95% interval "
           f"{low:.3f}-{high:.3f}; target >= 0.90)")
    if median < 0.90:
        fail(f"overhead {engine}: the workbench's loop runs at {median:.3f}x a "
             "hand-written one, under 0.90")

# ------------------------------------------------------------------------------ summary
section("summary")
for line in FIGURES:
    print(f"  {line}")
if NOT_RUN:
    print(f"\nNOT RUN on this machine ({len(NOT_RUN)}):")
    for line in NOT_RUN:
        print(f"  - {line}")
if FAILURES:
    print(f"\nGPU CHECK FAILED ({len(FAILURES)}):")
    for message in FAILURES:
        print(f"  - {message}")
    sys.exit(1)
print("\nGPU CHECK PASSED")
PYEOF
