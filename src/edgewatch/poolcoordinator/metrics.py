"""The pool coordinator's metrics (docs/operations.md), on its own registry, served at ``/metrics``:

- ``edgewatch_pool_coordinator_etcd_restarts_total``: etcd restarts after it exited;
- ``edgewatch_pool_coordinator_acl_reconciles_total{result}``: access control reconciles, by
  result (``ok``, ``unreachable``, ``timeout``, ``denied``, ``etcd``, ``unreadable``);
- ``edgewatch_pool_coordinator_members``: the pool's Nodes (etcd users wanted);
- ``edgewatch_pool_coordinator_ready``: 1 when ``/readyz`` answers 200, else 0;
- ``edgewatch_pool_coordinator_certificate_expiry_seconds{certificate}``: seconds until the
  ``serving`` or ``root`` certificate in use expires (our monotonic clock; 0 without one);
- ``edgewatch_pool_coordinator_certificate_requests_total{certificate,result}``: CSRs by result
  (``edgewatch.csr``);
- ``edgewatch_pool_coordinator_ca_reads_total{result}``: reads of the pool CA (changed, unchanged,
  error);
- ``edgewatch_pool_coordinator_election_actions_total{action}``: the election janitor's actions;
- ``edgewatch_pool_coordinator_quota_actions_total{action}``: write-quota suspensions (read_only,
  no_area), their ends (lifted) and failed sessions (error);
- ``edgewatch_pool_coordinator_store_actions_total{action}``: the store's upkeep (compacted,
  defragmented, disarmed, long_lease, keyless, error).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["CoordinatorMetrics"]


class CoordinatorMetrics:
    """The metrics above on ``registry``; the gauges read their callables at scrape time.

    Args (keyword-only):
        registry: where they are registered.
        members: the number of member Nodes now.
        ready: whether the coordinator is ready.
        expiry: certificate name (``serving``, ``root``) -> seconds until it expires.
    """

    def __init__(self, *, registry: CollectorRegistry, members: Callable[[], float], ready: Callable[[], bool],
                 expiry: dict[str, Callable[[], float]]) -> None:
        prefix = "edgewatch_pool_coordinator"
        self.etcd_restarts = Counter(f"{prefix}_etcd_restarts", "etcd restarts after it exited.", registry=registry)
        self.acl_reconciles = Counter(f"{prefix}_acl_reconciles", "etcd access control reconciles by result.",
                                      ["result"], registry=registry)
        self.certificate_requests = Counter(f"{prefix}_certificate_requests", "Certificate signing requests by "
                                            "certificate and result.", ["certificate", "result"], registry=registry)
        self.ca_reads = Counter(f"{prefix}_ca_reads", "Periodic reads of the pool CA by result (unchanged, "
                                "changed: etcd restarted to load it, error: the CA in use kept).", ["result"],
                                registry=registry)
        self.store_actions = Counter(f"{prefix}_store_actions", "Upkeep of the pool's etcd (compacted, "
                                     "defragmented, disarmed: the store over half its quota or NOSPACE raised; "
                                     "long_lease, keyless: a lease revoked; error: a failed round).", ["action"],
                                     registry=registry)
        self.quota_actions = Counter(f"{prefix}_quota_actions", "Per-member write quotas (read_only: a "
                                     "member whose writes to its keys cost over its quota may only read; no_area: "
                                     "one over its area's bytes may not write there; lifted: a suspension over; "
                                     "error: a failed session).", ["action"], registry=registry)
        self.election_actions = Counter(f"{prefix}_election_actions", "What the coordinator did to keep the pool "
                                        "election honest (standing: a candidacy put while another led, mostly an "
                                        "honest loser of a race; long_lease, no_lease: a candidacy outliving its "
                                        "holder; departed: a former member's keys removed; error: a failed "
                                        "session).", ["action"], registry=registry)
        self.members = Gauge(f"{prefix}_members", "The pool's member Nodes.", registry=registry)
        self.members.set_function(members)
        self.ready = Gauge(f"{prefix}_ready", "1 when the coordinator is ready (/readyz), else 0.", registry=registry)
        self.ready.set_function(lambda: 1.0 if ready() else 0.0)
        self.certificate_expiry = Gauge(f"{prefix}_certificate_expiry_seconds", "Seconds until the certificate in "
                                        "use expires (0 without one).", ["certificate"], registry=registry)
        for name, seconds in expiry.items():
            self.certificate_expiry.labels(name).set_function(seconds)

    def request_result(self, certificate: str) -> Callable[[str], None]:
        """The ``on_result`` of ``certificate``'s requester: counts each result."""
        def count(result: str) -> None:
            self.certificate_requests.labels(certificate, result).inc()
        return count
