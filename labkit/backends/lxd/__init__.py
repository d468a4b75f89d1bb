"""LXD backend (pylxd): one system container per instance, no NIC, hard limits.

Mapping of an :class:`~labkit.core.instance.InstanceSpec` (docs/design.md, "Instances")::

    pinned     limits.cpu = "0,1"  (a set; one CPU is written "3-3": LXD reads "3" as a count)
    floating   limits.cpu.allowance = "<vcpus*100>ms/100ms", no limits.cpu: any host CPU,
               capped at vcpus CPUs' worth of time (a bare count "2" would make LXD pin
               the container to 2 CPUs of its choosing, which is not floating)
    memory     limits.memory = "<memory_mb>MiB", limits.memory.enforce = hard,
               limits.memory.swap = false
    network    no profile, no NIC: the only device is the root disk on the storage pool;
               on a run's private network: a host bridge without uplink, NAT, DHCP or DNS
               (``lk<8 hex>``, as on ``local``) and a bridged NIC ``eth0`` (host end
               ``lk<8 hex>h<i>``) given its address and /etc/hosts by exec

The container's init brings loopback up, then execs ``sleep infinity`` (the
image has no init system, and none is needed): no exec is spent on loopback.
Each command runs through pylxd's ``Instance.execute`` on a
thread, as its own session (:mod:`..containers`), so ``_wait`` can time out and
``_kill`` can SIGKILL the session from a second exec. An exec whose websockets
could not be connected (LXD starts the command only once they are) is sent again
(:func:`execute`). OOM kills are read on the
host from the container's memory cgroup (LXD's socket is local), since an
unprivileged container does not see it.

Names: LXD instance names are host names, so ``_`` is refused (a campaign id
with ``_`` cannot run on LXD: a ConfigError says so). Mapping ``_`` to ``-``
would let campaign ``a-b``'s cleanup remove campaign ``a_b``'s instances.

The root disk lives on the default profile's pool (the set-up makes a btrfs pool
on a loop file: instances are snapshots, not copies); its driver is in the
fingerprint. An unprivileged instance is copied from the image's pre-shifted base
(:mod:`.base`), so LXD does not shift its files' owners at start.

>>> be = get_backend("lxd")            # image alias labkit-debian-12 by default
"""

from .api import (
    EXEC_ATTEMPTS,
    START_HINT,
    default_socket,
    execute,
    in_websocket_connect,
    instance_busy,
    sdk,
    socket_hint,
)
from .backend import LxdBackend
from .config import DEFAULT_IMAGE, INIT_CMD, INIT_SCRIPT, cpu_set, instance_config, lxd_prefix
from .host import CGROUP_ROOT, INIT_READY, memory_cgroup_file
from .instance import LxdInstance, lxd_stats

__all__ = [
    "CGROUP_ROOT",
    "DEFAULT_IMAGE",
    "EXEC_ATTEMPTS",
    "INIT_CMD",
    "INIT_READY",
    "INIT_SCRIPT",
    "START_HINT",
    "LxdBackend",
    "LxdInstance",
    "cpu_set",
    "default_socket",
    "execute",
    "in_websocket_connect",
    "instance_busy",
    "instance_config",
    "lxd_prefix",
    "lxd_stats",
    "memory_cgroup_file",
    "sdk",
    "socket_hint",
]
