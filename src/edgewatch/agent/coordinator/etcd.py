"""The coordinator's etcd client (``_EtcdClient``) and the gRPC channel options every session uses
(``_CHANNEL_OPTIONS``): ``edgewatch.pooletcd.client``, under the names the agent's parts use."""

from __future__ import annotations

from edgewatch.pooletcd.client import CHANNEL_OPTIONS as _CHANNEL_OPTIONS
from edgewatch.pooletcd.client import EtcdClient as _EtcdClient

__all__ = ["_CHANNEL_OPTIONS", "_EtcdClient"]
