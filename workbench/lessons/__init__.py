"""Helpers for the curriculum notebooks (``notebooks/00_*.ipynb`` ... ``09_*.ipynb``).

The notebooks stay short: what they compute lives in the concept folders (``training``,
``scaling``, ``synchronization``, ``model_parallel``), and the few things only a lesson needs
live here:

* :mod:`.show`          tables and multi-line charts of lesson results, and waiting for a panel
  without blocking the kernel;
* :mod:`.sgd`           one-process mini-batch SGD on the digits, gradient noise and the
  "average of shard gradients = gradient of the global batch" check (notebooks 01 and 02);
* :mod:`.runs`          reading two runs back to compare them (notebook 02's invariant);
* :mod:`.pages`           the text and code of each notebook, which :mod:`workbench.notebooks`
  turns into ``notebooks/0*.ipynb``.

Lessons it serves: notebooks/00_welcome.ipynb to
notebooks/09_review.ipynb.
"""
