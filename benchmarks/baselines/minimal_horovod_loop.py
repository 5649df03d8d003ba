"""Baseline for throughput: the smallest hand-written Horovod loop for one configuration.

Same data, model, sample order, batch and core placement as the workbench's rank loop,
without its metrics, timing split or records. Prints rank 0's samples/s (all ranks) over
epochs >= 1.
"""

import json
import sys
import time
from dataclasses import replace

import horovod.torch as hvd
import torch
from torch import nn

from workbench.config import PRESETS, JobConfig
from workbench.data import load_dataset
from workbench.models import build_model
from workbench.training.setup import pin_cpu
from workbench.training.sharding import epoch_order, shard, steps_per_epoch

cfg = JobConfig(**{**PRESETS[sys.argv[1]], "epochs": int(sys.argv[2]), "threads_per_rank": 1})
hvd.init()
pin_cpu(replace(cfg, np=hvd.size()), hvd.local_rank())  # the workbench's core binding
data = load_dataset(cfg.dataset, samples=cfg.samples, features=cfg.features, seed=cfg.seed)
torch.manual_seed(cfg.seed)
model = build_model(cfg.model, tuple(data.x.shape[1:]), data.n_classes, cfg.width)
opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
steps = steps_per_epoch(len(data), hvd.size(), cfg.batch_size)
rates = []
for epoch in range(cfg.epochs):
    order, t0 = epoch_order(len(data), cfg.seed, epoch), time.perf_counter()
    for step in range(steps):
        idx = shard(order, step, hvd.rank(), hvd.size(), cfg.batch_size)
        opt.zero_grad()
        nn.functional.cross_entropy(model(data.x[idx]), data.y[idx]).backward()
        opt.step()
    rates.append(steps * cfg.batch_size * hvd.size() / (time.perf_counter() - t0))
if hvd.rank() == 0:
    print(json.dumps({"samples_per_s": sum(rates[1:]) / len(rates[1:])}))
