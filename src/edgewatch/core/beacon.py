"""The controller's beacon: a signed random value issued every few seconds, which agents put into
the statements they sign, so the controller knows how fresh a statement is without trusting any
clock but its own.

Why (docs/security.md, docs/clock-skew.md): a statement signed by a node proves who said it, not
when. An agent's own timestamp cannot be compared with the controller's clock, and a sequence
number proves order, not age: a peer that recorded a node's statements could replay them after the
node died. A beacon value is random and unpredictable; a statement naming it was signed after the
controller issued it, at a time the controller noted on its own monotonic clock
(:class:`BeaconLog`). So a statement counts only while its beacon is recent, and nobody — not even
the node that signed it — can make a statement look fresher than the beacon it names.

Token (what the beacon Lease carries and agents pass to each other)::

    <generation>.<value: 32 hex>.<Ed25519 signature: 128 hex>

signed by the controller's key over ``edgewatch/beacon/v1 || 0x00 || "<generation>.<value>"``.
Agents adopt a beacon only with a valid signature and a larger generation than the one they hold,
so a peer can relay beacons to a cut-off node but cannot feed it a false one.

Pure: no clock, no I/O, no randomness of its own (the value is passed in).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from edgewatch.core.identity import NodeKey
from edgewatch.core.signing import check_domain

__all__ = ["BEACON_DOMAIN", "Beacon", "BeaconHolder", "BeaconLog", "sign_beacon", "verify_beacon"]

BEACON_DOMAIN: Final = "edgewatch/beacon/v1"
_TOKEN = re.compile(r"([0-9]{1,18})\.([0-9a-f]{32})\.([0-9a-f]{128})")
MAX_TOKEN_LENGTH: Final = 200


@dataclass(frozen=True, order=True)
class Beacon:
    """One beacon: ``generation`` (grows by one per beacon) and ``value`` (32 hex, random)."""

    generation: int
    value: str


def sign_beacon(beacon: Beacon, key: NodeKey) -> str:
    """The token of ``beacon`` signed with the controller's ``key``."""
    text = f"{beacon.generation}.{beacon.value}"
    return f"{text}.{key.sign(text.encode('ascii'), domain=BEACON_DOMAIN)}"


def verify_beacon(token: object, public: Ed25519PublicKey) -> Beacon:
    """The beacon of an untrusted ``token`` if the controller's key signed it.

    Raises:
        ValueError: not a well-formed token, or a signature that does not match.
    """
    if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH:
        raise ValueError("beacon token must be a short string")
    m = _TOKEN.fullmatch(token)
    if m is None:
        raise ValueError("beacon token must be '<generation>.<32 hex>.<128 hex>'")
    text = f"{m.group(1)}.{m.group(2)}"
    try:
        public.verify(bytes.fromhex(m.group(3)), check_domain(BEACON_DOMAIN) + text.encode("ascii"))
    except InvalidSignature:
        raise ValueError("beacon signature does not match the controller's key") from None
    return Beacon(generation=int(m.group(1)), value=m.group(2))


class BeaconLog:
    """The controller's record of the beacons it issued: value -> issue time (seconds, its own
    monotonic clock). Bounded: the oldest are forgotten past ``max_beacons`` (then a statement
    naming one counts as unknown, which is never fresher than old).

    Raises:
        ValueError: ``max_beacons`` < 1.
    """

    def __init__(self, *, max_beacons: int = 256) -> None:
        if max_beacons < 1:
            raise ValueError("max_beacons must be >= 1")
        self._max = max_beacons
        self._issued: OrderedDict[str, float] = OrderedDict()

    def record(self, value: str, *, at: float) -> None:
        """Note that ``value`` was issued at ``at`` (seconds, controller clock)."""
        self._issued[value] = at
        self._issued.move_to_end(value)
        while len(self._issued) > self._max:
            self._issued.popitem(last=False)

    def issued_at(self, value: str) -> float | None:
        """When ``value`` was issued (controller clock), or None if it is not one of ours."""
        return self._issued.get(value)

    def __len__(self) -> int:
        return len(self._issued)


class BeaconHolder:
    """An agent's current beacon: the newest one signed by the controller's key it trusts.

    The key comes from the cloud (the beacon Lease, read over the agent's authenticated API
    connection); tokens may come from the cloud or from peers. A token is adopted only if it
    verifies and has a larger generation than the current one. A new controller key (read from
    the cloud) resets the holder.
    """

    def __init__(self) -> None:
        self._public: Ed25519PublicKey | None = None
        self._public_raw: bytes | None = None
        self.beacon: Beacon | None = None
        self.token: str = ""

    @property
    def value(self) -> str:
        """The current beacon value, or "" if none."""
        return self.beacon.value if self.beacon is not None else ""

    def trust(self, public_raw: bytes) -> None:
        """Trust this controller key (raw 32 bytes, from the cloud).

        Raises:
            ValueError: not a 32-byte Ed25519 public key.
        """
        if public_raw == self._public_raw:
            return
        self._public = Ed25519PublicKey.from_public_bytes(public_raw)
        self._public_raw = bytes(public_raw)
        self.beacon, self.token = None, ""

    @property
    def trusted_key(self) -> bytes | None:
        """The controller key trusted now (raw), or None."""
        return self._public_raw

    def offer(self, token: object) -> bool:
        """Adopt ``token`` if it verifies and is newer; True if adopted. Never raises.

        The token held now, offered again (every peer envelope carries it), is not verified again:
        the same text under the same trusted key verified once already (one Ed25519 check per
        beacon instead of one per envelope received)."""
        if self._public is None or not token or token == self.token:
            return False
        try:
            beacon = verify_beacon(token, self._public)
        except ValueError:
            return False
        if self.beacon is not None and beacon.generation <= self.beacon.generation:
            return False
        self.beacon, self.token = beacon, str(token)
        return True
