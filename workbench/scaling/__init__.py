"""Scaling lab: how much faster do more workers make a job, and where does the time go?

The pure arithmetic lives in modules that import neither torch nor bokeh, so notebooks and
exercise checkers can use them cheaply:

* :mod:`workbench.scaling.metrics`   speedup, efficiency, Karp–Flatt, Amdahl and Gustafson;
* :mod:`workbench.scaling.units`     "25Gbit/s", "5us", "4KB" and friends;
* :mod:`workbench.scaling.costmodel` the α–β cost of ring, Rabenseifner and parameter-server
  allreduce, and the fit of α and β to measured timings;
* :mod:`workbench.scaling.simulate`  predicted step time and efficiency for many workers,
  with presets for published setups.

The modules that run real jobs (``sweep``, ``bench``, ``allreduce_rank``) and the ones that
draw (``report``, ``timeline``) import the job engine and bokeh only when called.

Lessons it serves: notebooks/06_speedup_efficiency_scalability.ipynb and
notebooks/04_collectives.ipynb (allreduce timings).
"""
