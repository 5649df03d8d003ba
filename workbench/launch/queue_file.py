"""What the core queue's shared file, `cores.json`, may hold (see cores.py).

The file is writable by every user of the host, so nothing in it is trusted: its bytes are
parsed into the queue's state keeping only well-formed entries, and what was wrong is said.
Whether a well-formed entry's owner is alive and really made it is checked by cores.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

from workbench.launch import shared_file

MAX_STATE_BYTES = 1 << 20  # a queue of a few hundred jobs is some 100 KiB
_OWNER = re.compile(r"\d+:\d+(\.\d+)?")


def parse_state(data: bytes) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """The queue's state from the bytes of its file, and what was wrong with them.

    Only well-formed entries are kept, and of each only the fields the queue uses: the
    file is writable by every user, so nothing in it is trusted. An empty file (a new
    queue) is no problem.
    """
    state: dict[str, list[dict[str, Any]]] = {"held": [], "waiting": []}
    if len(data) > MAX_STATE_BYTES:
        return state, [f"is larger than {MAX_STATE_BYTES} bytes"]
    if not data.strip():
        return state, []
    try:
        doc = json.loads(data)
    except ValueError:  # UnicodeDecodeError is one too
        return state, ["is not valid JSON (garbage, or a crash while it was written)"]
    if not isinstance(doc, dict):
        return state, [f"holds a JSON {type(doc).__name__}, not the queue's object"]
    problems = [f"has an unknown key {key!r}" for key in doc if key not in state]
    for key in state:
        entries = doc.get(key, [])
        if not isinstance(entries, list):
            problems.append(f"has {key!r} that is not a list")
            continue
        for i, entry in enumerate(entries):
            clean, why = _entry(entry, key, state)
            if why:
                problems.append(f"has {key}[{i}] {why}")
            else:
                state[key].append(clean)
    return state, problems


def _entry(entry: Any, key: str, state: dict[str, list[dict[str, Any]]],
           ) -> tuple[dict[str, Any], str | None]:
    """(the entry's known fields, None) if it is well formed, else ({}, what is wrong)."""
    if not isinstance(entry, dict):
        return {}, "that is not an object"
    fields = {"run_id": str, "user": str, "owner": str, "proof": str, "since": (int, float),
              **({"cores": list} if key == "held" else {"n_cores": int})}
    for name, kind in fields.items():
        if not isinstance(entry.get(name), kind) or isinstance(entry.get(name), bool):
            return {}, f"without a valid {name!r}"
    if not _OWNER.fullmatch(entry["owner"]):
        return {}, "with an owner that is not 'pid:start time'"
    if not shared_file.PROOF_NAME.fullmatch(entry["proof"]):
        return {}, "with a proof that is not 'proof-<16 hex digits>'"
    if any(find(state[k], entry["run_id"]) for k in state):
        return {}, f"that repeats run {entry['run_id']!r}"
    if key == "waiting":
        return ({name: entry[name] for name in fields}, None) if entry["n_cores"] >= 0 else (
            {}, "asking for a negative number of cores")
    held = {c for e in state["held"] for c in e["cores"]}
    good = all(isinstance(c, int) and not isinstance(c, bool) and c >= 0
               for c in entry["cores"])
    if not good or len(set(entry["cores"])) < len(entry["cores"]) or held & set(entry["cores"]):
        return {}, "with cores that are not distinct core numbers free of other jobs"
    return {name: entry[name] for name in fields}, None


def find(entries: list[dict[str, Any]], run_id: str) -> dict[str, Any] | None:
    """The entry of run `run_id`, or None."""
    return next((e for e in entries if e["run_id"] == run_id), None)
