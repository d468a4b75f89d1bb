"""A small campaign store as labkit writes it, for the tests of issue 47 (store versions, malformed
rows, ``labkit check``, files on a shared machine) and reliability/security_files.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

CID = "c-versions"
FACTORS = {"vcpus": [1, 2], "affinity": ["floating", "pinned"]}
#: the run the tests tamper with
BAD_RUN = "c0001r002"


def make_store(data: str | Path, cid: str = CID) -> Path:
    """``data/cid/store.sqlite``: 2 x 2 configurations x 2 replicates of metric ``t_s`` (the
    workload's response), one fingerprint. Returns the store's path."""
    from labkit.design import Design
    from labkit.store import Store

    design = Design.from_dict({"factors": FACTORS, "replications": 2, "seed": 1})
    path = Path(data) / cid / "store.sqlite"
    with Store(path) as st:
        st.set_meta(
            campaign_id=cid,
            design=design.to_dict(),
            backend="local",
            workload={"name": "nqueens", "response": "t_s"},
        )
        st.add_fingerprint("fp1", {"kernel": "6.1"})
        for run in design.plan():
            st.record_run(
                run,
                status="ok",
                started=f"2026-01-01T00:00:{run.order:02d}+00:00",
                duration_s=1.0,
                measurements=[
                    SimpleNamespace(
                        instance=0, metric="t_s", unit="s", value=10.0 + 3 * run.config + 0.1 * run.replicate
                    )
                ],
                metadata={"host": "local"},
                fingerprint_id="fp1",
            )
    return path


def bundle_member_modes(data: Path, out: Path) -> dict[str, int]:
    """A store made in ``data`` (:func:`make_store`), bundled to ``out`` under umask 022 (files on
    disk 0644): each member's name -> its st_mode as the zip records it."""
    import os
    import zipfile

    from labkit.report import write_bundle

    make_store(data)
    old = os.umask(0o022)
    try:
        bundle = write_bundle(data, CID, out)
    finally:
        os.umask(old)
    with zipfile.ZipFile(bundle) as z:
        return {i.filename: i.external_attr >> 16 for i in z.infolist()}
