"""The reliability suite of issue 13: kill-and-resume loop, signal cases, fuzz of inputs.

Run from the repository root (``make reliability``); see reliability/README.md.
Prints one table; exit status 1 if a count that must be 0 is not.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from labkit.design import Design  # noqa: E402
from labkit.errors import ConfigError, LabkitError, StoreError  # noqa: E402
from labkit.store import Store  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
FACTORS = {"vcpus": [1, 2], "affinity": ["floating", "pinned"]}
PREFIX = "labkit-rel"


# -- helpers ----------------------------------------------------------------------------------
def write_design(directory: Path, replications: int, seed: int) -> Path:
    path = directory / f"design-{replications}-{seed}.yaml"
    path.write_text(json.dumps({"factors": FACTORS, "replications": replications, "seed": seed}))
    return path


def start(design: Path, cid: str, data: Path, backend: str, sleep_arg: str) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "labkit",
        "run",
        str(design),
        "--backend",
        backend,
        "--workload",
        "command",
        "--param",
        f'argv=["sleep", "{sleep_arg}"]',
        "--campaign-id",
        cid,
        "--data-dir",
        str(data),
        "--timeout",
        "120",
    ]
    return subprocess.Popen(
        argv, env=ENV, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def stored_runs(data: Path, cid: str) -> int:
    try:
        with Store.for_campaign(data, cid, readonly=True) as st:
            return len(st.completed())
    except LabkitError:
        return 0


def leftovers(backend: str, prefix: str, sleep_arg: str) -> tuple[list[str], list[str]]:
    """(instances/cgroups whose names start with ``prefix``, pids of our workload still alive)."""
    names: set[str] = set()
    if backend == "local":
        for d in ("/sys/fs/cgroup/cpuset", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup"):
            if Path(d).exists():
                names |= {x.name for x in Path(d).glob(prefix + "*")}
    else:
        from labkit.backends import get_backend

        be = get_backend(backend)
        try:
            try:
                names |= {n for n in be.list_labkit(prefix) if n.startswith(prefix)}
            except TypeError:  # before the backend layer's list_labkit(prefix)
                names |= {n for n in be.list_labkit() if n.startswith(prefix)}
        finally:
            be.close()
    out = subprocess.run(["pgrep", "-f", f"sleep {sleep_arg}"], capture_output=True, text=True).stdout
    return sorted(names), out.split()


def check_store(data: Path, cid: str, design: Design) -> Counter:
    """lost / duplicated / partial / failed / integrity counts of one finished campaign."""
    c: Counter = Counter()
    try:
        with Store.for_campaign(data, cid, readonly=True) as st:
            runs = st.runs()
            tidy = st.tidy()
    except StoreError:
        c["integrity"] += 1
        return c
    planned = {r.run_id for r in design.plan()}
    got = list(runs.run_id) if not runs.empty else []
    c["lost"] += len(planned - set(got))
    c["duplicated"] += len(got) - len(set(got))
    if not tidy.empty:
        ok = tidy[tidy.status == "ok"]
        c["duplicated"] += int(ok.duplicated(["run_id", "instance", "metric"]).sum())
        per_run = ok.groupby("run_id").metric.count()
        c["partial"] += int((per_run < 1).sum()) + len(
            set(runs[runs.status == "ok"].run_id) - set(per_run.index)
        )
    c["failed"] += int((runs.status != "ok").sum()) if not runs.empty else 0
    return c


# -- kill-and-resume loop -------------------------------------------------------------------------
def kill_loop(args, work: Path, tag: str) -> Counter:
    c: Counter = Counter()
    sleep_arg = f"0.3{tag}"
    rng = random.Random(int(tag))
    data = work / "kill"
    i = -1
    # at least --campaigns campaigns; more if they completed before --kills kills were spent
    while (i := i + 1) < args.campaigns or (c["kills"] < args.kills and i < 10 * args.campaigns):
        per = max(1, -(-(args.kills - c["kills"]) // max(1, args.campaigns - i)))
        cid = f"rel-{tag}-k{i}"
        design_path = write_design(work, args.replications, 100 + i)
        design = Design.from_yaml(design_path)
        kills = errors = 0
        deadline = time.monotonic() + args.campaign_timeout
        while True:
            proc = start(design_path, cid, data, args.backend, sleep_arg)
            if kills < per and c["kills"] < args.kills:
                time.sleep(rng.uniform(0.05, args.max_wait))
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    kills += 1
                    c["kills"] += 1
                    continue
            try:
                rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                c["stuck"] += 1
                break
            if rc != 0:
                err = proc.stderr.read()
                c["errors"] += 1
                errors += 1
                print(f"  {cid}: exit {rc}: {err.strip().splitlines()[-1:] if err else ''}", file=sys.stderr)
                if time.monotonic() > deadline or errors >= 3:
                    break  # the same error three times in a row: give this campaign up
                continue
            break
        c += check_store(data, cid, design)
        names, pids = leftovers(args.backend, f"labkit-{cid}--", sleep_arg)
        c["leaked"] += len(names) + len(pids)
        c["campaigns"] += 1
        c["runs"] += stored_runs(data, cid)
    return c


# -- signal cases ---------------------------------------------------------------------------------
def signal_cases(args, work: Path, tag: str) -> dict[str, Counter]:
    out = {}
    sleep_arg = f"0.4{tag}"
    rng = random.Random(int(tag) + 1)
    data = work / "signals"
    design_path = write_design(work, 2, 7)
    design = Design.from_yaml(design_path)
    for case in ("SIGTERM", "SIGINT", "SIGINT x2"):
        c: Counter = Counter()
        for t in range(args.signal_trials):
            cid = f"rel-{tag}-{case.lower().replace(' ', '')}-{t}"
            proc = start(design_path, cid, data, args.backend, sleep_arg)
            deadline = time.monotonic() + 60
            while stored_runs(data, cid) < 1 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 0.35))
            sig = signal.SIGTERM if case == "SIGTERM" else signal.SIGINT
            proc.send_signal(sig)
            if case == "SIGINT x2":
                time.sleep(rng.uniform(0.02, 0.15))
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
            try:
                rc = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
                c["stuck"] += 1
            c["trials"] += 1
            c["exit!=130"] += rc not in (130, 0)  # 0: the campaign had finished before the signal
            names, pids = leftovers(args.backend, f"labkit-{cid}--", sleep_arg)
            c["leaked"] += len(names) + len(pids)
            resumed = start(design_path, cid, data, args.backend, sleep_arg)
            c["resume_errors"] += resumed.wait(timeout=300) != 0
            c += check_store(data, cid, design)
        out[case] = c
    return out


# -- fuzz -----------------------------------------------------------------------------------------
def fuzz(args, work: Path) -> dict[str, Counter]:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from labkit import cli
    from labkit.run.campaign import Campaign
    from labkit.workloads import get_workload

    results: dict[str, Counter] = {"design dicts": Counter(), "YAML files": Counter(), "CLI calls": Counter()}
    failures: list[str] = []
    cfg = settings(
        max_examples=args.fuzz,
        deadline=None,
        database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
    )
    scalar = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True),
        st.text(max_size=20),
        st.sampled_from(["pinned", "floating", "yes", "8", "8.0", "1; id"]),
    )
    value = st.recursive(
        scalar,
        lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=5), ch, max_size=3),
        max_leaves=12,
    )
    names = st.sampled_from(
        [
            "vcpus",
            "memory_mb",
            "affinity",
            "count",
            "board",
            "threads",
            "timeout_s",
            "noise",
            "bogus",
            "",
            "a b",
            "x" * 70,
        ]
    )
    factors = st.one_of(
        st.dictionaries(names | st.text(max_size=6), st.lists(value, max_size=6) | value, max_size=5),
        st.dictionaries(names, st.lists(scalar, min_size=2, max_size=4), min_size=1, max_size=4),
    )
    design = st.fixed_dictionaries(
        {"factors": factors},
        optional={
            "replications": st.one_of(st.integers(-5, 10**9), st.floats(), st.just(2e8), st.text(max_size=4)),
            "seed": value,
            "name": value,
            "description": value,
            "extra": value,
        },
    )
    small = st.one_of(
        st.integers(0, 20),
        st.sampled_from([8.0, 4.5, "pinned", "floating", "on", "2", None, "light", "none", -1]),
    )
    near_valid = st.fixed_dictionaries(
        {
            "factors": st.dictionaries(
                st.sampled_from(["vcpus", "count", "affinity", "board", "threads"]),
                st.lists(small, min_size=2, max_size=4),
                min_size=1,
                max_size=4,
            )
        },
        optional={"replications": st.integers(0, 12), "seed": st.integers(-1, 2**64)},
    )
    design = st.one_of(design, near_valid)
    workload = get_workload("nqueens")

    def record(kind: str, fn):
        try:
            fn()
            results[kind]["accepted"] += 1
        except ConfigError:
            results[kind]["ConfigError"] += 1
        except Exception as exc:  # anything else is a defect
            results[kind][f"other: {type(exc).__name__}"] += 1
            if len(failures) < 10:
                failures.append(f"{kind}: {type(exc).__name__}: {str(exc)[:200]}")

    def check_design(d):
        dd = Design.from_dict(d, source="fuzz")
        dd.validate_for(workload)
        assert len(dd.plan()) <= 100_000

    @cfg
    @given(design | value)
    def dicts(d):
        record("design dicts", lambda: check_design(d))

    bomb = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]\n" for p, c in zip("abcdefg", "bcdefgh")
    )
    text_yaml = st.one_of(
        st.text(max_size=200),
        design.map(lambda d: json.dumps(d, default=str)),
        st.builds(lambda n: "[" * n + "]" * n, st.integers(0, 3000)),
        st.builds(lambda s: bomb + f"factors: {{vcpus: *{s}}}\n", st.sampled_from("abcdefgh")),
        st.sampled_from(
            [
                "factors: {vcpus: [1, 2]}\nseed: 1\n",
                "a: !!python/object:os.system x\n",
                "factors: {vcpus: [2001-13-45, 2]}\n",
                "---\n---\n",
                "factors: {board: [8, 8.0]}\n",
            ]
        ),
    )
    yaml_bytes = st.one_of(
        text_yaml.map(lambda t: t.encode("utf-8", "surrogatepass")),
        st.binary(max_size=300),
        text_yaml.map(lambda t: t.encode("utf-8", "ignore") + b"\xff\xfe caf\xe9"),
    )
    counter = iter(range(10**9))

    def from_yaml(data: bytes):
        p = work / "fuzz" / f"d{next(counter)}.yaml"
        p.write_bytes(data)
        try:
            check_design_yaml(p)
        finally:
            p.unlink()

    def check_design_yaml(p):
        dd = Design.from_yaml(p)
        dd.validate_for(workload)

    @cfg
    @given(yaml_bytes)
    def yamls(data):
        record("YAML files", lambda: from_yaml(data))

    class Accepted(Exception):
        pass

    def accepted_run(self, **kw):
        raise Accepted()

    good = work / "fuzz" / "good.yaml"
    opt_value = st.one_of(
        st.text(max_size=12),
        st.sampled_from(
            ["true", "nan", "-1", "1e999", "null", "[1,2]", '["sleep","1"]', "{}", "8", "8.0", "[" * 2000]
        ),
    )
    option = st.one_of(
        st.tuples(
            st.just("--param"),
            st.builds(
                lambda k, v: f"{k}={v}",
                st.sampled_from(["board", "threads", "timeout_s", "argv", "size", ""]),
                opt_value,
            ),
        ),
        st.tuples(st.just("--timeout"), opt_value),
        st.tuples(st.just("--campaign-id"), st.text(max_size=60) | st.sampled_from(["x--y", "x-", "ok-1"])),
        st.tuples(st.just("--workload"), st.sampled_from(["nqueens", "command", "nope"])),
        st.tuples(st.just("--backend-option"), st.builds(lambda v: f"enforce_limits={v}", opt_value)),
    )
    run_call = st.builds(
        lambda opts: ["run", str(good)] + [x for o in opts for x in o], st.lists(option, max_size=5)
    )
    other_call = st.one_of(
        st.builds(lambda c: ["export", c], st.text(max_size=50)),
        st.builds(lambda c: ["clean", c], st.text(min_size=1, max_size=50)),
        st.lists(st.text(max_size=10), max_size=4),
    )

    def call(argv):
        try:
            rc = cli.main(
                [*argv, "--data-dir", str(work / "fuzz" / "data")]
                if argv and argv[0] in ("run", "export", "clean")
                else argv
            )
        except Accepted:
            results["CLI calls"]["accepted"] += 1
            return
        except SystemExit as exc:  # argparse: usage error, exit 2
            if exc.code != 2 and exc.code != 0:
                raise
            results["CLI calls"]["usage error"] += 1
            return
        results["CLI calls"]["error (exit 2)" if rc == 2 else f"exit {rc}"] += 1

    def cli_call(argv):
        try:
            call(argv)
        except Exception as exc:
            results["CLI calls"][f"other: {type(exc).__name__}"] += 1
            if len(failures) < 10:
                failures.append(f"CLI {argv[:4]}: {type(exc).__name__}: {str(exc)[:200]}")

    @cfg
    @given(run_call | other_call)
    def clis(argv):
        cli_call(argv)

    (work / "fuzz").mkdir(parents=True, exist_ok=True)
    good.write_text("factors: {vcpus: [1, 2]}\nworkload: nqueens\nseed: 1\n")
    original_run = Campaign.run
    Campaign.run = accepted_run
    import contextlib
    import io
    import logging

    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            dicts()
            yamls()
            clis()
    finally:
        Campaign.run = original_run
        logging.disable(logging.NOTSET)
    for f in failures:
        print("  fuzz failure:", f, file=sys.stderr)
    return results


# -- report ---------------------------------------------------------------------------------------
def security_rows() -> list[list[tuple[str, str, object, str]]]:
    """Issue 28's attacks: each ``reliability/security_*.py`` module's ``rows()``, one list per
    module; a module that raises is one row counting it as an error (must be 0)."""
    import importlib.util

    out = []
    for path in sorted(Path(__file__).parent.glob("security_*.py")):
        spec = importlib.util.spec_from_file_location(f"reliability_{path.stem}", path)
        try:
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            out.append(list(mod.rows()))
        except Exception as exc:  # the table must still print the other rows
            print(f"  {path.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            out.append([(path.stem.replace("_", " "), "errors", 1, "0")])
    return out


def table(rows: list[tuple[str, str, object, str]]) -> str:
    head = ("section", "figure", "value", "must be")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(4)]
    line = "  ".join("-" * w for w in widths)
    fmt = "  ".join(f"{{:{'<' if i != 2 else '>'}{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*head), line] + [fmt.format(*map(str, r)) for r in rows])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--backend", default="local", help="backend of the kill loop and signal cases")
    p.add_argument("--kills", type=int, default=100)
    p.add_argument("--campaigns", type=int, default=4)
    p.add_argument("--replications", type=int, default=6, help="per campaign (4 configurations each)")
    p.add_argument("--max-wait", type=float, default=2.5, help="seconds before a kill, at most")
    p.add_argument("--campaign-timeout", type=float, default=900)
    p.add_argument("--signal-trials", type=int, default=6)
    p.add_argument("--fuzz", type=int, default=1000, help="inputs of each kind")
    p.add_argument("--skip", action="append", default=[], choices=["kill", "signals", "fuzz", "security"])
    args = p.parse_args(argv)
    tag = f"{random.SystemRandom().randrange(10**4, 10**5)}"
    rows: list[tuple[str, str, object, str]] = []
    must_zero = []
    with tempfile.TemporaryDirectory(prefix="labkit-reliability-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o700)
        if "kill" not in args.skip:
            t = time.monotonic()
            c = kill_loop(args, work, tag)
            sec = f"kill loop ({args.backend})"
            for k in ("campaigns", "runs", "kills"):
                rows.append((sec, k, c[k], ""))
            for k in ("lost", "duplicated", "partial", "failed", "integrity", "leaked", "errors", "stuck"):
                rows.append((sec, k, c[k], "0"))
                must_zero.append(c[k])
            rows.append((sec, "seconds", round(time.monotonic() - t), ""))
        if "signals" not in args.skip:
            for case, c in signal_cases(args, work, tag).items():
                sec = f"signal {case} ({args.backend})"
                rows.append((sec, "trials", c["trials"], ""))
                for k in ("exit!=130", "leaked", "stuck", "resume_errors", "lost", "duplicated", "failed"):
                    rows.append((sec, k, c[k], "0"))
                    must_zero.append(c[k])
        if "fuzz" not in args.skip:
            t = time.monotonic()
            for kind, c in fuzz(args, work).items():
                sec = f"fuzz {kind}"
                rows.append((sec, "inputs", sum(c.values()), f">= {args.fuzz}"))
                for k, v in sorted(c.items()):
                    bad = k.startswith("other")
                    rows.append((sec, k, v, "0" if bad else ""))
                    if bad:
                        must_zero.append(v)
                rows.append(
                    (
                        sec,
                        "non-ConfigError exceptions",
                        sum(v for k, v in c.items() if k.startswith("other")),
                        "0",
                    )
                )
            rows.append(("fuzz", "seconds", round(time.monotonic() - t), ""))
    if "security" not in args.skip:
        for sec_rows in security_rows():
            rows += sec_rows
            must_zero += [r[2] for r in sec_rows if r[3] == "0"]
    print(table(rows))
    ok = not any(must_zero)
    print("reliability: " + ("all counts that must be 0 are 0" if ok else "FAILED: see the rows above"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
