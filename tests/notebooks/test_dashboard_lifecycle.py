"""``labkit dashboard`` owns its children (issue 47, finding 4), tried on the real command.

Each test starts ``labkit dashboard`` on a free port of 127.0.0.1 (tests/support/dashboard.py),
loads the page over plain HTTP (its websocket is never opened), finds Voila and the kernels by
ancestry, and kills on the way out everything it saw:

* page loads that never connect: never more than ``--max-kernels`` kernels at once (the loads
  past it answered 503 "busy"), and the kernels are shut down after ``--unconnected-timeout``;
* SIGTERM, SIGINT, SIGHUP to ``labkit dashboard``: Voila and its kernel gone within 5 s, the
  port closed, one line saying it stopped;
* SIGKILL of ``labkit dashboard``: Voila and its kernel gone within 5 s all the same.

The only duration asserted is the issue's 5 s; everything else is polled with generous deadlines.
"""
from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.dashboard import STOP_BOUND, running_dashboard

pytest.importorskip("voila")

#: generous: a kernel runs the explorer before it can be idle (long on a loaded 2-core machine)
SLOW = 600


def _one_kernel_after_a_load(dash) -> list:
    status, body = dash.load()
    assert status == 200, body[-2000:]
    kernels = dash.wait_for(dash.kernels, 60)
    assert len(kernels) == 1, f"one page load: {len(kernels)} kernels\n{dash.output()[-3000:]}"
    assert len(dash.voila()) == 1
    return kernels


@pytest.mark.parametrize("sig,ignored", [(signal.SIGTERM, ()), (signal.SIGINT, ()),
                                         (signal.SIGINT, (signal.SIGINT,)), (signal.SIGHUP, ())],
                         ids=["SIGTERM", "SIGINT", "SIGINT-started-with-&", "SIGHUP"])
def test_a_stop_signal_ends_voila_and_its_kernels_within_5_s(tmp_path, sig, ignored):
    """SIGINT-started-with-&: a shell's ``&`` starts it with SIGINT ignored; SIGINT stops it all the same."""
    with running_dashboard(tmp_path, f"--unconnected-timeout={SLOW}", ignored=ignored) as dash:
        _one_kernel_after_a_load(dash)
        before = dash.processes()
        dash.proc.send_signal(sig)
        left = dash.wait_for(lambda: not dash.left() and dash.proc.poll() is not None, STOP_BOUND)
        assert left, (f"{sig.name}: still running {STOP_BOUND:g} s later: "
                      f"{[(p.pid, ' '.join(p.cmdline())[:80]) for p in dash.left()]}"
                      f", labkit {'ended' if dash.proc.poll() is not None else 'running'}\n{dash.output()[-3000:]}")
        assert len(before) >= 2                      # Voila and the kernel were there to be stopped
        assert not dash.answers()                     # nothing serves the page (with the old token) any more
        assert dash.proc.returncode == 0
        assert f"labkit dashboard: stopped on {sig.name}: Voila and 1 kernel ended" in dash.output()


def test_voila_and_its_kernels_die_with_a_killed_labkit(tmp_path):
    with running_dashboard(tmp_path, f"--unconnected-timeout={SLOW}") as dash:
        _one_kernel_after_a_load(dash)
        before = dash.processes()
        dash.proc.send_signal(signal.SIGKILL)
        dash.proc.wait(30)
        gone = dash.wait_for(lambda: not dash.left(), STOP_BOUND)
        assert gone, (f"after SIGKILL of labkit dashboard, still running {STOP_BOUND:g} s later: "
                      f"{[(p.pid, ' '.join(p.cmdline())[:80]) for p in dash.left()]}")
        assert len(before) >= 2
        assert dash.wait_for(lambda: not dash.answers(), 30)


def test_page_loads_that_never_connect_are_capped_and_culled(tmp_path):
    cap, loads = 2, 6
    with running_dashboard(tmp_path, f"--max-kernels={cap}", "--unconnected-timeout=3") as dash:
        most = 0
        with ThreadPoolExecutor(loads) as pool:
            futures = [pool.submit(dash.load, SLOW) for _ in range(loads)]
            while not all(f.done() for f in futures):
                most = max(most, len(dash.kernels()))
                time.sleep(0.1)
        answers = [f.result() for f in futures]
        codes = sorted(code for code, _ in answers)
        assert most <= cap, f"{most} kernels at once with --max-kernels={cap}"
        assert codes.count(503) >= loads - cap and set(codes) <= {200, 503}, codes
        assert 200 in codes
        busy = next(body for code, body in answers if code == 503)
        assert "the dashboard is busy" in busy
        # the kernels whose pages never connected are shut down: none left, Voila still serving
        assert dash.wait_for(lambda: not dash.kernels(), SLOW, step=0.5) == True, (  # noqa: E712
            f"{len(dash.kernels())} kernels still running\n{dash.output()[-3000:]}")
        assert "no page connected to it" in dash.output()
        assert len(dash.voila()) == 1 and dash.answers()
        # and a new page is served once they are gone
        status, _ = dash.load(SLOW)
        assert status == 200


def test_kernel_limits_are_validated():
    from labkit.errors import ConfigError
    from labkit.report.dashboard import serve, voila_command
    for bad in ({"max_kernels": 0}, {"max_kernels": 1001}, {"max_kernels": True}, {"max_kernels": "4"},
                {"unconnected_timeout": 0}, {"idle_timeout": -5}, {"idle_timeout": 2.5}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            voila_command(**bad)
    with pytest.raises(ConfigError, match="grace"):
        serve(["true"], {}, grace=30)
    argv, env, _ = voila_command(max_kernels=3, unconnected_timeout=8, idle_timeout=100)
    assert "--DashboardKernelManager.max_kernels=3" in argv
    assert "--DashboardKernelManager.unconnected_timeout=8" in argv
    assert "--MappingKernelManager.cull_idle_timeout=100" in argv
    assert "--MappingKernelManager.cull_connected=True" in argv
    assert "--MappingKernelManager.cull_interval=2" in argv
    assert not any(env.get("JUPYTER_TOKEN", "-") in a for a in argv)


def test_the_cli_help_states_the_real_defaults():
    from labkit import cli
    from labkit.report import dashboard as d
    sub = next(a for a in cli.parser()._actions if a.dest == "cmd").choices["dashboard"]
    helps = {a.dest: a.help for a in sub._actions}
    assert f"(default {d.DEFAULT_MAX_KERNELS})" in helps["max_kernels"]
    assert f"(default {d.DEFAULT_UNCONNECTED_TIMEOUT})" in helps["unconnected_timeout"]
    assert f"(default {d.DEFAULT_IDLE_TIMEOUT})" in helps["idle_timeout"]

