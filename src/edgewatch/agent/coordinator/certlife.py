"""How long a coordinator session may live on the client certificate it connected with (docs/security.md):
pure decisions, table-tested (``tests/unit/test_coordinator_cert_lifetime.py``).

etcd checks a client certificate at the TLS handshake only, so an open session would outlive its
certificate. Two rules end it:

- **Expiry.** A session ends no later than its certificate's end, ``certificate_expired`` (an
  error: logged and counted in ``edgewatch_coordinator_errors_total{reason}``), and no session is
  opened with a certificate already past it. The end is a time on *our monotonic clock*
  (:func:`certificate_deadline`): the validity the certificate requester recorded on receipt
  (``min(notAfter - notBefore, expirationSeconds asked)``, ``edgewatch.csr``) counted from when we
  received it. notAfter is never compared with our wall clock.
- **Rotation.** When the certificate is replaced, a session opened before that ends within
  :data:`ROTATION_JITTER_S` (a uniform draw, so a pool's nodes, which rotate at about the same
  time, do not all reconnect at once) and reconnects at once with the new one
  (``certificate_rotated``: not an error). A leader keeps leading if its lease survived the quick
  reconnect (``Election``).
"""

from __future__ import annotations

import math

__all__ = ["CERTIFICATE_EXPIRED", "CERTIFICATE_ROTATED", "ROTATION_JITTER_S", "certificate_deadline",
           "reconnect_delay", "session_end"]

ROTATION_JITTER_S = 30.0
"""A session opened with a replaced certificate ends within this many seconds of the rotation."""

CERTIFICATE_EXPIRED = "certificate_expired"
CERTIFICATE_ROTATED = "certificate_rotated"


def certificate_deadline(*, now_mono_s: float, now_wall_s: float, received_at_wall_s: float,
                         valid_s: float) -> float:
    """The monotonic time (seconds) a certificate expires: ``valid_s`` (its validity when we
    received it) from its receipt, whose age is measured on our own wall clock (``received_at``:
    written by this node at receipt, never the certificate's timestamps). A receipt in the future
    (our clock went back) has an unknown age: the certificate is taken as expired now (the
    requester, by the same rule, requests a new one at once)."""
    age_s = now_wall_s - received_at_wall_s
    if age_s < 0 or not math.isfinite(age_s):
        return now_mono_s
    return now_mono_s + valid_s - age_s


def reconnect_delay(*, draw: float, jitter_s: float = ROTATION_JITTER_S) -> float:
    """Seconds from a certificate rotation to the reconnect: ``draw`` (uniform in [0, 1)) of
    ``jitter_s``, clamped to [0, jitter_s]."""
    return min(max(draw, 0.0), 1.0) * max(jitter_s, 0.0)


def session_end(*, now_s: float, connected_at_s: float, expires_at_s: float | None,
                rotated_at_s: float | None, reconnect_at_s: float | None) -> tuple[str | None, float]:
    """Whether a session must end now, and why; all times on the monotonic clock, seconds.

    Args (keyword-only):
        now_s: now.
        connected_at_s: when the session read its certificate (opened its client).
        expires_at_s: when that certificate expires (:func:`certificate_deadline`); None: unknown
            (operator-given TLS files: no bound).
        rotated_at_s / reconnect_at_s: when the certificate was last replaced, and when a session
            opened before that must end; None: never replaced.

    Returns:
        ``(CERTIFICATE_EXPIRED, 0)``, ``(CERTIFICATE_ROTATED, 0)``, or ``(None, wait_s)``: nothing
        yet, look again within ``wait_s`` seconds (``math.inf``: only when told of a change).
    """
    if expires_at_s is not None and now_s >= expires_at_s:
        return CERTIFICATE_EXPIRED, 0.0
    wait = math.inf if expires_at_s is None else expires_at_s - now_s
    if rotated_at_s is not None and reconnect_at_s is not None and rotated_at_s >= connected_at_s:
        if now_s >= reconnect_at_s:
            return CERTIFICATE_ROTATED, 0.0
        wait = min(wait, reconnect_at_s - now_s)
    return None, wait
