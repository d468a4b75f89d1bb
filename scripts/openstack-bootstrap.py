#!/usr/bin/python3
"""Keystone objects, network, flavors, quotas and the image of labkit's test cloud, in one process.

Called by setup-openstack.sh (Debian's python3-openstacksdk, cloud ``labkit-admin`` of
/etc/openstack/clouds.yaml); idempotent: what exists is left as it is (passwords are reset).

    openstack-bootstrap.py identity <secrets.env>
    openstack-bootstrap.py resources <image dir> <image name> <bridge cidr> <pool start> <pool end>
"""
import sys
import time

import openstack

REGION = "RegionOne"
ENDPOINTS = {"glance": ("image", "http://127.0.0.1:9292"),
             "placement": ("placement", "http://127.0.0.1:8778"),
             "nova": ("compute", "http://127.0.0.1:8774/v2.1"),
             "neutron": ("network", "http://127.0.0.1:9696")}
FLAVORS = {"labkit.small": (1, 512, 4), "labkit.medium": (2, 768, 4)}


def secrets(path):
    out = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.strip().partition("=")
            if k:
                out[k] = v
    return out


def connect():
    last = None
    for _ in range(30):
        try:
            conn = openstack.connect(cloud="labkit-admin")
            conn.list_projects()
            return conn
        except Exception as exc:  # keystone still starting
            last = exc
            time.sleep(2)
    raise SystemExit(f"openstack-bootstrap: keystone does not answer: {last}")


def identity(conn, sec):
    for p in ("service", "labkit"):
        if not conn.get_project(p, domain_id="default"):
            conn.create_project(p, domain_id="default")
    if not conn.get_role("member"):
        conn.create_role("member")
    users = [("labkit", sec["LABKIT_PASS"], "labkit", "member")]
    users += [(u, sec[f"{u.upper()}_PASS"], "service", "admin") for u in ENDPOINTS]
    for name, password, project, role in users:
        user = conn.get_user(name, domain_id="default")
        if user is None:
            user = conn.create_user(name, password=password, domain_id="default")
        else:
            conn.update_user(user.id, password=password)
        conn.grant_role(role, user=user.id, project=project, domain="default")
    for name, (stype, url) in ENDPOINTS.items():
        svc = conn.get_service(name) or conn.create_service(name, type=stype)
        have = {e.interface for e in conn.search_endpoints(filters={"service_id": svc.id})}
        for iface in ("public", "internal", "admin"):
            if iface not in have:
                conn.create_endpoint(svc.id, url=url, interface=iface, region=REGION)


def resources(conn, image_dir, image_name, cidr, start, end):
    net = conn.get_network("provider")
    if net is None:
        net = conn.create_network("provider", shared=True,
                                  provider={"network_type": "flat", "physical_network": "provider"})
    if not conn.get_subnet("provider-v4"):
        conn.create_subnet(net.id, cidr=cidr, ip_version=4, enable_dhcp=False, subnet_name="provider-v4",
                           disable_gateway_ip=True, allocation_pools=[{"start": start, "end": end}])
    for name, (vcpus, ram, disk) in FLAVORS.items():
        if not conn.get_flavor(name):
            conn.create_flavor(name, ram=ram, vcpus=vcpus, disk=disk, is_public=True)
    project = conn.get_project("labkit", domain_id="default")
    conn.set_compute_quotas(project.id, instances=6, cores=8, ram=4096)

    stamp = open(f"{image_dir}/stamp").read().strip()
    current = [i for i in conn.image.images() if i.name == image_name
               and (i.properties or {}).get("labkit_stamp") == stamp]
    if current:
        return
    for old in conn.image.images():
        if (old.properties or {}).get("labkit_image") == "1":
            conn.image.delete_image(old)
    common = {"visibility": "public", "labkit_image": "1"}
    k = conn.image.create_image(name=f"{image_name}-kernel", filename=f"{image_dir}/vmlinuz",
                                disk_format="aki", container_format="aki", **common)
    r = conn.image.create_image(name=f"{image_name}-initrd", filename=f"{image_dir}/initrd.img",
                                disk_format="ari", container_format="ari", **common)
    cmdline = open(f"{image_dir}/cmdline").read().strip()
    conn.image.create_image(name=image_name, filename=f"{image_dir}/disk.qcow2", disk_format="qcow2",
                            container_format="bare", kernel_id=k.id, ramdisk_id=r.id, os_command_line=cmdline,
                            hw_disk_bus="virtio", os_distro="debian", labkit_stamp=stamp, **common)


def main(argv):
    conn = connect()
    if argv[1] == "identity":
        identity(conn, secrets(argv[2]))
    elif argv[1] == "resources":
        resources(conn, *argv[2:7])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
