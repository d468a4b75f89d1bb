"""What the ``local`` backend's instances hide of the controller's data (:meth:`.local.LocalBackend.hidden_dirs`):
the data dirs of running campaigns and the newest recorded ones, a bounded set (:func:`data_dirs`),
and the signature of the records that list is made from (:func:`hidden_signature`)."""

from __future__ import annotations

import os

from ..errors import ConfigError, StoreError
from . import sandbox


def hidden_signature() -> tuple:
    """What :meth:`.local.LocalBackend.hidden_dirs` is made from, as (path, mtime, size, inode) of: the
    data-dir records, the registry directories (an entry added or removed changes its time) and
    the invoking users' homes (a secret made there changes its time). Equal: the same list."""
    from ..core import datadirs, registry

    paths = (
        [str(p) for p, _ in datadirs.sources()] + [str(d) for d in registry.dirs()] + sandbox.invoking_homes()
    )
    out: list[tuple] = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((p, st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append((p, None, None, None))
    return tuple(out)


#: recorded data dirs an instance hides at most, this user's and other users' each, besides the
#: running campaigns' (issue 47: one mount per data dir ever recorded made 5,000 planted records
#: cost a campaign 60 times its time). Defence in depth only: data dirs are 0700 and a workload
#: runs as an unprivileged uid, so a few mounts more or less change what it can read of none
HIDDEN_RECORDED = 16


def data_dirs() -> list[str]:
    """The data dirs an instance hides, a bounded set: the checkout's default, those of the
    campaigns running now (the registry: another user's only when that user owns them, and at
    most :data:`labkit.core.registry.MAX_FOREIGN_ENTRIES` a user), and the newest recorded ones
    (:func:`labkit.core.datadirs.recent`: up to :data:`HIDDEN_RECORDED` of this user's and as
    many of other users' own). Older data dirs are private (0700) to the user who ran them, and
    an instance's workload runs as another uid."""
    from ..core import datadirs, paths, registry

    found = []
    try:
        found.append(str(paths.data_dir()))
    except ConfigError:
        pass  # no checkout: no default data dir
    try:
        found += [e.data_dir for e in registry.running() if e.data_dir]
    except (StoreError, OSError):
        pass  # no readable registry: nothing registered
    found += datadirs.recent(HIDDEN_RECORDED)
    try:
        found.append(str(registry.run_dir()))
    except (StoreError, OSError):
        pass
    return found
