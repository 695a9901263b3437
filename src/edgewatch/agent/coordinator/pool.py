"""``PoolCoordinator``, one agent's membership in its pool's coordinator, composed of its parts:
``Session`` (session.py) builds on ``Election`` (election.py), which builds on ``LeaderKeyWatch``
(leaderkey.py) and ``Forwarding`` (forwarding.py), all on ``CoordinatorState`` (state.py: the
constructor, the shared state and the read-only view)."""

from __future__ import annotations

from edgewatch.agent.coordinator.session import Session

__all__ = ["PoolCoordinator"]


class PoolCoordinator(Session):
    """One agent's membership in its pool's coordinator (see the package docstring,
    ``edgewatch.agent.coordinator``).

    Args (keyword-only):
        url: the pool etcd's client URL, ``http://host:port`` or ``https://host:port``.
        pool: node pool name (DNS-1123 label).
        node: this node's name.
        kube: cloud API client; used only by the leader, to forward and to sync.
        cloud_ok: this node's own cloud link state (cheap; read on :meth:`cloud_link_changed` and
            every ``cloud_recheck_s``).
        verdict_of: the peer verdict of a node: "healthy", "unhealthy" or "unknown".
        signer: this node's keyring: what it writes into its pool-cache area while it leads is
            sealed with its node key (``edgewatch.core.seal``).
        config: timings, see ``CoordinatorConfig``.
        tls: client-certificate TLS (required by a production etcd); needs an https URL.
        registry: where the metrics are registered.
        pool_resources: the pool-scope resources the leader caches (``edgewatch.poolcache``);
            empty: no cache (the leader still writes ``leader-informer-sync``).
        cache_config: the leader informer's settings.
        wall: the clock forwarded renewTimes are written in (aware UTC datetime; the agent passes
            its estimate of the control plane's clock, ``edgewatch.agent.cloudclock``).

    Raises:
        CoordinatorError: (reason ``config``) bad URL, names, or TLS with an http URL.

    ``run()`` works until cancelled; cancelling it leaves this node's etcd leases to expire as if
    the process died. ``close(graceful=True)`` stops it and releases leadership at once.
    """
