"""edgewatch_lab.testing.procstat: /proc parsing, pid accounting and the per-pod record (with real
child processes standing in for a simulator's containers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgewatch_lab.testing.procstat import (
    PODS_DIR,
    cpu_delta_s,
    cpu_seconds,
    descendants,
    parse_stat,
    pod_processes,
    process_table,
    record_container,
    rss_bytes,
)


def test_parse_stat_counts_fields_after_the_last_parenthesis():
    # comm "a) b (c" holds spaces and parentheses (proc(5): field 2 is free text)
    line = "42 (a) b (c) S 7 42 42 0 -1 4194560 100 0 0 0 250 35 0 0 20 0 1 0 1000 0 0"
    assert parse_stat(line) == (7, 285)


@pytest.mark.parametrize("bad", ["", "42 (x)", "42 (x) S seven 1 2 3 4 5 6 7 8 9 10 11 12", "no parens"])
def test_parse_stat_rejects_what_is_not_a_stat_line(bad):
    with pytest.raises(ValueError):
        parse_stat(bad)


def test_cpu_delta_charges_growth_and_new_processes():
    assert cpu_delta_s({1: 2.0, 2: 5.0}, {1: 3.5, 3: 1.0}) == pytest.approx(2.5)  # 1 grew 1.5, 3 is new, 2 is gone


def test_cpu_delta_a_reused_pid_is_charged_its_own_time():
    assert cpu_delta_s({1: 9.0}, {1: 0.5}) == pytest.approx(0.5)


@given(st.dictionaries(st.integers(1, 50), st.floats(0, 1e4)), st.dictionaries(st.integers(1, 50), st.floats(0, 1e4)))
def test_cpu_delta_is_never_negative_and_never_above_the_total(before, after):
    d = cpu_delta_s(before, after)
    assert 0.0 <= d <= sum(after.values()) + 1e-6


def test_this_process_is_measured():
    assert cpu_seconds(os.getpid()) > 0
    assert rss_bytes(os.getpid()) > 1 << 20
    assert cpu_seconds(2**22 + 1) == 0.0 and rss_bytes(2**22 + 1) == 0  # beyond pid_max: gone


def test_pod_processes_follow_the_record_and_the_parent(tmp_path: Path):
    """A child of this process plays a container (with its own child); a recorded pid whose parent
    is not the simulator is never charged."""
    root = tmp_path / "node"
    agent_dir, other_dir = root / PODS_DIR / "uid-1", root / PODS_DIR / "uid-2"
    agent_dir.mkdir(parents=True)
    other_dir.mkdir(parents=True)
    script = "import subprocess, time; c = subprocess.Popen(['sleep', '30']); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        record_container(agent_dir, pod="edgewatch/edgewatch-agent-x", container="agent", pid=proc.pid)
        record_container(other_dir, pod="default/stranger", container="c", pid=1)  # init: not our child
        deadline = time.monotonic() + 10
        while len(descendants(proc.pid)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        pods = pod_processes(root, simulator_pid=os.getpid())
        assert set(pods) == {"edgewatch/edgewatch-agent-x"}
        pids = pods["edgewatch/edgewatch-agent-x"]
        assert pids[0] == proc.pid and len(pids) == 2  # the container and its sleep
        assert set(pids) <= set(process_table())
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert pod_processes(root, simulator_pid=os.getpid()) == {}  # gone: nothing charged
