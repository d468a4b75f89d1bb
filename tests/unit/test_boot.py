"""The boot runner's typed hand-off (labkit.run.boot): the settings a boot takes from its campaign,
checked when made; a runner that needs no campaign; the tool versions read once per campaign; the
deadline of a step (a preparation's error passed on, not taken for a timeout); the run-output
setting as a parameter of the campaign, the environment only its fallback.

The small in-memory backend of ``test_reliability_campaign`` stands in for a real one.
"""

from __future__ import annotations

import pytest

from labkit.core.instance import InstanceSpec
from labkit.design import Design
from labkit.errors import CommandError, ConfigError
from labkit.run.boot import BootRunner, BootSettings, keep_output
from labkit.run.campaign import Campaign
from labkit.run.hooks import RunHook
from labkit.store import Store
from tests.unit.test_reliability_campaign import FakeBackend, Quick

DESIGN = Design.from_dict({"factors": {"vcpus": [1, 2]}, "replications": 2, "seed": 3})


class Counted(Quick):
    """Counts how often its tool versions are read."""

    def __init__(self, **params):
        super().__init__(**params)
        self.versions_read = 0

    def version(self, instance):
        self.versions_read += 1
        return {"quick": "1"}


@pytest.mark.parametrize(
    "change, says",
    [
        ({"defaults": {"vcpus": 1}}, "BootSettings.defaults must be an InstanceSpec, got dict"),
        ({"prefix": ""}, "BootSettings.prefix must be a non-empty string, got ''"),
        ({"run_timeout": -1}, "BootSettings.run_timeout (seconds)"),
    ],
)
def test_settings_are_checked_when_made(change, says):
    good = {"workload": Quick(), "defaults": InstanceSpec(), "prefix": "labkit-t-boot--", "run_timeout": 60}
    BootSettings(**good)
    with pytest.raises(ConfigError) as err:
        BootSettings(**{**good, **change})
    assert says in str(err.value)


def test_a_runner_needs_settings_not_a_campaign(tmp_path):
    c = Campaign(
        DESIGN,
        backend=FakeBackend(),
        workload=Quick(),
        campaign_id="t-boot",
        data_dir=tmp_path,
        progress=False,
    )
    with pytest.raises(ConfigError, match="BootRunner needs BootSettings, got Campaign"):
        BootRunner(c)  # type: ignore[arg-type]


def test_a_boot_runs_from_its_settings_alone():
    """No campaign: provision, run, tear down one boot of two runs with the settings' workload,
    defaults and prefix; the hooks given are entered around each run."""
    seen = []

    class Stamp(RunHook):
        def around_run(self, ctx):
            seen.append(ctx.run.run_id)
            return super().around_run(ctx)

    plan = Design.from_dict(
        {"factors": {"vcpus": [1, 2]}, "replications": 2, "seed": 1, "runs_per_instance": 2}
    ).plan()
    runs = [r for r in plan if r.levels["vcpus"] == 2]  # one boot: the configuration's two replicates
    backend = FakeBackend()
    settings = BootSettings(
        workload=Quick(),
        defaults=InstanceSpec(memory_mb=256),
        prefix="labkit-t-alone--",
        hooks=[Stamp()],
        run_timeout=30,
    )
    out = list(BootRunner(settings).measure_boot(runs, backend))
    assert [r.run_id for r, _ in out] == [r.run_id for r in runs] == seen
    assert [m.status for _, m in out] == ["ok", "ok"]
    assert [m.metadata["boot_position"] for _, m in out] == [1, 2]
    assert out[0][1].metadata["spec"]["memory_mb"] == 256 and out[0][1].metadata["spec"]["vcpus"] == 2
    assert len({r.boot_group for r in runs}) == 1
    assert len(backend.destroyed) == 1 and backend.destroyed[0].startswith("labkit-t-alone--")  # one boot
    assert isinstance(settings.hooks, tuple)


