"""Seed 004's and seed 002's workloads across two libvirt guests, on the ``study`` VM image
(``labkit images build --only none --vm --profile study``, which scripts/setup-libvirt.sh builds):
Apache httpd in inst0 with ab in inst1 and ab on the host against both, MariaDB in inst0 with
sysbench OLTP from inst1, and bonnie++ (O_DIRECT) on a guest's own disk.

One provision (2 VMs, 512 MiB, 1 vCPU each; QEMU TCG on this machine) serves every workload.
Only positive figures are asserted, never a nominal rate: the guests are emulated and the
machine is shared. Afterwards no domain, disk or network named with the test's prefix remains.

Network safety: the only traffic is on the run's private network made here.
"""
from __future__ import annotations

import secrets
import shutil

import pytest

from labkit.backends import get_backend, teardown
from labkit.errors import BackendUnavailable
from labkit.instance import InstanceSpec
from labkit.testing import required

from . import workload_checks as checks

pytestmark = [pytest.mark.libvirt, pytest.mark.network, pytest.mark.slow]   # two TCG boots, ~3-5 min
IMAGE = "study"
BUILD = "labkit images build --only none --vm --profile study"


def _unavailable(why: str):
    (pytest.fail if {"libvirt", "network"} & set(required()) else pytest.skip)(why)


@pytest.fixture(scope="module")
def guests():
    if shutil.which("ab") is None:
        _unavailable("needs ab on this host (scripts/setup-tools.sh)")
    try:
        be = get_backend("libvirt", image=IMAGE)   # checks libvirtd and the image
    except BackendUnavailable as exc:
        _unavailable(f"libvirt or its {IMAGE!r} VM image is unavailable ({exc}); build it with: {BUILD}")
    pfx = f"labkit-test-lvstudy{secrets.token_hex(2)}--"
    net, insts = None, []
    try:
        net = be.create_network(pfx, 2)
        insts = be.provision(InstanceSpec(vcpus=1, memory_mb=512, count=2), prefix=pfx, network=net)
        yield be, net, insts
    finally:
        errors = teardown(insts)
        if net is not None:
            net.remove()
        try:
            assert errors == []
            assert be.list_labkit(pfx) == [] and be.list_overlays(pfx) == []
        finally:
            be.cleanup(pfx)
            be.close()


def test_the_study_image_carries_the_tools(guests):
    be, net, (a, b) = guests
    base = get_backend("libvirt")
    try:
        assert be.fingerprint()["vm_image"] != base.image_info().get("hash")   # not the base image
    finally:
        base.close()
    for tool in ("mariadbd", "bonnie++", "sysbench", "apache2", "ab"):
        assert a.exec(["sh", "-c", f"command -v {tool}"], check=False, timeout=60).ok, tool


def test_apache_in_one_guest_ab_in_the_other(guests):
    be, net, (a, b) = guests
    checks.apache_across(a, b, requests=200, concurrency=4)


def test_apache_ab_on_the_host_against_both_guests(guests):
    be, net, (a, b) = guests
    checks.apache_from_host(a, b, requests=200, concurrency=4)


def test_sysbench_oltp_against_mariadb_in_the_other_guest(guests):
    be, net, (a, b) = guests
    checks.oltp_across(a, b, table_size=500, time_s=3, timeout=60)


def test_bonnie_block_write_on_a_guest_disk(guests):
    be, net, (a, b) = guests
    checks.bonnie_in(a, size_mb=128, timeout=60)
