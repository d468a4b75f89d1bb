"""Command line: run a campaign from a design file (``labkit run``), then list, show, check, analyze,
compare and report the campaigns stored; ``labkit COMMAND --help`` says each command's options.
``--data-dir`` defaults to the repository's ``data/`` (found from the working directory or the
package; see :mod:`labkit.core.paths`), else ``./data``."""

from __future__ import annotations

import argparse
import errno
import logging
import signal
import sqlite3
import sys
import threading
from collections.abc import Sequence

from ..errors import LabkitError
from .admin import (
    DEFAULT_GRACE,
    cmd_clean,
    cmd_cloud_check,
    cmd_doctor,
    cmd_fingerprint,
    cmd_images,
    cmd_notebooks,
    duration,
)
from .analyze import cmd_analyze, cmd_compare, cmd_dashboard, cmd_report
from .results import cmd_check, cmd_export, cmd_import, cmd_list, cmd_show, cmd_status, cmd_verify
from .run import (
    cmd_noise_check,
    cmd_replicate,
    cmd_run,
    quarantine_default,
    telemetry_arg,
)

__all__ = ["main", "parser", "plain_text", "quarantine_default"]


def plain_text(text: str) -> str:
    """Docstring text without its reStructuredText markup, for ``--help`` (issue 46): literals in
    double or single backquotes, roles (``:mod:`a.b``` is a.b; with a ``~``, b), links (a link
    with a target becomes "text (url)") and references become their plain words."""
    import re

    text = re.sub(r":[a-z]+:`~[^`]*?\.?([^.`]+)`", r"\1", text)  # :func:`~a.b` -> b
    text = re.sub(r":[a-z]+:`([^`]+)`", r"\1", text)  # :mod:`a.b` -> a.b
    text = re.sub(r"`([^`<]+?)\s*<([^>]+)>`__?", r"\1 (\2)", text)  # `text <url>`_ -> text (url)
    text = re.sub(r"`([^`]+)`__?", r"\1", text)  # `text`_ -> text
    text = re.sub(r"``([^`]+)``", r"\1", text)
    return re.sub(r"`([^`]+)`", r"\1", text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="labkit", description=plain_text(__doc__ or ""))
    p.add_argument("-v", "--verbose", action="store_true")
    from .. import __version__

    p.add_argument("--version", action="version", version=f"labkit {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="run (or resume) a campaign from a YAML design")
    r.add_argument("design", help="design YAML (factors, replications, seed)")
    r.add_argument("--backend", help="backend, or platform on a testbed (default local; ssh on remote hosts)")
    r.add_argument("--testbed", help="testbed YAML: hosts and platforms to run on in parallel")
    from ..workloads import REGISTRY as WORKLOADS

    r.add_argument(
        "--workload",
        help=f"workload to run: {', '.join(WORKLOADS)} (docs/reference/workloads.md); "
        "required unless the design names one (workload: NAME), and wins over it",
    )
    r.add_argument(
        "--param",
        action="append",
        metavar="KEY=VALUE",
        help="workload parameter (over the design's workload: params, for the same workload)",
    )
    r.add_argument("--backend-option", action="append", metavar="KEY=VALUE")
    r.add_argument("--campaign-id")
    r.add_argument("--data-dir", help="default: the repository's data/")
    r.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    r.add_argument("--retry-failed", action="store_true", help="run failed/timed-out runs again")
    r.add_argument(
        "--retries",
        type=int,
        default=0,
        metavar="N",
        help="then run the failed/timed-out runs again, up to N more times",
    )
    r.add_argument(
        "--new-store",
        action="store_true",
        help="start a new store even though results.csv of a lost one remains (overwritten)",
    )
    r.add_argument("--group-readable", action="store_true", help="store files 0640 (default 0600)")
    r.add_argument(
        "--run-output",
        choices=("all", "failed", "off"),
        help="whose command output to keep beside "
        "the store as output/<run_id>.log (first and last MiB): every run's (default), the runs "
        "that did not end ok, or none (default: $LABKIT_RUN_OUTPUT, else all)",
    )
    r.add_argument(
        "--telemetry",
        type=telemetry_arg,
        metavar="off|SECONDS",
        help="seconds between samples of the host and the instances during each run, or off "
        "(default: the design's telemetry, else 1)",
    )
    r.add_argument(
        "--exclusive",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="refuse to run beside another campaign on this host (default: the design's; else warn "
        "and flag the runs that overlap as suspect)",
    )
    r.add_argument(
        "--quarantine",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the runs flagged suspect once more at the end, each at most once (default: on, "
        "unless the design says quarantine: false; --no-quarantine turns it off)",
    )
    r.set_defaults(func=cmd_run)

    im = sub.add_parser("images", help="build instance images")
    imsub = im.add_subparsers(dest="images_cmd", required=True)
    b = imsub.add_parser("build", help="Debian 12 rootfs -> Docker and LXD images (and a VM disk with --vm)")
    b.add_argument("--vm", action="store_true", help="also build the libvirt VM disk")
    b.add_argument("--force", action="store_true", help="rebuild even if cached")
    b.add_argument("--only", help="comma list of docker,lxd; 'none' or '' for neither; default both")
    from ..images import add_variant_arguments

    add_variant_arguments(b)
    b.set_defaults(func=cmd_images)

    e = sub.add_parser("export", help="write results.csv/parquet of a campaign")
    e.add_argument("campaign_id")
    e.add_argument("--data-dir", help="default: the repository's data/")
    e.add_argument("--out", help="directory (default beside the store)")
    e.add_argument(
        "--format",
        default="csv,parquet",
        help="csv, parquet or csv,parquet (default): results.<fmt> and samples.<fmt> in each "
        "(runs.csv and fingerprints.json always), streamed in chunks",
    )
    e.set_defaults(func=cmd_export)

    c = sub.add_parser("clean", help="remove labkit leftovers (instances, cgroups) of a killed campaign")
    c.add_argument(
        "campaign_id",
        nargs="?",
        help="only this campaign's (refused while it runs); default: those "
        "of every campaign not running on this host, listed first and removed with --yes",
    )
    c.add_argument("--data-dir", help="default: the repository's data/")
    c.add_argument("--backend", help="without a campaign: only this backend")
    c.add_argument(
        "--backend-option",
        action="append",
        metavar="KEY=VALUE",
        help="e.g. a password the store does not keep",
    )
    c.add_argument(
        "--testbed",
        help="testbed YAML to reach a testbed campaign's hosts with (default: the "
        "store's copy, whose secrets were redacted)",
    )
    c.add_argument(
        "--yes",
        action="store_true",
        help="without a campaign: remove what is listed (default: only list it, and ask on a terminal)",
    )
    c.add_argument(
        "--include-unknown",
        action="store_true",
        help="without a campaign: also remove labkit-* "
        "objects no campaign made (test fixtures, hand-made); never those of a running campaign",
    )
    c.add_argument(
        "--grace",
        type=duration,
        default=DEFAULT_GRACE,
        metavar="DURATION",
        help="without a campaign: keep the objects of a campaign no registry on this host knows "
        "until its newest sign of life (object made, store written) is this old (default 10m; "
        "30s, 10m, 2h; a bare number is seconds; 0 removes them at once)",
    )
    c.set_defaults(func=cmd_clean)

    cl = sub.add_parser("cloud", help="cloud providers (openstack, cloudstack, azure)")
    ck = cl.add_subparsers(dest="cloud_cmd", required=True).add_parser(
        "check",
        help="check a provider's credentials; with --flavor and --image, its whole contract on one server",
    )
    ck.add_argument("--provider", required=True, help="openstack, cloudstack or azure")
    ck.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="provider option (e.g. cloud=labkit, key_filename=~/.ssh/id_ed25519)",
    )
    ck.add_argument("--flavor", help="flavor / service offering / VM size of the test server")
    ck.add_argument("--image", help="image / template / image URN of the test server")
    ck.set_defaults(func=cmd_cloud_check)

    dr = sub.add_parser(
        "doctor",
        help="what each backend needs from this host (groups, sockets, daemons, "
        "polkit, cgroup delegation) and what it has, as this user",
    )
    dr.set_defaults(func=cmd_doctor)
    nbp = sub.add_parser("notebooks", help="the seed notebooks and the explorer that ship with labkit")
    nbp.add_argument("action", choices=("copy", "list"), help="copy: into DIR; list: their names")
    nbp.add_argument("dir", nargs="?", help="the folder to copy them into (made if missing)")
    nbp.add_argument("--force", action="store_true", help="overwrite notebooks already in DIR")
    nbp.set_defaults(func=cmd_notebooks)
    f = sub.add_parser("fingerprint", help="print this host's fingerprint")
    f.set_defaults(func=cmd_fingerprint)

    def with_data_dir(sp):
        sp.add_argument("--data-dir", help="default: the repository's data/")
        return sp

    with_data_dir(sub.add_parser("list", help="stored campaigns")).set_defaults(func=cmd_list)
    stt = with_data_dir(sub.add_parser("status", help="per-host progress, lost hosts and failures"))
    stt.add_argument("campaign")
    stt.set_defaults(func=cmd_status)
    chk = with_data_dir(
        sub.add_parser(
            "check",
            help="verify a campaign's store: integrity, schema, every row (exit 1 when something is wrong)",
        )
    )
    chk.add_argument("campaign")
    chk.set_defaults(func=cmd_check)
    sh = with_data_dir(sub.add_parser("show", help="a campaign's design, runs and host fingerprints"))
    sh.add_argument("campaign")
    sh.add_argument(
        "--output",
        metavar="RUN_ID",
        help="print the command output kept for this run "
        "(its first and last MiB; '' lists the runs that have one)",
    )
    sh.add_argument(
        "--diff",
        action="store_true",
        help="print the uncommitted diff the campaign ran with "
        "(`git apply` it on the commit `labkit show` names)",
    )
    sh.set_defaults(func=cmd_show)
    an = with_data_dir(sub.add_parser("analyze", help="effects or ANOVA and conclusions of a campaign"))
    an.add_argument("campaign")
    an.add_argument("--response", help="metric (default: the workload's response)")
    an.add_argument("--factors", help="comma list (default: the design's factors that vary)")
    an.add_argument(
        "--alpha", type=float, default=0.05, help="the family's significance level (default 0.05)"
    )
    an.add_argument(
        "--hosts",
        choices=("block", "random"),
        default="block",
        help="hosts of a fleet as fixed blocks (conclusions about these hosts, default) or a "
        "random level (conclusions about hosts like these)",
    )
    an.add_argument(
        "--practical",
        metavar="FRACTION|variation=P",
        help="the smallest effect that matters, overriding the design's practical: a fraction of "
        "the response's mean (0.05 = 5 %%) or variation=P (P %% of the total variation)",
    )
    an.add_argument(
        "--family",
        choices=("holm", "bonferroni", "bh", "none"),
        help="the correction over the terms of the analysis (default: the design's, else holm)",
    )
    an.add_argument("--focus", metavar="FACTOR", help="answer 'does FACTOR matter?' first")
    an.add_argument(
        "--baseline",
        metavar="FACTOR=LEVEL",
        help="each level of FACTOR against LEVEL (e.g. platform=local), per configuration of the "
        "other factors: ratio with its interval and the equivalence verdict",
    )
    an.add_argument(
        "--margin",
        type=float,
        metavar="FRACTION",
        help="equivalence margin of --baseline, a fraction of the baseline's mean (default: the "
        "practical threshold of the mean, when one is declared)",
    )
    an.set_defaults(func=cmd_analyze)
    nc = sub.add_parser(
        "noise-check",
        help="a short A/A campaign: each host's and platform's noise (CV) and "
        "the minimum detectable effect of a design, before running it",
    )
    nc.add_argument(
        "--backend", default="local", help="backend or platform; several comma-separated (default local)"
    )
    nc.add_argument("--testbed", help="testbed YAML: its hosts each run the check")
    nc.add_argument("--design", help="design YAML whose minimum detectable effects to print")
    nc.add_argument("--runs", type=int, default=10, help="runs per platform, half per arm (default 10)")
    nc.add_argument("--board", type=int, default=13, help="N-queens board (default 13: about 0.1 s a run)")
    nc.add_argument("--data-dir", help="store the campaign here (default: a temporary directory, removed)")
    nc.add_argument("--keep", action="store_true", help="keep the temporary data dir")
    nc.add_argument("--backend-option", action="append", metavar="KEY=VALUE")
    nc.add_argument("--alpha", type=float, default=0.05)
    nc.add_argument("--power", type=float, default=0.8)
    nc.add_argument("--progress", action="store_true", help="show a progress bar")
    nc.set_defaults(func=cmd_noise_check)
    co = with_data_dir(
        sub.add_parser("compare", help="per-configuration drift between two campaigns of the same design")
    )
    co.add_argument("a")
    co.add_argument("b")
    co.add_argument("--response")
    co.add_argument("--alpha", type=float, default=0.05)
    co.add_argument(
        "--margin",
        type=float,
        metavar="FRACTION",
        help="equivalence margin, a fraction of a's mean (default: the practical threshold a's "
        "design declares; none: no equivalence verdict)",
    )
    co.add_argument(
        "--min-effect", type=float, default=2.0, help="smallest change (%%) called drift (default 2)"
    )
    co.set_defaults(func=cmd_compare)
    rpl = with_data_dir(
        sub.add_parser(
            "replicate",
            help="run a stored campaign's design on another backend or "
            "testbed, with a verdict of reproduction per configuration",
        )
    )
    rpl.add_argument(
        "campaign", help="the original campaign (its design, workload and parameters are run again)"
    )
    where = rpl.add_argument_group("where (one of them, or --testbed with --backend naming its platform)")
    where.add_argument(
        "--backend", help="backend to run the replica on (docker, lxd, libvirt, local, ssh, ...)"
    )
    where.add_argument("--testbed", help="testbed YAML: hosts and platforms to run the replica on")
    rpl.add_argument("--campaign-id", help="the replica's id (default <campaign>-on-<backend>)")
    rpl.add_argument(
        "--backend-option",
        action="append",
        metavar="KEY=VALUE",
        help="option of the new backend (the original's options it does not take are dropped, said)",
    )
    rpl.add_argument(
        "--margin",
        type=float,
        metavar="FRACTION",
        help="equivalence margin, a fraction of the original's mean (default: the practical "
        "threshold its design declares, else 0.05)",
    )
    rpl.add_argument("--response", help="metric compared (default: the workload's declared response)")
    rpl.add_argument("--alpha", type=float, default=0.05)
    rpl.add_argument("--timeout", type=float, default=3600, help="seconds a run may take (default 3600)")
    rpl.add_argument("--progress", action="store_true", help="show a progress bar")
    rpl.set_defaults(func=cmd_replicate)
    db = sub.add_parser(
        "dashboard", help="serve the explorer (notebooks/00_explorer.ipynb) read-only with Voila"
    )
    db.add_argument(
        "--data-dir",
        help="the campaigns shown (default: the repository's data/, or ./data outside a checkout)",
    )
    db.add_argument("--port", type=int, default=8866, help="TCP port (default 8866)")
    db.add_argument(
        "--ip", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    db.add_argument(
        "--no-token",
        action="store_true",
        help="do not ask for the token (anyone who can reach the address may browse)",
    )
    # defaults: labkit.report.dashboard's DEFAULT_* (not imported here: it would load pandas for every command)
    db.add_argument(
        "--max-kernels",
        type=int,
        metavar="N",
        help="pages served at once, at most (one kernel each, ~0.5 GB); past it a page load gets "
        "HTTP 503 (default 4)",
    )
    db.add_argument(
        "--unconnected-timeout",
        type=int,
        metavar="SECONDS",
        help="shut down a kernel whose page never connected (or was closed) after this many idle "
        "seconds (default 60)",
    )
    db.add_argument(
        "--idle-timeout",
        type=int,
        metavar="SECONDS",
        help="shut down the kernel of an open page left idle this long; the reader reloads (default 1800)",
    )
    db.set_defaults(func=cmd_dashboard)
    rp = with_data_dir(sub.add_parser("report", help="one self-contained HTML report and/or a zip bundle"))
    rp.add_argument("campaign")
    rp.add_argument("-o", "--out", help="HTML file to write")
    rp.add_argument("--bundle", help="zip to write: results CSV and Parquet, store, environment")
    rp.add_argument("--response")
    rp.add_argument("--alpha", type=float, default=0.05)
    rp.add_argument(
        "--practical",
        metavar="FRACTION|variation=P",
        help="the smallest effect that matters, overriding the design's (as for labkit analyze)",
    )
    rp.add_argument(
        "--family",
        choices=("holm", "bonferroni", "bh", "none"),
        help="the correction over the terms of the analysis (default: the design's, else holm)",
    )
    rp.set_defaults(func=cmd_report)
    ip = with_data_dir(
        sub.add_parser(
            "import",
            help="import other tools' results (STREAM, fio, sysbench, iperf3, "
            "HPCC, ab, redis-benchmark, NPB, PARSEC, CSV) as a campaign, from a manifest",
        )
    )
    ip.add_argument(
        "manifest", help="YAML manifest: campaign, workload (the parser), factors, files (docs/import.md)"
    )
    ip.set_defaults(func=cmd_import)
    vp = sub.add_parser(
        "verify",
        help="check a bundle (labkit report --bundle): digests, and every table and "
        "claim re-computed from its store",
    )
    vp.add_argument("bundle")
    vp.set_defaults(func=cmd_verify)
    return p


#: OSError numbers ``main`` reports as one line (a resource ran out), not as a traceback
_RESOURCE_ERRNOS = frozenset(
    {errno.ENOMEM, errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.EFBIG}
)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        return args.func(args)
    except LabkitError as exc:
        print(f"labkit: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `labkit list | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        # (the command line only) a second Ctrl-C while the interpreter shuts down (threads joined) would kill
        # it by SIGINT instead of exiting 130: what was interrupted is already said and safe
        if argv is None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("labkit: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    except MemoryError:
        print(
            "labkit: error: out of memory (MemoryError): the campaign's data did not fit in this "
            "machine's memory; free memory or run on a larger machine, and report the command "
            "(every step is meant to stay bounded)",
            file=sys.stderr,
        )
        return 2
    except sqlite3.DatabaseError as exc:  # damage a read-only open does not look for (O(1) open)
        print(
            f"labkit: error: the store cannot be read ({str(exc).splitlines()[0][:200] if str(exc) else exc!r}); "
            "`labkit check ID` says what is damaged",
            file=sys.stderr,
        )
        return 2
    except OSError as exc:
        if exc.errno not in _RESOURCE_ERRNOS:
            raise
        print(
            f"labkit: error: out of a system resource: {exc.strerror or exc} "
            f"({errno.errorcode.get(exc.errno or 0, exc.errno)}{': ' + str(exc.filename) if exc.filename else ''})",
            file=sys.stderr,
        )
        return 2
