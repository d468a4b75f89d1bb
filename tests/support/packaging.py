"""Which labkit modules an extra enables (issue 44): used by tests/unit/test_packaging.py (every import
declared) and tests/integration/test_wheel.py (every module imports from the wheel with only its extras)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: modules whose third-party imports come from extras: module prefix -> the extras that enable it
#: (each of them alone must install what the module imports); every other module is the base's
ENABLED_BY = {
    "labkit.backends.docker": ["docker"],
    "labkit.backends.docker_ssh": ["docker"],
    "labkit.backends._ssh_settings": ["docker", "ssh"],
    "labkit.backends.hostkeys": ["docker", "ssh"],
    "labkit.backends.lxd": ["lxd"],
    "labkit.backends.libvirt": ["libvirt"],
    "labkit.backends.ssh": ["ssh"],
    "labkit.backends.ssh_channel": ["ssh"],
    "labkit.backends.ssh_control": ["ssh"],
    "labkit.backends.ssh_hosts": ["ssh"],
    "labkit.backends.ssh_network": ["ssh"],
    "labkit.backends.ssh_instance": ["ssh"],
    "labkit.backends.clouds.openstack": ["openstack"],
    "labkit.backends.clouds.cloudstack": ["cloudstack"],
    "labkit.backends.clouds.azure": ["azure"],
    "labkit.backends.clouds.base": ["openstack", "cloudstack", "azure"],
    # papermill's engine, the dashboard, the explorer's widgets, IPython display in notebooks
    "labkit.report.papermill_engine": ["notebooks"],
    "labkit.voila_kernels": ["notebooks"],
    "labkit.report.dashboard": ["notebooks"],
    "labkit.report.explore": ["notebooks"],
    "labkit.report.explore_app": ["notebooks"],
    "labkit.report.explore_data": ["notebooks"],
    "labkit.report.deferred": ["notebooks"],
    "labkit.report.notebook": ["notebooks"],
    "labkit.report.claims": ["notebooks"],
    "labkit.report.measurement": ["notebooks"],
    "labkit.cli": ["notebooks"],
}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of labkit (dotted name -> file)."""
    return {
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
        for p in sorted((root / "labkit").rglob("*.py"))
    }


def extras_of(module: str) -> list[str] | None:
    """The extras that enable ``module``, or None for the base's."""
    for prefix, extras in ENABLED_BY.items():
        if module == prefix or module.startswith(prefix + "."):
            return extras
    return None
