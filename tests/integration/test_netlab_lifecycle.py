"""The network lab's life cycle on real namespaces: closing removes everything (processes
included) and is idempotent; a lab whose owner died is removed by ``NetLab.cleanup_stale`` and
objects no registry names by the ``cleanup`` command; a failure half-way through building the
lab or a host leaves nothing behind."""

from __future__ import annotations

import json
import secrets
import select
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from edgewatch_lab.testing.netlab import REGISTRY_DIR, NetLab, NetLabError

from _netlab import checked_lab, lab_leftovers as _lab_leftovers, netns_names as _netns_names, reap, root_links as _root_links

pytestmark = pytest.mark.root


@pytest.fixture
def lab() -> Iterator[NetLab]:
    with checked_lab() as lab:
        yield lab


def _pid_alive(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return raw.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def test_close_removes_everything_and_is_idempotent() -> None:
    lab = NetLab.create()
    try:
        lab_id = lab.lab_id
        hosts = lab.add_pool("a", 3)
        lab.cut_cloud(["a-1"])
        sleeper = hosts[1].popen(["sleep", "60"])
        assert len(_lab_leftovers(lab_id)) == 1 + 3 + 3 + 1  # bridge, veths, netns, registry
    finally:
        lab.close()
    assert _lab_leftovers(lab_id) == []
    assert sleeper.poll() == -signal.SIGKILL
    assert lab.closed
    lab.close()  # second call is a no-op
    with pytest.raises(NetLabError):
        lab.add_host("b-1", pool="b")
    with pytest.raises(NetLabError):
        hosts[0].popen(["true"])


CHILD_SCRIPT = textwrap.dedent(
    """
    import json, time
    from edgewatch_lab.testing.netlab import NetLab
    lab = NetLab.create()
    hosts = lab.add_pool("z", 2)
    sleeper = hosts[0].popen(["sleep", "300"])
    print(json.dumps({"lab_id": lab.lab_id, "sleeper": sleeper.pid}), flush=True)
    time.sleep(300)
    """
)


def test_cleanup_stale_removes_lab_of_dead_owner(lab: NetLab) -> None:
    lab.add_pool("a", 1)  # a live lab that cleanup must leave alone
    child = subprocess.Popen([sys.executable, "-c", CHILD_SCRIPT], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], 30)
        assert ready, "child lab did not start"
        info = json.loads(child.stdout.readline())
        stale_id, sleeper = info["lab_id"], info["sleeper"]
        child.kill()
        child.wait(timeout=10)
        leftovers = _lab_leftovers(stale_id)
        assert f"{stale_id}.json" in leftovers and f"{stale_id}br" in leftovers
        assert _pid_alive(sleeper)

        removed = NetLab.cleanup_stale()

        assert stale_id in removed
        assert _lab_leftovers(stale_id) == []
        assert not _pid_alive(sleeper)
        assert lab.lab_id not in removed
        assert {lab.bridge, lab.host("a-1").netns} <= _root_links() | _netns_names()
        assert lab.host("a-1").run(["true"], timeout=10).returncode == 0
    finally:
        reap(child)
        NetLab.cleanup_stale()  # owner is dead by now: removes whatever the test left


def test_cli_cleanup_removes_unregistered_objects() -> None:
    while True:
        orphan = f"ew{secrets.token_hex(2)}"
        if not _lab_leftovers(orphan):
            break
    netns = f"{orphan}-x-1"
    script = (
        f"netns add {netns}\n"
        f"link add {orphan}br type bridge\n"
        f"link add {orphan}v10 type veth peer name eth0 netns {netns}\n"
        f"link set dev {orphan}v10 master {orphan}br\n"
    )
    try:
        subprocess.run(["ip", "-batch", "-"], input=script, text=True, capture_output=True, timeout=10, check=True)
        assert len(_lab_leftovers(orphan)) == 3
        done = subprocess.run(
            [sys.executable, "-m", "edgewatch_lab.testing.netlab", "cleanup"],
            capture_output=True, text=True, timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert orphan in done.stdout
        assert _lab_leftovers(orphan) == []
    finally:
        cleanup = [f"link del dev {name}" for name in _root_links() if name.startswith(orphan)]
        cleanup += [f"netns del {name}" for name in _netns_names() if name.startswith(orphan)]
        if cleanup:
            subprocess.run(["ip", "-force", "-batch", "-"], input="\n".join(cleanup) + "\n", text=True, capture_output=True, timeout=10)


def test_failures_during_setup_leave_nothing_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    from edgewatch_lab.testing import netlab

    real_run_cmd = netlab._run_cmd

    def fail_after(pattern: str) -> Callable[..., subprocess.CompletedProcess[str]]:
        """A _run_cmd that runs matching commands for real, then reports a failure."""

        def run_cmd(argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
            result = real_run_cmd(argv, **kwargs)
            if pattern in (kwargs.get("input_text") or "") or pattern in " ".join(argv):
                raise NetLabError(f"injected failure after {pattern!r}")
            return result

        return run_cmd

    # The bridge is created but start() then fails: create() removes it and the registry file.
    before = set(REGISTRY_DIR.glob("ew*.json"))
    links_before = {name for name in _root_links() if name.startswith("ew")}
    monkeypatch.setattr(netlab, "_run_cmd", fail_after("type bridge"))
    with pytest.raises(NetLabError, match="injected"):
        NetLab.create()
    monkeypatch.setattr(netlab, "_run_cmd", real_run_cmd)
    assert set(REGISTRY_DIR.glob("ew*.json")) == before
    assert {name for name in _root_links() if name.startswith("ew")} == links_before

    lab = NetLab.create()
    lab_id = lab.lab_id
    try:
        lab.add_host("a-1", pool="a")
        # The second host is fully built, then the nft step reports a failure: it is rolled back.
        monkeypatch.setattr(netlab, "_run_cmd", fail_after("nft"))
        with pytest.raises(NetLabError, match="injected"):
            lab.add_host("a-2", pool="a")
        monkeypatch.setattr(netlab, "_run_cmd", real_run_cmd)
        assert [h.name for h in lab.hosts] == ["a-1"]
        assert f"{lab_id}-a-2" not in _netns_names()
        assert {name for name in _root_links() if name.startswith(lab_id)} == {lab.bridge, lab.host("a-1").veth}
        record = json.loads((REGISTRY_DIR / f"{lab_id}.json").read_text())
        assert record["netns"] == [lab.host("a-1").netns]
        assert lab.add_host("a-2", pool="a").name == "a-2"  # the lab is still usable
    finally:
        monkeypatch.setattr(netlab, "_run_cmd", real_run_cmd)
        lab.close()
    assert _lab_leftovers(lab_id) == []
