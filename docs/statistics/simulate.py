"""Print the simulated figures of docs/statistics/decision-rules.md (seeded, deterministic).

Run: ``.venv/bin/python docs/statistics/simulate.py`` (about a minute on two cores).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from labkit.stats.simulate import adaptive_coverage, false_alarm_rate  # noqa: E402


def main() -> int:
    print("Change points: share of stationary series flagged (alpha = 0.05, 4,000 series each)")
    print(f"{'n':>6s} {'normal':>8s} {'t3':>8s}")
    for n in (20, 50, 100, 200, 500):
        rates = [false_alarm_rate(n, dist=d, reps=4000, seed=n) for d in ("normal", "t3")]
        print(f"{n:6d} {100 * rates[0]:7.2f}% {100 * rates[1]:7.2f}%")
    print()
    print("Adaptive replication: coverage of the final 95 % CI (20,000 configurations each)")
    settings = {"studies {min: 5, target_ci: 0.05, max: 8}": dict(target_ci=0.05, min_runs=5, max_runs=8),
                "README {min: 3, target_ci: 0.02, max: 20}": dict(target_ci=0.02, min_runs=3, max_runs=20)}
    for name, s in settings.items():
        print(name)
        print(f"{'CV':>6s} {'runs':>6s} {'at cap':>7s} {'fixed-n t':>10s} {'Stein':>7s}")
        for cv in (0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.2):
            r = adaptive_coverage(cv, reps=20000, seed=1, **s)
            print(f"{100 * cv:5.0f}% {r['mean_runs']:6.2f} {100 * r['at_cap']:6.1f}% "
                  f"{100 * r['coverage']:9.2f}% {100 * r['stein_coverage']:6.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
