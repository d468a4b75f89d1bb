"""How much labkit's libvirt backend adds over driving libvirt by hand with virsh.

Two figures, each the median over repetitions, labkit first and the plain
libvirt CLI second, and their ratio (target: at most 1.10):

* boot-to-agent-ready: from "make a VM" until the guest agent answers.
  labkit: ``backend.provision(spec)`` (overlay volume, domain XML, createXML,
  agent wait, pinning read back). By hand: ``qemu-img create`` of the same
  overlay, ``virsh create`` of the same domain XML, then
  ``virsh qemu-agent-command <dom> guest-ping`` until it answers.
* exec overhead of one command (``true``): labkit ``instance.exec(["true"])``
  against ``virsh qemu-agent-command guest-exec`` followed by
  ``guest-exec-status`` polls until it has exited.

Side by side, labkit also runs ``setsid true``: the command line it sent until every command ran
under ``setsid`` (so that a timeout could kill its process group); under QEMU TCG that second exec
costs about as much as ``true`` itself. Commands now run with no wrapper and a tag in their
environment, which a timeout's kill follows (:mod:`labkit.backends.libvirt.agent`).

Prints figures only; no timed assertions. Needs libvirtd and the VM image
(scripts/setup-libvirt.sh). Usage::

    python benchmarks/bench_libvirt.py [--boots 3] [--execs 20] [--uri qemu:///system]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labkit.backends import get_backend, new_name, teardown  # noqa: E402
from labkit.backends.libvirt.xml import domain_xml  # noqa: E402
from labkit.core.instance import InstanceSpec  # noqa: E402
from labkit.errors import BackendUnavailable  # noqa: E402

SPEC = InstanceSpec(vcpus=1, memory_mb=256, affinity="floating")


def virsh(uri: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["virsh", "-q", "-c", uri, *args], capture_output=True, text=True, check=check)


def agent(uri: str, dom: str, execute: str, arguments: dict | None = None):
    msg = {"execute": execute, **({"arguments": arguments} if arguments is not None else {})}
    proc = virsh(uri, "qemu-agent-command", dom, json.dumps(msg), check=False)
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout)["return"]


class ByHand:
    """One VM made with qemu-img + virsh from the same image and domain XML labkit uses."""

    def __init__(self, be, uri: str):
        self.be, self.uri = be, uri
        self.name = new_name("labkit-bench")
        img = be.image_info()
        self.overlay = f"{be.pool.path}/{self.name}.qcow2"
        self.log = be.pool.console_log(self.name)
        self.xml_path = Path(f"/tmp/{self.name}.xml")
        self.xml_path.write_text(
            domain_xml(
                name=self.name,
                spec=SPEC,
                cpus=None,
                domain_type=be.domain_type(),
                disk=self.overlay,
                kernel=img["kernel"],
                initrd=img["initrd"],
                cmdline=img["cmdline"],
                console_log=self.log,
            )
        )
        self.base = img["disk"]

    def boot(self, timeout: float = 300) -> float:
        t0 = time.perf_counter()
        subprocess.run(
            ["qemu-img", "create", "-q", "-f", "qcow2", "-b", self.base, "-F", "qcow2", self.overlay],
            check=True,
        )
        virsh(self.uri, "create", str(self.xml_path))
        while agent(self.uri, self.name, "guest-ping") is None:
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError(f"{self.name} did not come up in {timeout}s")
        return time.perf_counter() - t0

    def exec_true(self, argv: tuple[str, ...] = ("true",)) -> float:
        t0 = time.perf_counter()
        pid = agent(
            self.uri,
            self.name,
            "guest-exec",
            {"path": argv[0], "arg": list(argv[1:]), "capture-output": True},
        )["pid"]
        while not (agent(self.uri, self.name, "guest-exec-status", {"pid": pid}) or {}).get("exited"):
            pass
        return time.perf_counter() - t0

    def destroy(self) -> None:
        virsh(self.uri, "destroy", self.name, check=False)
        for p in (self.overlay, self.log, str(self.xml_path)):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


def median_ms(xs) -> str:
    return f"{statistics.median(xs) * 1000:9.1f} ms"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boots", type=int, default=3)
    ap.add_argument("--execs", type=int, default=20)
    ap.add_argument("--uri", default="qemu:///system")
    args = ap.parse_args(argv)

    try:
        be = get_backend("libvirt", uri=args.uri)
    except BackendUnavailable as exc:
        print(f"libvirt benchmark skipped: {exc}")
        return 0
    fp = be.fingerprint()
    print(
        f"libvirt {fp['libvirt_version']}, QEMU {fp['hypervisor_version']}, domain type "
        f"{fp['domain_type']} ({fp['domain_type_reason']}), {be.host_cpus()} host CPUs"
    )
    if be.probe_detail:
        print(f"KVM probe: {be.probe_detail.splitlines()[0][:200]}")
    print(f"spec: {SPEC}; {args.boots} boots and {args.execs} execs per side\n")
    boot_lk, boot_vh, exec_lk, exec_vh, exec_ls = [], [], [], [], []
    try:
        for k in range(args.boots):
            # alternate who goes first so drift on a shared machine hits both sides alike
            for side in ("labkit", "virsh") if k % 2 == 0 else ("virsh", "labkit"):
                if side == "labkit":
                    t0 = time.perf_counter()
                    insts = be.provision(SPEC, prefix="labkit-bench")
                    boot_lk.append(time.perf_counter() - t0)
                    try:
                        insts[0].exec(["true"])  # warm-up
                        for i in range(2 * args.execs):  # `true` and the old `setsid true`, alternating
                            argv = ["true"] if i % 2 == 0 else ["setsid", "true"]
                            t0 = time.perf_counter()
                            insts[0].exec(argv)
                            (exec_lk if i % 2 == 0 else exec_ls).append(time.perf_counter() - t0)
                    finally:
                        teardown(insts)
                else:
                    vm = ByHand(be, args.uri)
                    try:
                        boot_vh.append(vm.boot())
                        vm.exec_true()  # warm-up
                        for _ in range(args.execs):
                            exec_vh.append(vm.exec_true())
                    finally:
                        vm.destroy()
                print(f"  boot {k + 1} {side:6s}: {(boot_lk if side == 'labkit' else boot_vh)[-1]:6.2f} s")
    finally:
        be.close()

    print()
    print(f"{'median':28s} {'labkit':>12s} {'virsh':>12s} {'ratio':>7s}  (target <= 1.10)")
    for label, lk, vh in (
        ("boot to agent ready", boot_lk, boot_vh),
        ("exec `true` (per command)", exec_lk, exec_vh),
    ):
        ratio = statistics.median(lk) / statistics.median(vh)
        print(
            f"{label:28s} {median_ms(lk)} {median_ms(vh)} {ratio:7.2f}  "
            f"{'ok' if ratio <= 1.10 else 'ABOVE TARGET'}"
        )
    print(
        f"{'  labkit `setsid true`':28s} {median_ms(exec_ls)} {median_ms(exec_vh)} "
        f"{statistics.median(exec_ls) / statistics.median(exec_vh):7.2f}  (labkit's command line before: "
        f"{statistics.median(exec_ls) / statistics.median(exec_lk):.2f} x today's)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
