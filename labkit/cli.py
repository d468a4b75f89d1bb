"""Command line: ``labkit run``, ``labkit images build``, ``labkit export``, ``labkit fingerprint``."""
from __future__ import annotations

import argparse
import json
import logging
import sys

from .errors import ConfigError, LabkitError


def _parse_params(items: list[str]) -> dict:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--param {item!r}: write KEY=VALUE (VALUE may be JSON, e.g. board=12)")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def cmd_run(args) -> int:
    from .campaign import Campaign
    store = Campaign(args.design, backend=args.backend, workload=args.workload,
                     workload_params=_parse_params(args.param),
                     backend_options=_parse_params(args.backend_option),
                     campaign_id=args.campaign_id, data_dir=args.data_dir,
                     run_timeout=args.timeout).run(retry_failed=args.retry_failed)
    runs = store.runs()
    print(f"{len(runs)} runs stored in {store.path}: {runs.status.value_counts().to_dict()}")
    return 0


def cmd_images(args) -> int:
    from . import images
    spec = "docker,lxd" if args.only is None else args.only
    only = tuple(x.strip() for x in spec.split(",") if x.strip() and x.strip() != "none")
    result = images.build(targets=only, vm=args.vm, force=args.force)
    print(json.dumps(result, indent=2, default=str))
    return 0


def cmd_export(args) -> int:
    from .store import Store
    with Store.for_campaign(args.data_dir, args.campaign_id) as st:
        for path in st.export(args.out, formats=tuple(args.format.split(","))):
            print(path)
    return 0


def cmd_fingerprint(args) -> int:
    from .fingerprint import host_fingerprint
    print(json.dumps(host_fingerprint(), indent=2))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="labkit", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="run (or resume) a campaign from a YAML design")
    r.add_argument("design", help="design YAML (factors, replications, seed)")
    r.add_argument("--backend", default="local")
    r.add_argument("--workload", default="nqueens")
    r.add_argument("--param", action="append", metavar="KEY=VALUE", help="workload parameter")
    r.add_argument("--backend-option", action="append", metavar="KEY=VALUE")
    r.add_argument("--campaign-id")
    r.add_argument("--data-dir", default="data")
    r.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    r.add_argument("--retry-failed", action="store_true", help="run failed/timed-out runs again")
    r.set_defaults(func=cmd_run)

    im = sub.add_parser("images", help="build instance images")
    imsub = im.add_subparsers(dest="images_cmd", required=True)
    b = imsub.add_parser("build", help="Debian 12 rootfs -> Docker and LXD images (and a VM disk with --vm)")
    b.add_argument("--vm", action="store_true", help="also build the libvirt VM disk")
    b.add_argument("--force", action="store_true", help="rebuild even if cached")
    b.add_argument("--only", help="comma list of docker,lxd; 'none' or '' for neither; default both")
    b.set_defaults(func=cmd_images)

    e = sub.add_parser("export", help="write results.csv/parquet of a campaign")
    e.add_argument("campaign_id")
    e.add_argument("--data-dir", default="data")
    e.add_argument("--out", help="directory (default beside the store)")
    e.add_argument("--format", default="csv,parquet")
    e.set_defaults(func=cmd_export)

    f = sub.add_parser("fingerprint", help="print this host's fingerprint")
    f.set_defaults(func=cmd_fingerprint)
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except LabkitError as exc:
        print(f"labkit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("labkit: interrupted; run the same command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
