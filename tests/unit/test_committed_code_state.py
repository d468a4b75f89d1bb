"""The code state of every committed campaign (issue 42, item 1): each is run from a clean commit, or
from a checkout whose uncommitted diff its store keeps. The campaigns committed before labkit
recorded diffs (a bare ``+dirty``: the code that measured them could not be rebuilt) were all re-run
from clean commits; the last, interconnect-libvirt-nics, on 2026-11-30."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.store import Store
from labkit.store.codestate import code_state

DATA = Path(__file__).resolve().parents[2] / "data"

STORES = sorted(p.parent.name for p in DATA.glob("*/store.sqlite"))


def kind(campaign: str) -> str:
    with Store(DATA / campaign / "store.sqlite", readonly=True) as st:
        return code_state(st).kind


@pytest.mark.parametrize("campaign", STORES)
def test_each_committed_campaign_records_code_that_can_be_rebuilt(campaign):
    found = kind(campaign)
    assert found in ("clean", "dirty with diff"), (
        f"{campaign}: code state {found!r}; commit a campaign run from a clean commit (labkit show "
        f"{campaign} prints its code state)"
    )


def test_every_study_campaign_is_among_those_checked():
    # the parametrized test above sees every store under data/: the studies' campaigns among them
    assert {
        "interconnect-libvirt-nics",
        "deployments-ksm",
        "pipeline",
        "deployments-cpu",
        "deployments-linpack",
        "deployments-network",
        "deployments-stream",
    } <= set(STORES)
