"""Names and addresses for the namespace hosts of the multi-host tests.

A test process names its bridge, veths and namespaces after its pid and takes a /24 of its
own. A test process that died before its clean-up (killed, or stopped by a timeout) may have
left some behind; pids are reused, so a later test process may carry the same name, and two
bridges on one /24 send one cluster's ssh to the other's bridge, where it is refused. So
whatever still carries this process's names is stale and removed first, and a /24 that is
still routed is never taken again. A host ends with `end_host`.
"""

from __future__ import annotations

import subprocess


def end_host(init: subprocess.Popen | None) -> None:
    """End a namespace host started as `unshare --pid --fork --kill-child ...`, and every
    process of its PID namespace. SIGKILL, not SIGTERM: `unshare --fork` blocks SIGTERM
    while it waits for its child; killed, it kills the namespace's init (--kill-child)."""
    if init is not None and init.poll() is None:
        init.kill()
        init.wait(timeout=10)


def quiet(*cmd: str) -> None:
    """Run a clean-up command, ignoring failures (the thing may already be gone)."""
    subprocess.run(cmd, capture_output=True, timeout=30)


def remove_stale(links: list[str], namespaces: list[str]) -> None:
    """Remove links and namespaces of these names, left by a dead process with our pid."""
    for netns in namespaces:
        quiet("ip", "netns", "del", netns)
    for link in links:
        quiet("ip", "link", "del", link)


def free_subnet(prefix: str, tag: int) -> str:
    """`prefix.N` (a /24) with N from `tag`, skipping any /24 already routed here."""
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    for i in range(250):
        subnet = f"{prefix}.{(tag + i) % 250 + 1}"
        if f"{subnet}.0/24 " not in routes:
            return subnet
    raise RuntimeError(f"no free {prefix}.N.0/24 for a test cluster: see `ip -4 route`")
