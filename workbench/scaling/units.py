"""Read the units people write: "25Gbit/s", "100Gb/s", "5us", "4KB", "44.5e6".

Conventions, stated once so nobody has to guess:

* **Bandwidth** uses decimal prefixes, as network vendors do: 25 Gbit/s = 25·10⁹ bits/s
  = 3.125·10⁹ bytes/s. A lower-case ``b`` (``Gb/s``, ``Gbit/s``, ``Gbps``) means bits, an
  upper-case ``B`` (``GB/s``, ``GBps``) means bytes. A bare number is bytes/s.
* **Message sizes** use binary prefixes, as nccl-tests and memory do: 4KB = 4096 bytes,
  1MB = 1048576 bytes (``KiB``/``MiB`` are accepted and mean the same). A bare number is bytes.
* **Durations**: ``ns``, ``us`` (or ``µs``), ``ms``, ``s``. A bare number is seconds.

Every parser returns plain SI values (bytes, bytes/s, seconds) and raises ``ValueError``
with a message that says what was wrong and shows a valid example.
"""

from __future__ import annotations

import re

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_DECIMAL = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_BINARY = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SECONDS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9}


def _split(text: str, what: str, example: str) -> tuple[float, str]:
    """Split "25Gbit/s" into (25.0, "Gbit/s"); raise a helpful ValueError otherwise."""
    match = re.fullmatch(_NUMBER + r"\s*(.*)", str(text).strip())
    if not match:
        raise ValueError(f"cannot read {what} {text!r}: expected a number and a unit, "
                         f"for example {example!r}")
    return float(match.group(1)), match.group(2).strip()


def parse_bandwidth(text: str | float) -> float:
    """Return a bandwidth in bytes per second, e.g. ``parse_bandwidth("25Gbit/s") == 3.125e9``."""
    if isinstance(text, int | float):
        return _check_positive(float(text), "bandwidth", "25Gbit/s")
    value, unit = _split(text, "bandwidth", "25Gbit/s")
    match = re.fullmatch(r"([kKmMgGtT]?)(bit|b|B|byte)(?:/s|ps)?", unit) if unit else None
    if unit == "":
        return _check_positive(value, "bandwidth", "25Gbit/s")
    if not match:
        raise ValueError(
            f"cannot read bandwidth {text!r}: unknown unit {unit!r}. Use bits per second "
            "('25Gbit/s', '100Gb/s', '10Gbps') or bytes per second ('12GB/s', '900MB/s')"
        )
    prefix, kind = match.group(1).lower(), match.group(2)
    bytes_per_unit = 1.0 if kind in ("B", "byte") else 1.0 / 8.0
    return _check_positive(value * _DECIMAL[prefix] * bytes_per_unit, "bandwidth", "25Gbit/s")


def parse_duration(text: str | float) -> float:
    """Return a duration in seconds, e.g. ``parse_duration("5us") == 5e-6``."""
    if isinstance(text, int | float):
        return _check_non_negative(float(text), "duration", "5us")
    value, unit = _split(text, "duration", "5us")
    if unit not in _SECONDS:
        raise ValueError(f"cannot read duration {text!r}: unknown unit {unit!r}. "
                         "Use ns, us, ms or s, for example '5us' or '0.62s'")
    return _check_non_negative(value * _SECONDS[unit], "duration", "5us")


def parse_size(text: str | float) -> int:
    """Return a size in bytes with binary prefixes, e.g. ``parse_size("4KB") == 4096``."""
    if isinstance(text, int | float):
        return int(_check_positive(float(text), "size", "4KB"))
    value, unit = _split(text, "size", "4KB")
    match = re.fullmatch(r"([kKmMgGtT]?)(?:i?B)?", unit)
    if not match:
        raise ValueError(f"cannot read size {text!r}: unknown unit {unit!r}. "
                         "Use B, KB, MB or GB, for example '4KB' or '64MB'")
    size = value * _BINARY[match.group(1).lower()]
    if size != int(size):
        raise ValueError(f"size {text!r} is not a whole number of bytes")
    return int(_check_positive(size, "size", "4KB"))


def parse_count(text: str | float) -> float:
    """Return a plain count such as a number of parameters: "44.5e6", "44.5M", "1.2B" (billion)."""
    if isinstance(text, int | float):
        return _check_positive(float(text), "count", "44.5e6")
    value, unit = _split(text, "count", "44.5e6")
    scale = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9}.get(unit.lower())
    if scale is None:
        raise ValueError(f"cannot read count {text!r}: unknown suffix {unit!r}. "
                         "Write it as '44.5e6' or '44.5M'")
    return _check_positive(value * scale, "count", "44.5e6")


def parse_list(text: str, parse, what: str) -> list:
    """Parse a comma-separated list such as "1,2,4" or "4KB,1MB" with ``parse`` per item."""
    items = [item.strip() for item in str(text).split(",") if item.strip()]
    if not items:
        raise ValueError(f"empty list of {what}: give at least one, for example '1,2,4'")
    return [parse(item) for item in items]


def parse_workers(text: str) -> list[int]:
    """Parse "1,2,4" into [1, 2, 4]; every entry must be a whole number ≥ 1."""
    def one(item: str) -> int:
        if not item.isdigit() or int(item) < 1:
            raise ValueError(f"bad worker count {item!r}: use whole numbers ≥ 1, e.g. '1,2,4'")
        return int(item)

    return parse_list(text, one, "worker counts")


def format_bytes(n: float) -> str:
    """Format a byte count with binary prefixes: 4096 → "4KB", 1.5·2²⁰ → "1.5MB"."""
    for prefix, scale in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if n >= scale:
            return f"{n / scale:g}{prefix}"
    return f"{n:g}B"


def _check_positive(value: float, what: str, example: str) -> float:
    if not value > 0:
        raise ValueError(f"{what} must be greater than zero, got {value:g} (example: {example!r})")
    return value


def _check_non_negative(value: float, what: str, example: str) -> float:
    if value < 0:
        raise ValueError(f"{what} must not be negative, got {value:g} (example: {example!r})")
    return value
