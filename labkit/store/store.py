"""The :class:`Store` class: a campaign's results, one SQLite file (:mod:`labkit.store`). Its
parts live in the modules named for what they own: the file and its checks
(:mod:`labkit.store.sqlite`), the campaign's settings (:mod:`labkit.store.campaign_meta`), the
runs (:mod:`labkit.store.runs`), the telemetry (:mod:`labkit.store.samples`), the tidy table
(:mod:`labkit.store.tidy`), the exports (:mod:`labkit.store.export`), the fleet's leases
(:mod:`labkit.store.leases`) and each run's command output (:mod:`labkit.store.run_output`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import StoreError
from .export import Exports
from .leases import Leases
from .run_output import RunOutputs
from .samples import Samples

if TYPE_CHECKING:
    import pandas as pd

    from ..design import Design


class Store(Exports, Samples, Leases, RunOutputs):
    """A campaign's results. Open with ``Store(path)`` or ``Store.for_campaign(data_dir, id)``.

    ``readonly`` opens without writing anything; ``group_readable`` makes new files 0640
    (directory 0750) instead of 0600/0700; ``allow_new`` lets a new, empty store be created
    beside a ``results.csv`` left by an earlier one (which the next export overwrites).
    Opening is O(1) in the store's size: a read-only open checks the file's header against its
    size (a truncated file is refused) and nothing more; opening for writing also checks the
    integrity of every page (``PRAGMA quick_check``, seconds at 100,000 runs), and ``labkit
    check ID`` (:mod:`labkit.store.check`) does so on demand. Damage a read-only open did not
    see surfaces as a :class:`StoreError` when the damaged rows are read.
    """

    @classmethod
    def for_campaign(cls, data_dir: str | Path, campaign_id: str, **kw: Any) -> Store:
        return cls(Path(data_dir) / campaign_id / "store.sqlite", **kw)


def load_results(data_dir: str | Path, campaign_id: str) -> pd.DataFrame:
    """Tidy results of a campaign for view mode: the store if present, else results.parquet/csv."""
    import pandas as pd

    base = Path(data_dir) / campaign_id
    if (base / "store.sqlite").exists():
        with Store(base / "store.sqlite", readonly=True) as st:
            return st.tidy()
    for name, reader in (("results.parquet", pd.read_parquet), ("results.csv", pd.read_csv)):
        if (base / name).exists():
            return reader(base / name)
    raise StoreError(
        f"no results for campaign {campaign_id!r} under {base} "
        "(expected store.sqlite, results.parquet or results.csv)"
    )


def load_design(data_dir: str | Path, campaign_id: str) -> Design:
    """The :class:`~labkit.design.Design` a stored campaign ran (for view mode)."""
    from ..design import Design

    path = Path(data_dir) / campaign_id / "store.sqlite"
    with Store(path, readonly=True) as st:
        meta = st.meta()
    if "design" not in meta:
        raise StoreError(f"{path}: no design recorded in this store")
    return Design.from_dict(meta["design"], source=str(path))
