"""Exec, OOM, cleanup and crash-recovery guarantees shared by the container backends.

``LifecycleContract`` is mixed into the docker and lxd test classes beside conftest's
``ContainerContract`` (it needs the class-scoped ``backend`` fixture from conftest).
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from labkit.backends import teardown
from labkit.core.instance import InstanceSpec
from labkit.errors import CommandTimeout

from .conftest import PREFIX, instances, leftovers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def campaign_prefix() -> str:
    """A campaign's instance prefix as Campaign makes it: ``labkit-<id>--``."""
    return f"{PREFIX}-{secrets.token_hex(3)}--"  # inside this session's prefix (see conftest)


class LifecycleContract:
    backend_name = "?"

    def stop(self, backend, inst) -> None:
        """Stop ``inst`` without removing it (a leftover in the 'stopped' state)."""
        raise NotImplementedError

    def test_timeout_kills_a_tree_that_left_its_process_group(self, backend):
        with instances(backend, InstanceSpec(memory_mb=64)) as (inst,):
            # `timeout` puts itself and its child in a process group of their own
            with pytest.raises(CommandTimeout) as err:
                inst.exec("timeout 300 sleep 46 & sleep 47 & sleep 48", timeout=1.5)
            res = err.value.result
            assert res.timed_out and not res.oom_killed and res.exit_code == 137
            live = [
                line
                for line in inst.exec("ps -eo stat=,args=").stdout.splitlines()
                if not line.startswith("Z")
            ]
            assert not any(re.search(r"(sleep|timeout) .*4[678]$", p) for p in live), live
            assert inst.exec("echo alive").stdout == "alive\n"

    def test_oom_is_reported_and_a_plain_sigkill_is_not(self, backend):
        with instances(backend, InstanceSpec(memory_mb=96)) as (inst,):
            killed = inst.exec("kill -KILL $$", check=False)
            assert killed.exit_code == 137 and not killed.oom_killed and not killed.timed_out
            for _ in range(2):  # the second OOM is seen too: the counter moves on
                oom = inst.exec("head -c 400m /dev/zero | tail > /dev/null", timeout=120, check=False)
                assert oom.exit_code == 137 and oom.oom_killed and not oom.timed_out, oom.describe()
                assert "OOM" in oom.describe()
            again = inst.exec("kill -KILL $$", check=False)
            assert again.exit_code == 137 and not again.oom_killed

    def test_cleanup_removes_exactly_its_prefix_in_any_state(self, backend):
        mine = campaign_prefix()
        other = mine[:-2] + "-2--"  # campaign "<id>-2": its names start with mine[:-1]
        spec = InstanceSpec(memory_mb=64)
        made = backend.provision(spec, prefix=mine) + backend.provision(spec, prefix=other)
        try:
            self.stop(backend, made[0])
            removed = backend.cleanup(mine)
            assert removed == [made[0].name]
            left = leftovers(backend)
            assert made[0].name not in left and made[1].name in left
            assert made[1].exec("echo untouched").stdout == "untouched\n"
            assert backend.list_labkit(other) == [made[1].name]
            assert backend.cleanup(mine) == []
        finally:
            teardown(made)

    def test_a_campaign_killed_with_sigkill_is_cleaned_at_its_next_start(self, backend):
        prefix = campaign_prefix()
        script = textwrap.dedent(f"""
            import sys
            from labkit.backends import get_backend
            from labkit.core.instance import InstanceSpec
            be = get_backend({self.backend_name!r})
            [inst] = be.provision(InstanceSpec(memory_mb=64, count=1), prefix={prefix!r})
            print(inst.name, flush=True)
            inst.exec("sleep 300", timeout=600)   # a run in progress when the kill comes
        """)
        env = dict(os.environ, PYTHONPATH=ROOT)
        proc = subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT
        )
        try:
            name = proc.stdout.readline().strip()
            assert name.startswith(prefix), name
            time.sleep(1)  # let the exec start inside
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
            assert backend.list_labkit(prefix) == [name]  # the killed campaign left it behind
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            removed = backend.cleanup(prefix)  # what the campaign's next start does
        assert removed == [name]
        assert backend.list_labkit(prefix) == []
