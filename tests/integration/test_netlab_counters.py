"""The network lab's traffic counters (``edgewatch_lab.testing.netlab.traffic``) on real
namespaces: what each host sends to its peers and to the cloud, counted after the fault drops, never
what it sends to itself; cuts, kills, late hosts and unreadable tables."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from edgewatch_lab.testing.netlab import TRAFFIC_TABLE, Host, NetLab, NetLabError, TrafficCounters

from _netlab import checked_lab, reap

pytestmark = pytest.mark.root


@pytest.fixture
def lab() -> Iterator[NetLab]:
    with checked_lab() as lab:
        yield lab


def _send_udp(host: Host, targets: list[tuple[str, int]], *, size: int = 100) -> None:
    """From inside ``host``: one ``size``-byte UDP datagram to each target (port 9, discard)."""
    script = ("import socket, sys\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
              f"for addr, n in {targets!r}:\n    for _ in range(n):\n        try:\n"
              f"            s.sendto(b'x' * {size}, (addr, 9))\n        except PermissionError:\n"
              "            pass  # dropped by a fault in the output chain\n")
    subprocess.run(host.wrap_argv([sys.executable, "-c", script]), check=True, timeout=30)


def _connect(host: Host, address: str) -> None:
    """From inside ``host``: one TCP connection attempt to ``address``:9 (refused or timed out)."""
    script = (f"import socket\ns = socket.socket()\ns.settimeout(0.5)\ntry:\n    s.connect(({address!r}, 9))\n"
              "except OSError:\n    pass\n")
    subprocess.run(host.wrap_argv([sys.executable, "-c", script]), check=True, timeout=30)


def test_traffic_counts_what_each_host_sends_to_peers_and_to_the_cloud(lab: NetLab) -> None:
    a, b, c = lab.add_pool("t", 3)
    before = lab.traffic(a.name)
    _send_udp(a, [(b.address, 5), (c.address, 2), (lab.cloud_address, 3)])
    _connect(a, b.address)
    sent = lab.traffic(a.name).delta(before)
    assert (sent.peer_packets, sent.cloud_packets) == (8, 3)  # 7 datagrams + 1 SYN to peers
    assert sent.peer_connections == 1 and sent.cloud_connections == 0
    assert sent.cloud_bytes == 3 * (100 + 28)  # IPv4 + UDP headers
    answered = lab.traffic(b.name)  # b only answered: ICMP port unreachable (rate-limited) and one RST
    assert 1 <= answered.peer_packets <= 6 and answered.peer_connections == 0 and answered.cloud_packets == 0
    # a cut host's packets to the cloud are dropped before they leave: not counted as sent
    lab.cut_cloud(a.name)
    at_cut = lab.traffic(a.name)
    _send_udp(a, [(lab.cloud_address, 4), (b.address, 1)])
    during = lab.traffic(a.name).delta(at_cut)
    assert (during.cloud_packets, during.peer_packets) == (0, 1)
    # counters survive fault changes (the fault table is rebuilt, this one is not) and a kill
    lab.heal()
    lab.kill(a.name)
    assert lab.traffic(a.name).peer_packets == at_cut.peer_packets + 1
    with pytest.raises(KeyError):
        lab.traffic("nobody")


SENDER_SCRIPT = textwrap.dedent(
    """
    import json, socket, sys
    # argv[1]: [[kind, address, port, count], ...]; kind "udp" (100-byte datagrams) or "tcp" (connects)
    for kind, addr, port, count in json.loads(sys.argv[1]):
        for _ in range(count):
            try:
                if kind == "udp":
                    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x" * 100, (addr, port))
                else:
                    with socket.create_connection((addr, port), timeout=1.0):
                        sys.exit("connected: nothing should listen there")
            except OSError:
                pass  # refused (RST: bound, not listening) or dropped by a fault (EPERM, or SYNs time out)
    """
)


def _send(host: Host, plan: list[tuple[str, str, int, int]]) -> None:
    """Run SENDER_SCRIPT in ``host`` through :meth:`Host.run`."""
    host.run([sys.executable, "-c", SENDER_SCRIPT, json.dumps(plan)], timeout=30, check=True)


def test_traffic_two_hosts_exact_counts_cut_kill_and_errors(lab: NetLab) -> None:
    a = lab.add_host("a", pool="p")  # add_host, one at a time (the other test builds with add_pool)
    b = lab.add_host("b", pool="p")
    assert lab.traffic(a.name) == lab.traffic(b.name) == TrafficCounters()  # fresh tables count from 0
    # A TCP port that refuses in the cloud (root namespace): bound, never listening, so a SYN gets a RST.
    with socket.socket() as closed_port:
        closed_port.bind((lab.cloud_address, 0))
        cloud_port = closed_port.getsockname()[1]
        a0, b0 = lab.traffic(a.name), lab.traffic(b.name)
        _send(a, [("udp", b.address, 9, 5), ("tcp", b.address, 9, 2),  # peers: 5 datagrams + 2 SYNs
                  ("udp", lab.cloud_address, 9, 3), ("tcp", lab.cloud_address, cloud_port, 1),  # cloud: 3 + 1 SYN
                  ("udp", a.address, 9, 4), ("tcp", a.address, 9, 1), ("udp", "127.0.0.1", 9, 4)])  # loopback
        sent = lab.traffic(a.name).delta(a0)
        assert (sent.peer_packets, sent.peer_connections) == (7, 2)  # own address (via lo) not a peer
        assert (sent.cloud_packets, sent.cloud_connections) == (4, 1)
        assert 5 * (100 + 28) + 2 * 40 <= sent.peer_bytes <= 5 * (100 + 28) + 2 * 80  # IPv4 bytes; SYN 40..80
        assert 3 * (100 + 28) + 40 <= sent.cloud_bytes <= 3 * (100 + 28) + 80
        answered = lab.traffic(b.name).delta(b0)  # b only answered a: 2 RSTs + rate-limited port unreachables
        assert 2 <= answered.peer_packets <= 7 and answered.peer_connections == 0
        assert (answered.cloud_packets, answered.cloud_connections) == (0, 0)
        assert answered.per_minute(30.0)["cloud_packets"] == 0.0 and sent.per_minute(30.0)["cloud_packets"] == 8.0

        # Cut from the cloud: the fault table drops in output, before postrouting, so nothing to the cloud counts.
        lab.cut_cloud(a.name)
        at_cut = lab.traffic(a.name)
        _send(a, [("udp", lab.cloud_address, 9, 3), ("tcp", lab.cloud_address, cloud_port, 1), ("udp", b.address, 9, 2)])
        during = lab.traffic(a.name).delta(at_cut)
        assert during == TrafficCounters(peer_packets=2, peer_bytes=2 * (100 + 28))
        lab.restore_cloud(a.name)  # the fault table is rebuilt; the counters carry on
        _send(a, [("udp", lab.cloud_address, 9, 1)])
        after = lab.traffic(a.name).delta(at_cut)
        assert (after.cloud_packets, after.peer_packets) == (1, 2)

    # A killed host keeps its namespace and table: still readable, and it sent nothing more.
    before_kill = lab.traffic(a.name)
    lab.kill(a.name)
    assert lab.traffic(a.name) == before_kill
    # A host added later has its own table; an unreadable table is a NetLabError.
    c = lab.add_host("c", pool="q")
    assert lab.traffic(c.name) == TrafficCounters()
    c.run(["nft", "delete", "table", "inet", TRAFFIC_TABLE], timeout=10, check=True)
    with pytest.raises(NetLabError):
        lab.traffic(c.name)
    with pytest.raises(KeyError):
        lab.traffic("nobody")
    lab.close()
    with pytest.raises(NetLabError, match="closed"):
        lab.traffic(b.name)


ANSWERER_SCRIPT = textwrap.dedent(
    """
    import socket, sys
    # argv[1]: address to listen on; argv[2]: bytes to send to whoever connects, then close
    srv = socket.socket()
    srv.bind((sys.argv[1], 0))
    srv.listen(1)
    print(srv.getsockname()[1], flush=True)
    conn, _ = srv.accept()
    conn.sendall(b"m" * int(sys.argv[2]))
    conn.close()
    """
)


def test_answers_to_the_clouds_own_connections_are_counted_apart(lab: NetLab) -> None:
    """What a host sends back on a connection the cloud opened (the lab reading an agent's
    /metrics every second) is the lab measuring, not the system: counted as cloud_answers, never
    as cloud traffic (it was charged to edgewatch, ~200 KiB a minute per node, 2026-11-27)."""
    a = lab.add_host("a", pool="p")
    size = 200_000
    before = lab.traffic(a.name)
    answerer = a.popen([sys.executable, "-c", ANSWERER_SCRIPT, a.address, str(size)], stdout=subprocess.PIPE, text=True)
    try:
        assert answerer.stdout is not None
        port = int(answerer.stdout.readline())
        got = 0
        with socket.create_connection((a.address, port), timeout=10) as sock:  # from the cloud (root namespace)
            while chunk := sock.recv(65536):
                got += len(chunk)
        assert got == size
        assert answerer.wait(timeout=10) == 0
    finally:
        reap(answerer)
    sent = lab.traffic(a.name).delta(before)
    assert sent.cloud_packets == sent.cloud_bytes == sent.cloud_connections == 0
    assert size < sent.cloud_answer_bytes < size * 1.2  # the payload and its headers (SYN-ACK, FIN included)
    assert sent.cloud_answer_packets >= 3
    # the host's own connection to the cloud still counts as cloud traffic, not as an answer
    _send_udp(a, [(lab.cloud_address, 2)])
    assert lab.traffic(a.name).delta(before).cloud_packets == 2
