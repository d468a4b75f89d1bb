"""Instance reuse on libvirt: the campaign time to reach a target CI half-width, fresh VMs per run
against ``runs_per_instance`` k chosen by :func:`labkit.stats.runs_needed`.

Three real campaigns of one design (N-queens, 1 thread, 1 vCPU, factor ``affinity: [floating,
pinned]``) run on the backend (default libvirt):

1. **pilot**: ``--pilot-boots`` boots of ``--pilot-k`` runs per configuration. From it, the costs
   (a run inside a boot: the median stored duration of the runs between a boot's first and last;
   a boot: the rest of a boot's summed durations, i.e. provisioning, preparing, the first run's
   hooks and the teardown) and the plan of Kalibera & Jones (ISMM 2013) for the target: from the
   pilot's wall times (levels ``instance`` > ``run_id``, components estimated within each
   configuration: ``within="affinity"``), :func:`runs_needed` gives k (runs per boot, capped by ``--k-max``) and the boots expected.
2. **fresh** (``runs_per_instance: 1``) and 3. **reuse** (``runs_per_instance: k``) run at the
   same time, interleaved (the arm with less campaign time so far takes the next step: one run,
   or one boot of k runs), each until *both* configuration means' 95 % CIs are at most
   ``--target`` (relative half-width) or its cap (``--max-fresh`` runs / ``--max-boots`` boots per
   configuration) is reached; at least ``--min-units`` runs (fresh) or boots (reuse) per
   configuration. A fresh run is one independent unit (t with n - 1 df over its runs); with
   reuse the unit is the boot: its k runs share a VM, so the interval is t with b - 1 df over
   the b boot means (the error a reused design must use; runs of one boot are not independent).

Printed per arm: boots, runs, campaign time (the stored durations of its runs: everything a run
holds, boots, hooks, workload and teardown; and the wall time of its ``Campaign.run`` calls,
which adds the store and the backend being opened for each interleaved step), the phases (a
boot's first run, a later run with its workload and its dead time, the last with the teardown),
the CI half-width reached per configuration, and the mean wall time by position in a boot (a
position effect would show there). Then the ratio reuse / fresh of the campaign times to the
target (issue 32's target: <= 0.5), also with the pilot added to reuse. No assertion: this
prints figures. ``--data-dir`` keeps the three stores (default: a temporary directory); the
campaign ids carry a tag of the data dir (ids are host-wide: two runs at once do not collide).

A target that neither arm reaches within its cap is still compared: each arm's time is projected
to the target (time x (widest half-width / target)^2), and, independent of the target, the
efficiency ratio ``(c_boot s2_boot) / (c_fresh s2_fresh)`` (cost x variance of one unit: a boot's
mean, a fresh run; pooled over the configurations) is printed with its 95 % interval (F
distribution of the two pooled variances): the ratio of the campaign times to any small
half-width. When one arm reached the target and the other stopped at its cap short of it, the
ratio as run bounds the ratio to the target (at most, when reuse is the one that reached it).

Why board 13 by default: reuse pays off when a boot costs much more than a run, the case the
issue is about (a VM or a cloud server boots in minutes, a run takes seconds). With a share rho
of the variance between boots, a boot cost c_b and a run cost c_r, the best ratio any k reaches
is (sqrt(rho c_b) + sqrt((1 - rho) c_r))^2 / (c_b + c_r) (K&J's plan): never below rho. Here
(QEMU TCG, 2026-11-28) a boot costs 9 s and rho is 0.25-0.45 (N-queens' speed in a VM depends
on its boot: where its code and memory landed); board 14 (a 1-s run, c_b / c_r = 9) cannot
go below 0.56-0.76 by that bound, board 13 (0.18 s, c_b / c_r = 50) 0.38-0.59. Measured runs
do better than the bound when a fresh VM's first run is noisier than a later run of a boot
(a fresh run took 2.2 s instead of 1.0 once, its vCPU busy with the guest's own start-up).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402
from scipy import stats as sps  # noqa: E402

from labkit.core.instance import InstanceSpec  # noqa: E402
from labkit.run.campaign import Campaign  # noqa: E402
from labkit.stats import runs_needed  # noqa: E402
from labkit.store import Store  # noqa: E402

LEVELS = ["floating", "pinned"]


def make(args, cid: str, reps: int, k: int, seed: int) -> Campaign:
    cid = f"{cid}-{args.tag}"  # ids are host-wide: two runs of this script at once must not share them
    design = {
        "name": cid,
        "factors": {"affinity": LEVELS},
        "replications": reps,
        "seed": seed,
        "runs_per_instance": k,
    }
    return Campaign(
        design,
        backend=args.backend,
        workload="nqueens",
        workload_params={"board": args.board, "threads": 1},
        campaign_id=cid,
        data_dir=args.dir,
        defaults=InstanceSpec(vcpus=1, memory_mb=512),
        progress=False,
        run_timeout=1800,
    )


def table(data_dir: str, cid: str) -> pd.DataFrame:
    """One row per stored run: affinity, instance, boot group, position in the boot, runs in
    the boot, duration, workload seconds, status and the wall time (the response)."""
    st = Store.for_campaign(data_dir, cid, readonly=True)
    runs, tidy = st.runs(), st.tidy()
    wall = tidy[tidy.metric == "wall_time_s"].groupby("run_id").value.mean()
    inst = tidy.groupby("run_id").instance.first()
    rows = []
    for _, r in runs.iterrows():
        md = r.metadata or {}
        wl = md.get("workload_s")
        other = (md.get("telemetry") or {}).get("cpu_other_mean_pct")
        rows.append(
            {
                "other": float("nan") if other is None else float(other),
                "run_id": r.run_id,
                "affinity": r.affinity,
                "instance": inst.get(r.run_id),
                "group": md.get("boot_group", r.run_id),
                "pos": md.get("boot_position", 1),
                "of": md.get("boot_runs", 1),
                "duration": float(r.duration_s),
                "workload": float(sum(wl)) if isinstance(wl, list) else float("nan"),
                "status": r.status,
                "value": wall.get(r.run_id, float("nan")),
            }
        )
    return pd.DataFrame(rows)


def half_widths(t: pd.DataFrame, per_boot: bool) -> dict:
    """Per configuration: (units, mean, relative 95 % half-width) over runs, or over complete
    boots' means (``per_boot``); NaN half-width below 2 units."""
    out = {}
    ok = t[t.status == "ok"]
    for lv in LEVELS:
        rows = ok[ok.affinity == lv]
        if per_boot:
            full = rows.groupby("group").filter(lambda g: len(g) == int(g["of"].iloc[0]))
            units = full.groupby("group").value.mean()
        else:
            units = rows.value
        n, mean = len(units), float(units.mean()) if len(units) else float("nan")
        h = (
            (sps.t.ppf(0.975, n - 1) * float(units.std(ddof=1)) / math.sqrt(n) / mean)
            if n >= 2
            else float("nan")
        )
        out[lv] = (n, mean, h)
    return out


