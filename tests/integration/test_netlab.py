"""Integration tests for edgewatch_lab.testing.netlab: real namespaces, real traffic, real faults.

There is no ping here, so reachability is checked with TCP connects (and UDP
echoes for the loss statistics): every host runs a small listener bound to
its own address, the cloud side is a listening socket bound to the cloud
address in the root namespace.  A probe counts as

* reachable: the connect completed;
* cut: it timed out, was refused locally by nftables (EPERM) or found no
  neighbour (EHOSTUNREACH) - i.e. nothing came back;
* anything else (notably ``refused``: a RST came back) fails both
  expectations, so a missing listener can never pass for a cut.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import inspect
import json
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from edgewatch_lab.testing.netlab import REGISTRY_DIR, Host, NetLab, NetLabError

from _netlab import checked_lab, lab_leftovers as _lab_leftovers, netns_names as _netns_names, reap, root_links as _root_links

pytestmark = pytest.mark.root

TCP_PORT = 7000
UDP_PORT = 7001
CONNECT_TIMEOUT = 1.0  # seconds; the bridge answers in well under a millisecond
CLOUD = "cloud"
CUT_STATUSES = frozenset({"timeout", "denied", "unreachable"})

LISTENER_SCRIPT = textwrap.dedent(
    """
    import selectors, socket, sys
    addr, tcp_port, udp_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    tcp = socket.socket()
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind((addr, tcp_port))
    tcp.listen(1024)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((addr, udp_port))
    sel = selectors.DefaultSelector()
    sel.register(tcp, selectors.EVENT_READ)
    sel.register(udp, selectors.EVENT_READ)
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            if key.fileobj is tcp:
                conn, _ = tcp.accept()
                conn.close()
            else:
                data, peer = udp.recvfrom(2048)
                try:
                    udp.sendto(data, peer)
                except OSError:
                    pass  # e.g. EPERM from an nft drop in the output hook
    """
)


def probe(targets: list[tuple[str, int]], timeout: float) -> list[str]:
    """TCP-connect to every (address, port) concurrently; one status per target."""
    import errno
    import socket
    import threading

    results = ["error:not-run"] * len(targets)

    def one(index: int, address: str, port: int) -> None:
        sock = socket.socket()
        sock.settimeout(timeout)
        try:
            sock.connect((address, port))
            results[index] = "ok"
        except TimeoutError:
            results[index] = "timeout"
        except ConnectionRefusedError:
            results[index] = "refused"
        except PermissionError:
            results[index] = "denied"
        except OSError as exc:
            unreachable = (errno.EHOSTUNREACH, errno.ENETUNREACH)
            results[index] = "unreachable" if exc.errno in unreachable else f"error:{exc.errno}"
        finally:
            sock.close()

    threads = [threading.Thread(target=one, args=(i, a, p)) for i, (a, p) in enumerate(targets)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


PROBE_SCRIPT = (
    inspect.getsource(probe)
    + textwrap.dedent(
        """
        import json, sys
        request = json.loads(sys.argv[1])
        targets = [tuple(t) for t in request["targets"]]
        print(json.dumps(probe(targets, request["timeout"])))
        """
    )
)


class Net:
    """A lab plus listeners on every host and on the cloud address."""

    def __init__(self, lab: NetLab) -> None:
        self.lab = lab
        self.listeners: dict[str, subprocess.Popen[str]] = {}
        self.cloud_sock = socket.socket()
        self.cloud_sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.cloud_sock.bind((lab.cloud_address, TCP_PORT))
        # Never accepted: the kernel completes handshakes into the backlog,
        # which is far larger than the number of probes a test makes.
        self.cloud_sock.listen(1024)

    def add_pool(self, pool: str, count: int) -> list[Host]:
        hosts = self.lab.add_pool(pool, count)
        for host in hosts:
            self.start_listener(host)
        return hosts

    def start_listener(self, host: Host) -> subprocess.Popen[str]:
        self.stop_listener(host.name)
        proc = host.popen(
            [sys.executable, "-c", LISTENER_SCRIPT, host.address, str(TCP_PORT), str(UDP_PORT)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.listeners[host.name] = proc
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 15)
        assert ready, f"listener on {host.name} did not start"
        assert proc.stdout.readline().strip() == "ready", f"listener on {host.name} failed: rc={proc.poll()}"
        return proc

    def stop_listener(self, name: str) -> None:
        proc = self.listeners.pop(name, None)
        if proc is not None:
            reap(proc)

    def address(self, name: str) -> str:
        return self.lab.cloud_address if name == CLOUD else self.lab.host(name).address

    def probe_from(self, src: str, dsts: list[str]) -> dict[str, str]:
        targets = [(self.address(dst), TCP_PORT) for dst in dsts]
        if src == CLOUD:
            statuses = probe(targets, CONNECT_TIMEOUT)
        else:
            request = json.dumps({"targets": targets, "timeout": CONNECT_TIMEOUT})
            done = self.lab.host(src).run([sys.executable, "-c", PROBE_SCRIPT, request], timeout=30)
            assert done.returncode == 0, f"probe from {src} failed: {done.stderr}"
            statuses = json.loads(done.stdout)
        return dict(zip(dsts, statuses, strict=True))

    def check(self, expected: dict[tuple[str, str], bool]) -> None:
        """Probe every (src, dst) pair at once and assert reachable == expected."""
        by_src: dict[str, list[str]] = {}
        for src, dst in expected:
            by_src.setdefault(src, []).append(dst)
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(by_src)) as pool:
            futures = {src: pool.submit(self.probe_from, src, dsts) for src, dsts in by_src.items()}
            observed = {(src, dst): status for src, fut in futures.items() for dst, status in fut.result().items()}
        wrong = {
            pair: f"expected {'reachable' if want else 'cut'}, got {observed[pair]}"
            for pair, want in expected.items()
            if (observed[pair] == "ok") != want or (not want and observed[pair] not in CUT_STATUSES)
        }
        assert not wrong, f"reachability mismatch: {wrong}"

    def close(self) -> None:
        for name in list(self.listeners):
            self.stop_listener(name)
        self.cloud_sock.close()


UDP_RECEIVER_SCRIPT = textwrap.dedent(
    """
    import socket, sys, time
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((sys.argv[1], int(sys.argv[2])))
    print("ready", flush=True)
    count, deadline = 0, time.monotonic() + float(sys.argv[3])
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            sock.recv(2048)
        except TimeoutError:
            break
        count += 1
    print(count, flush=True)
    """
)

UDP_SENDER_SCRIPT = textwrap.dedent(
    """
    import socket, sys
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(int(sys.argv[3])):
        try:
            sock.sendto(b"x%d" % i, (sys.argv[1], int(sys.argv[2])))
        except PermissionError:
            pass  # dropped by nftables in the output hook
    """
)


def udp_one_way(net: Net, *, src: str, dst: str, count: int = 5) -> int:
    """Send ``count`` datagrams one way between the cloud and a host; return how many arrived."""
    port = UDP_PORT + 1
    if src == CLOUD:
        host = net.lab.host(dst)
        receiver = host.popen(
            [sys.executable, "-c", UDP_RECEIVER_SCRIPT, host.address, str(port), "1.0"],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert receiver.stdout is not None
            assert receiver.stdout.readline().strip() == "ready"
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                for i in range(count):
                    sock.sendto(b"x%d" % i, (host.address, port))
            out, _ = receiver.communicate(timeout=15)
            return int(out)
        finally:
            reap(receiver)
    assert dst == CLOUD
    host = net.lab.host(src)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((net.lab.cloud_address, port))
        done = host.run([sys.executable, "-c", UDP_SENDER_SCRIPT, net.lab.cloud_address, str(port), str(count)], timeout=30)
        assert done.returncode == 0, done.stderr
        received = 0
        sock.settimeout(0.5)
        with contextlib.suppress(TimeoutError):
            while received < count:
                sock.recv(2048)
                received += 1
        return received


def full_mesh(names: list[str], cut: set[frozenset[str]] | None = None) -> dict[tuple[str, str], bool]:
    """Expectations for every ordered pair of distinct endpoints; pairs in ``cut`` are unreachable."""
    cut = cut or set()
    return {(a, b): frozenset((a, b)) not in cut for a in names for b in names if a != b}


@pytest.fixture
def lab() -> Iterator[NetLab]:
    with checked_lab() as lab:
        yield lab


@pytest.fixture
def net(lab: NetLab) -> Iterator[Net]:
    net = Net(lab)
    try:
        yield net
    finally:
        net.close()


# ---------------------------------------------------------------------------


def test_ten_hosts_are_fast_and_well_formed(lab: NetLab) -> None:
    started = time.monotonic()
    hosts = lab.add_pool("a", 10)
    elapsed = time.monotonic() - started
    assert elapsed < 5.0, f"creating 10 hosts took {elapsed:.2f}s"

    assert lab.cloud_address == f"198.18.{lab.subnet_index}.1"
    assert [h.name for h in hosts] == [f"a-{n}" for n in range(1, 11)]
    assert [h.address for h in hosts] == [f"198.18.{lab.subnet_index}.{i}" for i in range(10, 20)]
    assert all(h.netns == f"{lab.lab_id}-{h.name}" and h.pool == "a" for h in hosts)
    assert lab.hosts == tuple(hosts) and lab.pool_hosts("a") == hosts and lab.host("a-3") is hosts[2]
    assert len(lab.bridge) <= 15 and all(len(h.veth) <= 15 for h in hosts)
    assert {lab.bridge, *(h.veth for h in hosts)} <= _root_links()
    assert {h.netns for h in hosts} <= _netns_names()
    # Continued numbering.
    assert [h.name for h in lab.add_pool("a", 1)] == ["a-11"]

    addr = subprocess.run(
        ["ip", "-n", hosts[0].netns, "-j", "-4", "addr", "show", "dev", "eth0"],
        capture_output=True, text=True, timeout=10, check=True,
    )
    info = json.loads(addr.stdout)[0]
    assert info["operstate"] == "UP"
    assert [(a["local"], a["prefixlen"]) for a in info["addr_info"]] == [(hosts[0].address, 24)]

    record = json.loads((REGISTRY_DIR / f"{lab.lab_id}.json").read_text())
    assert record["owner_pid"] == os.getpid()
    assert record["subnet_index"] == lab.subnet_index
    assert set(record["netns"]) == {h.netns for h in lab.hosts}
    assert set(record["links"]) == {lab.bridge, *(h.veth for h in lab.hosts)}


def test_api_validation_and_subnet_allocation(lab: NetLab) -> None:
    lab.add_pool("a", 2)
    lab.add_host("b-1", pool="b")
    with pytest.raises(ValueError):
        lab.add_host("a-1", pool="a")  # duplicate
    with pytest.raises(ValueError):
        lab.add_host("Bad_Name", pool="a")
    with pytest.raises(KeyError):
        lab.cut_cloud(["nope"])
    with pytest.raises(KeyError):
        lab.cut_pool_cloud("nope")
    with pytest.raises(ValueError):
        lab.loss(["a-1"], 101)
    with pytest.raises(ValueError):
        lab.split("a", [["a-1"], ["a-1", "a-2"]])
    with pytest.raises(ValueError):
        lab.split("a", [["a-1"], ["b-1"]])
    # Rejected calls changed nothing.
    assert all(lab.faults(h.name).cloud_cut is False and not lab.faults(h.name).blocked_peers for h in lab.hosts)

    with pytest.raises(NetLabError):
        NetLab.create(subnet_index=lab.subnet_index)
    with NetLab.create() as other:
        assert other.subnet_index != lab.subnet_index
        assert other.lab_id != lab.lab_id
        other_id = other.lab_id
    assert _lab_leftovers(other_id) == []
    with pytest.raises(NetLabError):
        other.add_host("x-1", pool="x")


def test_baseline_cloud_and_peers_reachable(net: Net) -> None:
    net.add_pool("a", 3)
    net.check(full_mesh([CLOUD, "a-1", "a-2", "a-3"]))


def test_cut_cloud_cuts_exactly_node_cloud_both_directions(net: Net) -> None:
    net.add_pool("a", 3)
    everyone = [CLOUD, "a-1", "a-2", "a-3"]
    net.lab.cut_cloud(["a-1"])
    assert net.lab.faults("a-1").cloud_cut and not net.lab.faults("a-2").cloud_cut
    net.check(full_mesh(everyone, cut={frozenset((CLOUD, "a-1"))}))
    # One-way datagrams show that each direction is cut on its own
    # (input hook for cloud->node, output hook for node->cloud).
    assert udp_one_way(net, src=CLOUD, dst="a-1") == 0
    assert udp_one_way(net, src="a-1", dst=CLOUD) == 0

    net.lab.cut_cloud("a-1")  # idempotent
    net.lab.restore_cloud(["a-1"])
    net.check(full_mesh(everyone))
    assert udp_one_way(net, src=CLOUD, dst="a-1") == 5
    assert udp_one_way(net, src="a-1", dst=CLOUD) == 5


def test_cut_pool_cloud_only_affects_that_pool(net: Net) -> None:
    net.add_pool("a", 2)
    net.add_pool("b", 1)
    everyone = [CLOUD, "a-1", "a-2", "b-1"]
    net.lab.cut_pool_cloud("a")
    net.check(full_mesh(everyone, cut={frozenset((CLOUD, "a-1")), frozenset((CLOUD, "a-2"))}))
    net.lab.restore_pool_cloud("a")
    net.check(full_mesh(everyone))


def test_split_cuts_across_sides_only(net: Net) -> None:
    net.add_pool("a", 4)
    everyone = [CLOUD, "a-1", "a-2", "a-3", "a-4"]
    net.lab.split("a", [["a-1", "a-2"], ["a-3", "a-4"]])
    across = {frozenset((x, y)) for x in ("a-1", "a-2") for y in ("a-3", "a-4")}
    assert net.lab.faults("a-1").blocked_peers == (net.address("a-3"), net.address("a-4"))
    net.check(full_mesh(everyone, cut=across))

    net.lab.unsplit("a")
    net.check(full_mesh(everyone))


def test_loss_100_cuts_everything_but_loopback(net: Net) -> None:
    net.add_pool("a", 2)
    everyone = [CLOUD, "a-1", "a-2"]
    net.lab.loss(["a-1"], 100)
    expected = full_mesh(everyone, cut={frozenset((CLOUD, "a-1")), frozenset(("a-1", "a-2"))})
    expected[("a-1", "a-1")] = True  # own address goes over lo, which is exempt
    net.check(expected)

    net.lab.loss(["a-1"], 0)
    assert net.lab.faults("a-1").loss_percent == 0
    net.check(full_mesh(everyone))


def test_loss_50_drops_some_but_not_all(net: Net) -> None:
    (host,) = net.add_pool("a", 1)

    def echo_ratio(count: int) -> float:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sent = set()
            for i in range(count):
                payload = f"{secrets.token_hex(4)}-{i}".encode()
                sock.sendto(payload, (host.address, UDP_PORT))
                sent.add(payload)
                time.sleep(0.001)
            got: set[bytes] = set()
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline and len(got) < count:
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    data = sock.recv(2048)
                except TimeoutError:
                    break
                if data in sent:
                    got.add(data)
            return len(got) / count
        finally:
            sock.close()

    assert echo_ratio(20) == 1.0  # baseline, also warms the neighbour caches

    net.lab.loss(["a-1"], 50)
    received = echo_ratio(200)
    lost = 1.0 - received
    assert 0.05 < lost < 0.95, f"lost {lost:.0%} of 200 echoes at 50% loss"
    # Each direction drops 50% independently: ~25% of round trips survive
    # (sd ~3% for 200 samples; these bounds are > 5 sd away).
    assert 0.08 < received < 0.50, f"{received:.0%} of round trips survived, expected ~25%"

    net.lab.loss(["a-1"], 0)
    assert echo_ratio(20) == 1.0


def test_faults_compose_and_heal_restores_everything(net: Net) -> None:
    net.add_pool("a", 3)
    everyone = [CLOUD, "a-1", "a-2", "a-3"]
    lab = net.lab
    lab.cut_cloud(["a-1"])
    lab.loss(["a-1"], 100)
    net.check(full_mesh(everyone, cut={frozenset((CLOUD, "a-1")), frozenset(("a-1", "a-2")), frozenset(("a-1", "a-3"))}))

    lab.loss(["a-1"], 0)  # removing the loss keeps the cloud cut
    lab.split("a", [["a-1"], ["a-2", "a-3"]])
    lab.cut_cloud(["a-3"])
    net.check(
        full_mesh(
            everyone,
            cut={
                frozenset((CLOUD, "a-1")),
                frozenset((CLOUD, "a-3")),
                frozenset(("a-1", "a-2")),
                frozenset(("a-1", "a-3")),
            },
        )
    )

    lab.loss(["a-2"], 30)
    lab.heal()
    for host in lab.hosts:
        faults = lab.faults(host.name)
        assert (faults.cloud_cut, faults.loss_percent, faults.blocked_peers) == (False, 0, ())
    net.check(full_mesh(everyone))
    for host in lab.hosts:
        rules = host.run(["nft", "list", "table", "inet", "edgewatch_lab"], timeout=10, check=True).stdout
        assert "drop" not in rules


def test_kill_silences_host_and_revive_restores_it(net: Net) -> None:
    net.add_pool("a", 2)
    lab = net.lab
    a1 = lab.host("a-1")
    listener = net.listeners["a-1"]
    untracked = subprocess.Popen(a1.wrap_argv(["sleep", "60"]))
    try:
        net.check(full_mesh([CLOUD, "a-1", "a-2"]))

        lab.kill("a-1")
        assert lab.is_killed("a-1") and not lab.is_killed("a-2")
        assert listener.poll() == -signal.SIGKILL
        assert untracked.wait(timeout=10) == -signal.SIGKILL
        pids = subprocess.run(["ip", "netns", "pids", a1.netns], capture_output=True, text=True, timeout=10)
        assert pids.stdout.split() == []
        # A dead host is silent: no RST ("refused"), just nothing.
        net.check({(CLOUD, "a-1"): False, ("a-2", "a-1"): False, (CLOUD, "a-2"): True})

        lab.heal()  # does not revive
        assert lab.is_killed("a-1")
        net.check({(CLOUD, "a-1"): False})

        lab.revive("a-1")
        assert not lab.is_killed("a-1")
        net.start_listener(a1)
        net.check(full_mesh([CLOUD, "a-1", "a-2"]))
    finally:
        if untracked.poll() is None:
            untracked.kill()
        untracked.wait(timeout=10)