def test_the_campaigns_runners_take_its_settings_as_they_are_and_share_its_versions(tmp_path):
    wl = Counted()
    c = Campaign(
        DESIGN,
        backend=FakeBackend(),
        workload=wl,
        campaign_id="t-boot",
        data_dir=tmp_path,
        progress=False,
        run_timeout=90,
        telemetry=None,
    )
    extra = RunHook()
    c.hooks.insert(0, extra)  # as a benchmark or a test does before run()
    runner = c.boots()
    s = runner.settings
    assert (s.workload, s.defaults, s.prefix, s.run_timeout) == (wl, c.defaults, c.prefix, 90)
    assert s.hooks == tuple(c.hooks) and s.hooks[0] is extra
    first, second = DESIGN.plan()[:2]
    backend = FakeBackend()
    assert runner.measure(first, backend, versions_key="here").status == "ok"
    assert c.boots().measure(second, backend, versions_key="here").status == "ok"
    assert wl.versions_read == 1  # read once per key for the whole campaign
    assert c.boots().measure(second, backend, versions_key="there").metadata["versions"] == {"quick": "1"}
    assert wl.versions_read == 2


def test_an_error_while_preparing_within_the_deadline_fails_the_run_with_that_error(tmp_path):
    class BadPrepare(Quick):
        def prepare(self, instance):
            raise CommandError("no such tool: quick")

    settings = BootSettings(
        workload=BadPrepare(), defaults=InstanceSpec(), prefix="labkit-t-prep--", run_timeout=30
    )
    run = DESIGN.plan()[0]
    out = BootRunner(settings).measure(run, FakeBackend())
    assert out.status == "failed" and out.error == "CommandError: no such tool: quick"


def test_run_output_is_a_parameter_the_environment_its_fallback(tmp_path, monkeypatch):
    def camp(**kw):
        return Campaign(
            DESIGN,
            backend=FakeBackend(),
            workload=Quick(),
            campaign_id="t-boot",
            data_dir=tmp_path,
            progress=False,
            **kw,
        )

    monkeypatch.delenv("LABKIT_RUN_OUTPUT", raising=False)
    assert camp().run_output == "all"
    monkeypatch.setenv("LABKIT_RUN_OUTPUT", "off")
    assert camp().run_output == "off"
    assert camp(run_output="failed").run_output == "failed"  # the parameter wins
    with pytest.raises(ConfigError, match="run_output='some': use one of all, failed, off"):
        camp(run_output="some")


@pytest.mark.parametrize(
    "policy, kept", [("all", ["c0001r001", "c0001r002"]), ("failed", ["c0001r002"]), ("off", [])]
)
def test_keep_output_keeps_as_the_policy_says(tmp_path, policy, kept):
    with Store.for_campaign(tmp_path, "t-keep") as st:
        keep_output(st, "c0001r001", "ok", "$ true\n", policy)
        keep_output(st, "c0001r002", "failed", "$ false\n", policy)
        keep_output(st, "c0001r003", "failed", "", policy)  # nothing to keep
        assert st.run_outputs() == kept


def test_labkit_run_passes_run_output_to_the_campaign_not_through_the_environment(tmp_path, monkeypatch):
    import os

    import labkit.run.campaign as campaign_module
    from labkit import cli

    seen: dict = {}

    class Made(Exception):
        pass

    def record(*args, **kwargs):
        seen.update(kwargs)
        raise Made

    monkeypatch.setattr(campaign_module, "Campaign", record)
    monkeypatch.delenv("LABKIT_RUN_OUTPUT", raising=False)
    design = tmp_path / "d.yaml"
    design.write_text("factors:\n  vcpus: [1, 2]\nseed: 1\n")
    with pytest.raises(Made):
        cli.main(
            [
                "run",
                str(design),
                "--workload",
                "nqueens",
                "--run-output",
                "failed",
                "--data-dir",
                str(tmp_path),
            ]
        )
    assert seen["run_output"] == "failed" and "LABKIT_RUN_OUTPUT" not in os.environ