class Arm:
    """One campaign run step by step (``step`` runs at a time) until its target or cap."""

    def __init__(self, name: str, camp: Campaign, step: int, per_boot: bool, args):
        self.name, self.c, self.step, self.per_boot, self.args = name, camp, step, per_boot, args
        self.total = len(camp.design.plan())
        self.call_s = 0.0
        self.t = pd.DataFrame()
        self.done = self.reached = False

    def advance(self) -> None:
        t0 = time.monotonic()
        with self.c.run(max_runs=self.step):
            pass
        self.call_s += time.monotonic() - t0
        self.t = table(self.args.dir, self.c.campaign_id)
        hw = self.half_widths()
        reached = all(n >= self.args.min_units and h <= self.args.target for n, _, h in hw.values())
        self.reached = reached
        self.done = reached or len(self.t) >= self.total
        print(
            f"  {self.name}: {len(self.t)} runs, {self.t.instance.nunique()} boots, "
            f"{self.t.duration.sum():.0f} s; half-widths "
            + ", ".join(f"{lv} {100 * h:.1f} % ({n})" for lv, (n, _, h) in hw.items()),
            flush=True,
        )

    def half_widths(self) -> dict:
        return half_widths(self.t, self.per_boot)

    @property
    def time_s(self) -> float:
        return float(self.t.duration.sum()) if len(self.t) else 0.0


def phases(t: pd.DataFrame) -> str:
    """Mean seconds of a boot's first run, a run between (its workload, the rest dead time) and
    its last (with the teardown); for runs of their own boot, the whole run and its workload."""
    ok = t[t.status == "ok"]
    if (ok["of"] == 1).all():
        return (
            f"a run {ok.duration.mean():.1f} s (boot, prepare, workload {ok.workload.mean():.2f} s, "
            f"teardown, hooks)"
        )
    first, last = ok[ok.pos == 1], ok[ok.pos == ok["of"]]
    mid = ok[(ok.pos > 1) & (ok.pos < ok["of"])]
    return (
        f"first run of a boot {first.duration.mean():.1f} s (boot, prepare, workload "
        f"{first.workload.mean():.2f} s); a run between {mid.duration.mean():.2f} s (workload "
        f"{mid.workload.mean():.2f} s, dead time {(mid.duration - mid.workload).mean():.2f} s: guard and "
        f"telemetry); last {last.duration.mean():.1f} s (with the teardown)"
    )


