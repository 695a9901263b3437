"""Per-pool coordinator URLs from the ``edgewatch-config`` ConfigMap: key ``poolCoordinators``.

What it is for
    One agent DaemonSet serves every node pool, but each pool has its own coordinator (a small
    etcd, as in OpenYurt's Yurt-Coordinator). The ConfigMap maps pool names to etcd client URLs, as a
    YAML mapping in one string value::

        data:
          poolCoordinators: |
            a: http://198.18.0.10:2379
            factory-7: https://etcd.factory-7.example:2379
            factory-8: auto

    ``auto`` (:data:`AUTO`): edgewatch runs the pool's coordinator itself (the controller keeps a
    coordinator Deployment pinned to the pool's nodes and publishes where it runs now in the
    ConfigMap ``edgewatch-pool-coordinators``; docs/install.md). Such pools are in
    :attr:`PoolCoordinators.auto`, not in ``urls``.

    An agent started without ``--coordinator`` looks up its own pool (the node label
    ``edgewatch.io/pool``, or ``--pool``) here (:meth:`PoolCoordinators.url_for`).

Validation (untrusted input: anyone who can edit the ConfigMap)
    The value must be empty or a YAML mapping (at most :data:`MAX_POOLS` entries) from a pool name
    (a DNS-1123 label, at most 63 characters) to a URL ``http://HOST[:PORT]`` or
    ``https://HOST[:PORT]`` (port 1-65535, default 2379; no credentials, path, query or fragment).
    A value that is not such a mapping is refused as a whole (:func:`parse_pool_coordinators`
    raises); a single bad entry is dropped and reported in :attr:`PoolCoordinators.problems` (its
    pool in :attr:`PoolCoordinators.invalid`), so one typo does not take the coordinator away from
    every other pool. The agent keeps a pool's previous valid URL when its new one is invalid.

Limits
    Pure: no I/O, no DNS lookups (a host name is checked for form only). YAML is read with
    ``yaml.safe_load`` (no object construction); anchors and aliases are YAML's own and are
    bounded by the size of a ConfigMap (1 MiB).
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import yaml

from edgewatch.core.types import is_dns1123_label

__all__ = [
    "AUTO",
    "DEFAULT_ETCD_PORT",
    "MAX_POOLS",
    "PoolCoordinators",
    "check_coordinator_url",
    "is_pool_name",
    "parse_pool_coordinators",
]

DEFAULT_ETCD_PORT: Final = 2379
"""etcd's client port, used when a URL names none."""

AUTO: Final = "auto"
"""The ``poolCoordinators`` value that asks edgewatch to run the pool's coordinator."""

MAX_POOLS: Final = 10_000
"""Most entries accepted in one mapping."""

_URL_FORM: Final = "expected http://HOST:PORT or https://HOST:PORT (the pool's etcd client URL)"

_HOST_LABEL: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_]*[A-Za-z0-9])?")


def is_pool_name(value: object) -> bool:
    """Whether ``value`` is a valid pool name: a DNS-1123 label of 1-63 characters (it becomes
    part of etcd keys, so no dots or slashes). Never raises."""
    return is_dns1123_label(value)


def _host_ok(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    if not 0 < len(host) <= 253 or not host.isascii():
        return False
    return all(_HOST_LABEL.fullmatch(part) for part in host.rstrip(".").split("."))


def check_coordinator_url(url: object) -> str:
    """Validate a coordinator URL and return it normalised as ``scheme://host:port`` (IPv6 hosts
    in brackets).

    Raises:
        ValueError: not a string, a scheme other than http/https, no or an invalid host, a port
            out of 1-65535, credentials, a path, query or fragment; the message says what was
            wrong and the form expected.
    """
    if not isinstance(url, str):
        raise ValueError(f"coordinator URL must be a string, got {type(url).__name__}; {_URL_FORM}")
    text = url.strip()
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"invalid coordinator URL {text!r:.200}: {exc}; {_URL_FORM}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"unsupported scheme {parts.scheme!r:.20} in coordinator URL {text!r:.200}; {_URL_FORM}")
    if parts.username or parts.password:
        raise ValueError(f"credentials in a coordinator URL are not supported (use client certificates); {_URL_FORM}")
    host = parts.hostname or ""
    if not host or not _host_ok(host):
        raise ValueError(f"no valid host in coordinator URL {text!r:.200}; {_URL_FORM}")
    if port == 0:
        raise ValueError(f"port 0 in coordinator URL {text!r:.200}; {_URL_FORM}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"coordinator URL {text!r:.200} must not have a path or query; {_URL_FORM}")
    shown = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{shown}:{port or DEFAULT_ETCD_PORT}"


@dataclass(frozen=True)
class PoolCoordinators:
    """The valid entries of ``poolCoordinators`` (pool -> normalised URL), the pools whose
    coordinator edgewatch runs (``auto``), one human-readable line per dropped entry, and the
    (valid) pool names whose URL was invalid (a caller may keep their previous URL)."""

    urls: Mapping[str, str] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    invalid: frozenset[str] = frozenset()
    auto: frozenset[str] = frozenset()

    def url_for(self, pool: str | None) -> str | None:
        """The coordinator URL of ``pool`` (None: no pool, or no valid entry for it)."""
        return self.urls.get(pool) if pool else None


def parse_pool_coordinators(text: object) -> PoolCoordinators:
    """Parse the ``poolCoordinators`` ConfigMap value (see the module docstring).

    An absent (None), empty or whitespace-only value, or YAML ``null``/``{}``, means no pool has a
    coordinator. Entries with an invalid pool name or URL are dropped, each with a line in
    ``problems``.

    Raises:
        ValueError: ``text`` is not a string, not YAML, not a mapping, or has more than
            :data:`MAX_POOLS` entries.
    """
    if text is None:
        return PoolCoordinators()
    if not isinstance(text, str):
        raise ValueError(f"poolCoordinators must be a string holding YAML, got {type(text).__name__}")
    if not text.strip():
        return PoolCoordinators()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"poolCoordinators is not valid YAML: {first:.200}") from None
    if data is None:
        return PoolCoordinators()
    if not isinstance(data, dict):
        raise ValueError(f"poolCoordinators must be a YAML mapping 'pool: URL', got a {type(data).__name__}")
    if len(data) > MAX_POOLS:
        raise ValueError(f"poolCoordinators has {len(data)} entries; at most {MAX_POOLS}")
    urls: dict[str, str] = {}
    problems: list[str] = []
    invalid: set[str] = set()
    auto: set[str] = set()
    for pool, url in data.items():
        if not is_pool_name(pool):
            problems.append(f"pool name {str(pool)!r:.80} is not a DNS-1123 label (lower-case, at most 63 characters)")
            continue
        if isinstance(url, str) and url.strip() == AUTO:
            auto.add(pool)
            continue
        try:
            urls[pool] = check_coordinator_url(url)
        except ValueError as exc:
            problems.append(f"pool {pool}: {exc}")
            invalid.add(pool)
    return PoolCoordinators(urls=urls, problems=tuple(problems), invalid=frozenset(invalid), auto=frozenset(auto))
