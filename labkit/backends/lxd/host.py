"""What this host sees of an ``lxd`` container (:mod:`labkit.backends.lxd`; LXD's socket is
local): its memory cgroup's OOM counter (:func:`memory_cgroup_file`), the processes of its payload
cgroup (:func:`payload_pids`), its init bringing loopback up (:func:`wait_init`) and the host's
cgroup version."""

from __future__ import annotations

import os
from pathlib import Path

from ...core.waiting import wait_until

#: /proc/<pid>/cmdline of the init once loopback is up (it has exec'd sleep)
INIT_READY = b"sleep\0infinity\0"
CGROUP_ROOT = "/sys/fs/cgroup"


def memory_cgroup_file(proc_cgroup: str, name: str) -> str | None:
    """The host path of the OOM counter of container ``name``, from its init's /proc/<pid>/cgroup.

    cgroup v1: ``<root>/memory/<path>/memory.oom_control``; v2: ``<root>/<path>/memory.events``.
    The path is cut at ``lxc.payload.<name>``: processes of exec land there too.
    """
    v1: str | None = None
    v2: str | None = None
    for line in proc_cgroup.splitlines():
        _, controllers, group = line.split(":", 2)
        if "memory" in controllers.split(","):
            v1 = group
        elif controllers == "":
            v2 = group
    path = v1 if v1 is not None else v2
    if path is None:
        return None
    payload = f"lxc.payload.{name}"
    if payload in path:
        path = path[: path.index(payload) + len(payload)]
    if v1 is not None:
        return f"{CGROUP_ROOT}/memory{path}/memory.oom_control"
    return f"{CGROUP_ROOT}{path}/memory.events"


def payload_pids(name: str) -> list[int] | None:
    """The pids in container ``name``'s payload cgroup and its children on this host
    (``lxc.payload.<name>`` at the root of the memory hierarchy on cgroup v1, of the unified one
    on v2, where the init may sit in a child such as ``init.scope``), or None when there is no
    such group here (LXD elsewhere or laid out otherwise)."""
    for top in (f"{CGROUP_ROOT}/memory/lxc.payload.{name}", f"{CGROUP_ROOT}/lxc.payload.{name}"):
        if not os.path.isdir(top):
            continue
        pids = []
        for d, _, _ in os.walk(top):
            try:
                pids += [int(p) for p in Path(d, "cgroup.procs").read_text().split()]
            except OSError:
                continue  # a child group removed meanwhile
        return pids
    return None


def wait_init(model, name: str, patience_s: float = 30.0) -> None:
    """Wait until the container's init has brought loopback up (it then runs ``sleep``),
    seen on the host from its /proc/<pid>/cmdline; BackendError after ``patience_s``.

    The init is found in the container's payload cgroup (nothing else runs there yet); only
    where that group is not on this host is its pid asked of LXD, whose state call also
    computes the instance's disk and network usage."""
    found = payload_pids(name)
    by_group = found is not None
    pids: list[int] = found if found is not None else [model.state().pid]
    looks = 0

    def ready() -> bool:
        nonlocal pids, looks
        looks += 1
        if looks > 1 and by_group:
            pids = payload_pids(name) or []
        for pid in pids:
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes() == INIT_READY:
                    return True
            except OSError:
                continue  # a short-lived process of the init (ip) that has ended
        return False

    wait_until(
        ready,
        timeout=patience_s,
        interval=0.005,
        what=f"the init of {name} to bring loopback up (LXD)",
        detail=lambda: f"processes left in it: {pids or 'none'}",
    )


def cgroup_version() -> int:
    return 2 if os.path.exists(f"{CGROUP_ROOT}/cgroup.controllers") else 1