def costs(t: pd.DataFrame) -> tuple[float, float]:
    """(cost of a boot, cost of a run inside it) from a reuse campaign's stored durations."""
    ok = t[t.status == "ok"]
    mid = ok[(ok.pos > 1) & (ok.pos < ok["of"])]
    c_run = float(mid.duration.median())
    per_boot = ok.groupby("group").duration.sum() - ok.groupby("group").size() * c_run
    return max(float(per_boot.mean()), 1e-3), max(c_run, 1e-3)


def by_position(t: pd.DataFrame) -> str:
    ok = t[t.status == "ok"]
    m = ok.groupby("pos").value.agg(["mean", "count"])
    return ", ".join(f"{int(p)}: {r['mean']:.4f} s ({int(r['count'])})" for p, r in m.iterrows())


def report(arm: Arm) -> None:
    t = arm.t
    hw = arm.half_widths()
    bad = int((t.status != "ok").sum())
    print(
        f"  {arm.name}: {t.instance.nunique()} boots, {len(t)} runs ({bad} not ok), campaign time "
        f"{arm.time_s:.0f} s (wall of its run() calls {arm.call_s:.0f} s)"
    )
    print(f"    {phases(t)}")
    print(
        "    95 % CI half-width reached: "
        + "; ".join(
            f"{lv} {100 * h:.2f} % of {m:.4f} s over {n} {'boots' if arm.per_boot else 'runs'}"
            for lv, (n, m, h) in hw.items()
        )
        + ("" if all(h <= arm.args.target for _, _, h in hw.values()) else "  (target NOT reached: cap)")
    )
    ok = t[(t.status == "ok") & t.other.notna()]
    if len(ok) >= 3:
        rho = sps.spearmanr(ok.other, ok.value)[0]
        print(
            f"    processes outside the campaigns during a run: {ok.other.median():.0f} % of a CPU (median, "
            f"{ok.other.min():.0f}-{ok.other.max():.0f} %); Spearman correlation with the wall time {rho:.2f}"
        )
    if arm.per_boot:
        print(f"    wall time by position in a boot: {by_position(t)}")


def pooled(units: pd.DataFrame) -> tuple[float, int]:
    """(pooled within-configuration variance of ``units.value``, its df)."""
    g = units.groupby("affinity").value
    df = (g.size() - 1).clip(lower=0)
    return float(((g.var() * df).sum()) / df.sum()), int(df.sum())


def efficiency(fresh: Arm, reuse: Arm) -> tuple[float, float, float]:
    """(c_boot s2_boot) / (c_fresh s2_fresh) with its 95 % interval (F with the pooled df)."""
    f = fresh.t[fresh.t.status == "ok"]
    r = reuse.t[reuse.t.status == "ok"]
    r = r.groupby("group").filter(lambda g: len(g) == int(g["of"].iloc[0]))
    boots = (
        r.groupby(["affinity", "group"]).agg(value=("value", "mean"), cost=("duration", "sum")).reset_index()
    )
    s2f, dff = pooled(f)
    s2b, dfb = pooled(boots)
    eff = float(boots.cost.mean() * s2b / (f.duration.mean() * s2f))
    return eff, eff / float(sps.f.ppf(0.975, dfb, dff)), eff / float(sps.f.ppf(0.025, dfb, dff))


def projected(arm: Arm, target: float) -> float:
    """The arm's campaign time scaled to the target: time x (widest half-width / target)^2 (the
    half-width falls as 1 / sqrt(units)); its own time when it reached the target."""
    h = max(h for _, _, h in arm.half_widths().values())
    return arm.time_s * max(1.0, (h / target) ** 2)


#: the command line: option, type, default, what it is
OPTIONS = (
    ("--backend", str, "libvirt", "the backend"),
    ("--board", int, 13, "N-queens board (13: 0.16 s in a TCG VM whose boot costs 9 s; 14: 1 s)"),
    ("--target", float, 0.02, "95 %% CI half-width of each configuration mean, relative to it"),
    ("--pilot-k", int, 4, "runs per boot of the pilot"),
    ("--pilot-boots", int, 3, "boots per configuration of the pilot"),
    ("--k-max", int, 12, "the largest k taken from the plan"),
    ("--min-units", int, 3, "fewest runs (fresh) or boots (reuse) per configuration before stopping"),
    ("--max-fresh", int, 40, "cap: fresh runs per configuration"),
    ("--max-boots", int, 12, "cap: reuse boots per configuration"),
    ("--seed", int, 32, "the designs' seed"),
    ("--data-dir", str, None, "where the campaigns' stores go (kept)"),
)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, kind, default, what in OPTIONS:
        ap.add_argument(flag, type=kind, default=default, help=f"{what} (default {default})")
    args = ap.parse_args(argv)
    if args.pilot_k < 3 or args.pilot_boots < 2:
        ap.error(
            "the pilot needs --pilot-k >= 3 (a run between a boot's first and last) and --pilot-boots >= 2"
        )
    with tempfile.TemporaryDirectory() as scratch:
        args.dir = args.data_dir or scratch
        args.tag = hashlib.sha256(str(Path(args.dir).resolve()).encode()).hexdigest()[:8]
        run(args)


