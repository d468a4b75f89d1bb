"""The one engine behind :meth:`Campaign.run`: every plan source (the fixed plan, adaptive rounds,
retries) feeds the same engine inside one frame (one lock, one store, one opening and clean-up of
the backends), on a scripted backend."""

import random
from collections import Counter

from labkit.errors import BenchmarkError
from labkit.run.campaign import Campaign
from labkit.workloads import Measurement, Workload
from tests.unit.test_reliability_campaign import FakeBackend

ADAPTIVE = {"factors": {"vcpus": [1, 2]}, "replications": {"min": 2, "max": 4, "target_ci": 1e-9}, "seed": 5}


class FailsThird(Workload):
    """Each configuration's third run fails, the others measure a random value (so no interval
    is ever narrow enough and adaptive rounds go on to ``max``)."""

    name = "fails-third"

    def __init__(self, **params):
        super().__init__(**params)
        self.calls: Counter = Counter()
        self.rng = random.Random(1)

    def run(self, instance, params):
        self.calls[instance.spec.vcpus] += 1
        if self.calls[instance.spec.vcpus] == 3:
            raise BenchmarkError("injected: the third run of this configuration fails")
        return [Measurement("wall_time_s", 1 + self.rng.random(), "s", instance.index)]


def test_retries_run_again_in_the_same_frame_and_rerun_a_failed_adaptive_run_under_its_own_id(tmp_path):
    be = FakeBackend()
    c = Campaign(
        ADAPTIVE, backend=be, workload=FailsThird(), campaign_id="t-engine", data_dir=tmp_path, progress=False
    )
    st = c.run(retries=2)
    runs, attempts = st.runs(), st.attempts()
    # rounds 1 and 2 added r003 and r004; r003 failed and ran again under its own id (a new
    # replicate r005 would be the adaptive rounds' answer to a forgotten run, not a retry)
    assert sorted(runs.run_id) == [f"c000{c}r00{r}" for c in (0, 1) for r in (1, 2, 3, 4)]
    assert set(runs.status) == {"ok"}
    assert sorted(attempts.run_id) == ["c0000r003", "c0001r003"] and set(attempts.status) == {"failed"}
    assert be.cleaned == [c.prefix]  # the backend was opened and cleaned once for every source
    assert len(be.destroyed) == 8 + 2


def test_retry_failed_reruns_stored_failures_of_adaptive_rounds(tmp_path):
    be = FakeBackend()
    wl = FailsThird()
    Campaign(
        ADAPTIVE, backend=be, workload=wl, campaign_id="t-engine", data_dir=tmp_path, progress=False
    ).run()
    st = Campaign(
        ADAPTIVE, backend=be, workload=wl, campaign_id="t-engine", data_dir=tmp_path, progress=False
    ).run(retry_failed=True)
    runs = st.runs()
    assert sorted(runs.run_id) == [f"c000{c}r00{r}" for c in (0, 1) for r in (1, 2, 3, 4)]
    assert set(runs.status) == {"ok"} and sorted(st.attempts().run_id) == ["c0000r003", "c0001r003"]


def test_hooks_must_be_run_hooks(tmp_path):
    import pytest

    from labkit.errors import ConfigError
    from labkit.run.hooks import NoiseNeighbour

    for bad, where in (
        (NoiseNeighbour(), "must be a list"),
        ([NoiseNeighbour(), object()], r"hooks\[1\]: object"),
        ("ksm", "must be a list"),
    ):
        with pytest.raises(ConfigError, match=where):
            Campaign(ADAPTIVE, backend=FakeBackend(), workload=FailsThird(), data_dir=tmp_path, hooks=bad)


def test_a_hook_that_refuses_fails_before_any_store_and_a_hooks_exit_runs_after_the_last_run(tmp_path):
    import contextlib

    import pytest

    from labkit.errors import ConfigError
    from labkit.run.hooks import RunHook
    from labkit.store import Store

    seen = []

    class Refuse(RunHook):
        def around_campaign(self, campaign):
            raise ConfigError("not on this host")

    class Watch(RunHook):
        @contextlib.contextmanager
        def around_campaign(self, campaign):
            yield
            with Store.for_campaign(tmp_path, "t-hook", readonly=True) as st:
                seen.append(len(st.runs()))  # every run, adaptive rounds included, stored by now

    with pytest.raises(ConfigError, match="not on this host"):
        Campaign(
            ADAPTIVE,
            backend=FakeBackend(),
            workload=FailsThird(),
            campaign_id="t-hook",
            data_dir=tmp_path,
            hooks=[Refuse()],
            progress=False,
        ).run()
    assert not (tmp_path / "t-hook" / "store.sqlite").exists()
    Campaign(
        ADAPTIVE,
        backend=FakeBackend(),
        workload=FailsThird(),
        campaign_id="t-hook",
        data_dir=tmp_path,
        hooks=[Watch()],
        progress=False,
    ).run()
    assert seen == [8]


def test_a_start_the_lock_refuses_enters_no_hook_and_hooks_run_inside_the_lock(tmp_path):
    """``around_campaign`` hooks run inside the campaign's lock (labkit.run.hooks): a second start
    of a running campaign fails on the lock without entering them (a KSM switch must not touch
    the host for a campaign that does not run), and a started campaign holds the lock while
    its hooks are entered and left."""
    import contextlib

    import pytest

    from labkit.core.lock import is_locked
    from labkit.errors import StoreError
    from labkit.run.hooks import RunHook

    entered: list[bool] = []

    class Probe(RunHook):
        def __init__(self, lock_path):
            self.lock_path = lock_path

        @contextlib.contextmanager
        def around_campaign(self, campaign):
            entered.append(is_locked(self.lock_path))
            yield
            entered.append(is_locked(self.lock_path))

    def campaign():
        c = Campaign(
            ADAPTIVE,
            backend=FakeBackend(),
            workload=FailsThird(),
            campaign_id="t-lock",
            data_dir=tmp_path,
            progress=False,
        )
        c.hooks.insert(0, Probe(c.lock_path))
        return c

    holder = campaign()._lock().acquire()  # the campaign "running" in another process
    try:
        with pytest.raises(StoreError, match="already running"):
            campaign().run()
        assert entered == []
    finally:
        holder.release()
    campaign().run()
    assert entered == [True, True]
