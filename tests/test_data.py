"""Datasets are made in their training dtype, without full-size float64 copies, and
prepared once per host when the ranks share a cache folder."""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest
import torch

import workbench.data as data
from workbench.data import load_dataset


def test_standardised_blockwise_like_the_textbook_formula(monkeypatch) -> None:
    """Several blocks of rows: the result equals (x - mean) / std computed in float64."""
    monkeypatch.setattr(data, "BLOCK_BYTES", 8 * 8 * 100)     # 100 rows of 8 features
    samples = 1234
    ds = load_dataset("synthetic", samples=samples, features=8, seed=3)
    x, _, _ = data._synthetic_table(samples, 8, 3)
    expected = (x - x.mean(axis=0)) / x.std(axis=0)
    assert ds.x.dtype == torch.float32 and ds.y.dtype == torch.int64
    assert float(np.abs(ds.x.numpy() - expected).max()) < 1e-5
    ds64 = load_dataset("synthetic", samples=samples, features=8, seed=3, dtype=torch.float64)
    assert ds64.x.dtype == torch.float64
    assert float(np.abs(ds64.x.numpy() - expected).max()) < 1e-12


def test_pixels_on_disk_never_become_a_float64_array(tmp_path, monkeypatch) -> None:
    """A uint8 image set is loaded into float32 with peak memory well under what a float64
    copy would add (tracemalloc sees numpy's allocations): the stored pixels, the float32
    result and block-sized temporaries, where a float64 copy alone is twice the result."""
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(20_000, 28, 28), dtype=np.uint8)
    np.savez(tmp_path / "mnist.npz", x=pixels, y=rng.integers(0, 10, size=20_000))
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path))
    float32_bytes, float64_bytes = pixels.size * 4, pixels.size * 8
    tracemalloc.start()
    try:
        ds = load_dataset("mnist")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ds.x.shape == (20_000, 1, 28, 28) and ds.x.dtype == torch.float32
    assert peak < pixels.nbytes + float32_bytes + float64_bytes / 4, (
        f"peak {peak / 1e6:.0f} MB for a {float32_bytes / 1e6:.0f} MB float32 result")
    flat = pixels.reshape(len(pixels), -1).astype(np.float64)
    expected = (flat - flat.mean(0)) / np.where(flat.std(0) > 0, flat.std(0), 1.0)
    assert float(np.abs(ds.x.numpy().reshape(len(flat), -1) - expected).max()) < 1e-5


def test_ranks_of_a_host_prepare_the_data_once(tmp_path, monkeypatch) -> None:
    calls = []
    raw = data._raw

    def counted(*args):
        calls.append(args)
        return raw(*args)

    monkeypatch.setattr(data, "_raw", counted)
    results: list = [None] * 4

    def rank(r: int) -> None:
        results[r] = load_dataset("synthetic", samples=512, features=4, seed=1,
                                  cache_dir=tmp_path)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1, f"prepared {len(calls)} times"
    load_dataset("synthetic", samples=512, features=4, seed=2, cache_dir=tmp_path)
    assert len(calls) == 2, "other settings are prepared on their own"
    fresh = load_dataset("synthetic", samples=512, features=4, seed=1)
    for ds in results:
        assert torch.equal(ds.x, fresh.x) and torch.equal(ds.y, fresh.y)
        assert ds.n_classes == fresh.n_classes
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")], "no half-written file"


@pytest.mark.parametrize("name", ["digits", "synthetic-images"])
def test_cached_and_fresh_loads_agree(tmp_path, name) -> None:
    first = load_dataset(name, samples=64, cache_dir=tmp_path)
    again = load_dataset(name, samples=64, cache_dir=tmp_path)
    fresh = load_dataset(name, samples=64)
    assert torch.equal(first.x, fresh.x) and torch.equal(again.x, fresh.x)
    assert torch.equal(again.y, fresh.y) and again.n_classes == fresh.n_classes


def test_digits_are_scikit_learns_without_importing_it() -> None:
    """Read from the file scikit-learn ships: the same arrays as its loader, in a process
    that never imports scikit-learn or SciPy (a second of CPU in every rank)."""
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    x, y, k = data._digits()
    bunch = load_digits()
    assert k == 10 and np.array_equal(x, bunch.data) and np.array_equal(y, bunch.target)
    assert y.dtype == np.int64
    probe = ("import sys; from workbench.data import load_dataset; load_dataset('digits'); "
             "print(sorted(m for m in ('sklearn', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == "[]"