def run(args) -> None:
    t_start = time.monotonic()
    print(
        f"backend {args.backend}, N-queens board {args.board} (1 thread, 1 vCPU), affinity floating/pinned, "
        f"target: 95 % CI half-width <= {100 * args.target:g} % of each configuration mean",
        flush=True,
    )
    pilot = Arm(
        "pilot",
        make(args, "bench-reuse-pilot", args.pilot_k * args.pilot_boots, args.pilot_k, args.seed),
        args.pilot_k * args.pilot_boots * len(LEVELS),
        True,
        args,
    )
    pilot.advance()
    pt = pilot.t[pilot.t.status == "ok"].copy()
    c_boot, c_run = costs(pt)
    plan = runs_needed(
        pt,
        response="value",
        levels=["instance", "run_id"],
        within="affinity",
        costs={"instance": c_boot, "run_id": c_run},
        target_ci=args.target,
        max_reps=1000,
    )
    comp = plan.set_index("level")
    s2_i, s2_r = float(comp.loc["instance", "variance"]), float(comp.loc["run_id", "variance"])
    k_plan, b_plan = int(comp.loc["run_id", "reps"]), int(comp.loc["instance", "reps"])
    k = min(max(k_plan, 2), args.k_max)
    print(
        f"  pilot: {pilot.t.instance.nunique()} boots of {args.pilot_k} runs, {pilot.time_s:.0f} s; costs: boot "
        f"{c_boot:.1f} s, run {c_run:.2f} s; variance components (K&J, {plan.attrs['method']}): instance "
        f"{s2_i:.3g} ({comp.loc['instance', 'pct']:.0f} %), run {s2_r:.3g}; mean {plan.attrs['mean']:.4f} s"
    )
    print(f"    wall time by position in a boot: {by_position(pt)}")
    print(
        f"  runs_needed: k = {k_plan} runs per boot (exact {comp.loc['run_id', 'reps_exact']:.2f}), {b_plan} boots "
        f"per configuration expected; reuse arm k = {k}"
        + ("" if k == k_plan else f" (clamped to 2..{args.k_max})")
        + (f"; {plan.attrs['note']}" if plan.attrs.get("note") else ""),
        flush=True,
    )
    fresh = Arm("fresh", make(args, "bench-reuse-fresh", args.max_fresh, 1, args.seed + 1), 1, False, args)
    reuse = Arm("reuse", make(args, "bench-reuse-k", k * args.max_boots, k, args.seed + 2), k, True, args)
    while not (fresh.done and reuse.done):
        arm = min((a for a in (fresh, reuse) if not a.done), key=lambda a: a.time_s)
        arm.advance()
    print(f"results ({time.monotonic() - t_start:.0f} s in all):")
    report(pilot)
    report(fresh)
    report(reuse)
    ratio = reuse.time_s / fresh.time_s
    what = {
        (True, True): "to the target",
        (
            False,
            True,
        ): f"as run, and to the target at most {ratio:.3f} (reuse reached it; fresh stopped at its "
        f"cap short of it, so fresh needs more)",
        (
            True,
            False,
        ): f"as run, and to the target at least {ratio:.3f} (fresh reached it; reuse stopped at its "
        f"cap short of it)",
        (False, False): "as run (both arms stopped at their caps short of the target: no bound)",
    }[(fresh.reached, reuse.reached)]
    print(
        f"  campaign time {what}, reuse (k = {k}) / fresh = {reuse.time_s:.0f} / {fresh.time_s:.0f} s = "
        f"{ratio:.3f}  (target <= 0.5); with the pilot added to reuse: "
        f"{(reuse.time_s + pilot.time_s) / fresh.time_s:.3f}; by the wall time of the run() calls: "
        f"{reuse.call_s / fresh.call_s:.3f}"
    )
    eff, lo, hi = efficiency(fresh, reuse)
    print(
        f"  efficiency (c_boot x var of a boot mean) / (c_fresh x var of a fresh run) = {eff:.3f}, 95 % CI "
        f"{lo:.3f}-{hi:.3f}; the same with no instance variance (cost only, c_boot / (k c_fresh)): "
        f"{reuse.t.groupby('group').duration.sum().mean() / (k * fresh.t.duration.mean()):.3f}"
    )
    if not (fresh.reached and reuse.reached):
        pf, pr = projected(fresh, args.target), projected(reuse, args.target)
        print(
            f"  an arm stopped at its cap: projected to the target (time x (widest half-width / target)^2): "
            f"fresh {pf:.0f} s, reuse {pr:.0f} s, ratio {pr / pf:.3f}"
        )


if __name__ == "__main__":
    main()
