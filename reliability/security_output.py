"""Issue 28, output caps and small inputs: real trials against labkit's exec, store, design loader,
command templates and secret redaction.

``rows()`` returns (section, row, count, must-be) for reliability/run.py. A command printing
1 GiB on the local backend (and 200 MiB on docker, lxd and ssh where they are available) runs
from a child Python process whose peak memory (VmHWM) is read before and after the exec; a
whole campaign whose ok run prints 1 GiB runs in a child whose resident size psutil samples,
and that run's output file must hold its first and last MiB and state what was printed; a
campaign whose runs fail after printing a 50 MB line stores their errors; a design file with
a key ``1:``, commands with literal braces and host facts named like secrets go through the
real code.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SECTION_OUTPUT = "output caps"
SECTION_INPUTS = "small inputs"
#: most the controller's peak memory may grow while a command prints a GiB
GROWTH_LIMIT = 100 * 2**20


def _print_rows(backend: str, size: str, nbytes: int) -> list[tuple[str, str, object, str]]:
    from labkit.backends.testing import available
    from tests.support.exec_memory import exec_in_child

    ok, why = available(backend)
    if not ok:
        return [(SECTION_OUTPUT, f"{backend}: {size} print (skipped: {why[:60]})", "", "")]
    seen = exec_in_child(backend, "labkit-rel-out-", f"head -c {size} /dev/zero | tr '\\0' a; printf END")
    return [
        (
            SECTION_OUTPUT,
            f"{backend}: {size} print: controller peak RSS growth above 100 MB",
            int(seen["growth"] > GROWTH_LIMIT),
            "0",
        ),
        (
            SECTION_OUTPUT,
            f"{backend}: {size} print: byte total wrong or tail lost",
            int(seen["out_bytes"] != nbytes + 3 or not seen["tail"].endswith("END")),
            "0",
        ),
    ]


def _campaign_rows(tmp: Path) -> list[tuple[str, str, object, str]]:
    import secrets

    from labkit.store import OUTPUT_CAP, Store
    from tests.support.exec_memory import BIG, campaign_in_child

    if os.geteuid() != 0:
        return [(SECTION_OUTPUT, "campaign printing 1 GiB (skipped: the local backend needs root)", "", "")]
    seen = campaign_in_child(str(tmp), secrets.token_hex(3), BIG.replace("200M", "1G"))
    path = tmp / seen["cid"] / "output" / f"{seen['run_id']}.log"
    with Store.for_campaign(tmp, seen["cid"], readonly=True) as st:
        text = st.run_output(seen["run_id"]) or ""
    printed = f"{2**30 + 3 + 3 * 2**20} bytes printed on stdout and stderr"
    bad = (
        not path.is_file()
        or path.stat().st_mode & 0o777 != 0o600
        or path.stat().st_size > OUTPUT_CAP + 8192
        or printed not in text
        or "aaaaaaaaaa" not in text
        or not text.rstrip().endswith("e" * 100)
    )
    return [
        (
            SECTION_OUTPUT,
            "campaign, ok run printing 1 GiB: controller RSS growth (psutil) above 100 MB",
            int(seen["rss_growth"] > GROWTH_LIMIT),
            "0",
        ),
        (
            SECTION_OUTPUT,
            "campaign, ok run printing 1 GiB: output file missing, over 2 MiB, not 0600, "
            "or without its head, tail or total",
            int(bad),
            "0",
        ),
    ]


def _stored_error_rows(tmp: Path) -> list[tuple[str, str, object, str]]:
    from labkit.design import Design
    from labkit.errors import TEXT_CAP
    from labkit.run.campaign import Campaign

    d = Design.from_dict({"factors": {"vcpus": [1, 2]}, "seed": 1})
    cmd = "head -c 50M /dev/zero | tr '\\0' x; echo; echo last words >&2; exit 3"
    st = Campaign(
        d,
        workload="command",
        workload_params={"argv": ["sh", "-c", cmd]},
        campaign_id=f"rel-out-{os.getpid()}",
        data_dir=tmp,
        progress=False,
    ).run()
    errors = [e or "" for e in st.runs()["error"]]
    return [
        (
            SECTION_OUTPUT,
            f"{len(errors)} failed runs with a 50 MB line: stored error larger than "
            f"the {TEXT_CAP >> 10} KiB cap",
            sum(len(e) > TEXT_CAP + 200 for e in errors),
            "0",
        ),
        (
            SECTION_OUTPUT,
            "failed runs with a 50 MB line: stored error without its last words",
            sum("last words" not in e for e in errors),
            "0",
        ),
    ]


def _input_rows(tmp: Path) -> list[tuple[str, str, object, str]]:
    from labkit.backends import get_backend, teardown
    from labkit.core.instance import InstanceSpec
    from labkit.core.redact import REDACTED, redact
    from labkit.design import Design
    from labkit.errors import ConfigError
    from labkit.workloads import get_workload

    designs = [
        "1: a\nzzz: 2\nfactors:\n  vcpus: [1, 2]\n",
        "null: 1\nfactors:\n  vcpus: [1, 2]\n",
        "true: 1\n2.5: x\nfactors:\n  vcpus: [1, 2]\n",
    ]
    not_config = 0
    for i, text in enumerate(designs):
        path = tmp / f"d{i}.yaml"
        path.write_text(text)
        try:
            Design.from_yaml(path)
            not_config += 1
        except ConfigError:
            pass
        except Exception:
            not_config += 1
    commands = {
        "awk '{print $2}'": "printf 'x y\\n' | awk '{print $2}'",
        "find -exec {} ;": "find . -maxdepth 1 -name marker -exec cat {} \\;",
        "${VAR}": "X=y; echo ${X}",
    }
    failed = 0
    be = get_backend("local")
    (inst,) = be.provision(InstanceSpec(vcpus=1, memory_mb=64), prefix="labkit-rel-braces-")
    try:
        inst.exec("echo y > marker")
        for argv in commands.values():
            w = get_workload("command", argv=["sh", "-c", argv + " > got"])
            try:
                w.run(inst, w.params_for({}, 1))
                failed += inst.exec(["cat", "got"]).stdout != "y\n"
            except Exception:
                failed += 1
    finally:
        teardown([inst])
    plain = {
        "spec_store_bypass": 1,
        "bypass": 1,
        "compass": 1,
        "author": 1,
        "passthrough": 1,
        "key_filename": 1,
        "known_hosts": 1,
        "hostname": 1,
    }
    secret = {
        k: 1
        for k in (
            "password",
            "passwd",
            "passphrase",
            "ssh_pass",
            "db_password",
            "api_key",
            "apikey",
            "token",
            "auth_token",
            "secret",
            "private_key",
            "pkey",
            "key_data",
            "key",
            "sshPass",
            "x-auth-token",
            "Authorization",
        )
    }
    return [
        (
            SECTION_INPUTS,
            f"{len(designs)} design files with non-text top-level keys: not a ConfigError",
            not_config,
            "0",
        ),
        (
            SECTION_INPUTS,
            f"{len(commands)} commands with literal braces: failed or wrong output",
            failed,
            "0",
        ),
        (
            SECTION_INPUTS,
            f"{len(plain)} plain names (spec_store_bypass...) redacted",
            sum(v == REDACTED for v in redact(plain).values()),
            "0",
        ),
        (
            SECTION_INPUTS,
            f"{len(secret)} secret names (db_password...) stored in clear",
            sum(v != REDACTED for v in redact(secret).values()),
            "0",
        ),
    ]


def rows() -> list[tuple[str, str, object, str]]:
    out = _print_rows("local", "1G", 2**30)
    for backend in ("docker", "lxd", "ssh"):
        out += _print_rows(backend, "200M", 200 * 2**20)
    with tempfile.TemporaryDirectory(prefix="labkit-rel-out-") as tmp:
        out += _campaign_rows(Path(tmp))
        out += _stored_error_rows(Path(tmp))
        out += _input_rows(Path(tmp))
    return out


if __name__ == "__main__":
    for row in rows():
        print(row)
