"""The controller's signer of the pool coordinator's certificates: approves, denies and signs
CertificateSigningRequests for ``edgewatch.io/coordinator-client`` (nodes' client certificates, and
the coordinator's ``CN=root``) and ``edgewatch.io/coordinator-serving`` (the coordinator's serving
certificate) (docs/security.md,
https://kubernetes.io/docs/reference/access-authn-authz/certificate-signing-requests/).

How: one informer of the cloud door (``edgewatch.kube.informer``) per signer, over CSRs with the
field selector ``spec.signerName=<signer>`` (nothing of another signer is listed or touched), puts
each changed request's name on one de-duplicating work queue (``edgewatch.controller.workqueue``):
one request is handled by one worker at a time. For a request with no condition yet, the pure
policy decides (``edgewatch.controller.coordinatorcsr``, which routes a node's request to
``edgewatch.controller.csrpolicy``):

* **Deny**: a ``Denied`` condition (reason ``EdgewatchPolicy<Reason>``, the rule's message) via the
  ``/approval`` subresource, and a Warning Event ``CertificateDenied`` on the request;
* **Sign** (a node's client certificate, the coordinator's root or serving one): an ``Approved``
  condition via ``/approval``, then ``status.certificate`` (the leaf PEM from the pool's CA,
  ``edgewatch.controller.poolca``) via ``/status``.

A request approved but without a certificate (an earlier try stopped between the two writes, or
someone else approved it) is decided again: signed if the policy allows it, else marked ``Failed``
via ``/status`` (a signer never issues what its policy refuses). Denied, Failed and issued requests
are left alone. Each write is a PUT of the object as last read: its resourceVersion is the
precondition, so a concurrent change is a 409, and the request is looked at again from the
informer's newer copy.

Only the leader runs this (it runs inside the reconciler). Every API call is bounded by
``api_timeout_s``; errors are logged and the request retried after ``retry_s``. Counted in
``edgewatch_controller_csr_decisions_total{result,reason}`` (result ``signed``, ``denied`` or
``failed``; reason ``ok`` or the policy's).
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
import secrets
from collections.abc import Awaitable, Callable, Collection
from typing import Any, TypeVar

from edgewatch.controller.coordinatorcsr import SERVING_CN, CoordinatorIdentity, SignRoot, SignServing, decide_api
from edgewatch.controller.csrpolicy import AgentIdentity, Deny, Ignore, Sign
from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.controller.poolca import PoolCAs, sign_client_certificate, sign_serving_certificate
from edgewatch.controller.workqueue import WorkQueue
from edgewatch.kube.api import (
    AsyncClient,
    CertificateSigningRequestApproval,
    CertificateSigningRequestStatus,
    Event,
    Node,
)
from edgewatch.kube.errors import API_ERRORS, is_conflict
from edgewatch.kube.informer import Informer, InformerConfig
from edgewatch.kube.listwatch import lister_watcher
from edgewatch.kube.resources import CERTIFICATE_SIGNING_REQUESTS
from edgewatch.kube.store import Store
from edgewatch.names import COORDINATOR_CLIENT_SIGNER, COORDINATOR_ROOT_USER, COORDINATOR_SERVING_SIGNER

__all__ = ["COMPONENT", "CsrSigner", "decided", "node_addresses"]

log = logging.getLogger(__name__)

COMPONENT = "edgewatch-controller"
_T = TypeVar("_T")


def _conditions(csr: dict[str, Any]) -> dict[str, dict[str, Any]]:
    status = csr.get("status") or {}
    conditions = status.get("conditions") if isinstance(status, dict) else None
    return {c["type"]: c for c in conditions or [] if isinstance(c, dict) and isinstance(c.get("type"), str)}


def decided(csr: dict[str, Any]) -> str | None:
    """Why a request needs nothing more: ``denied``, ``failed``, ``issued``, or None (it does)."""
    conditions = _conditions(csr)
    if "Denied" in conditions:
        return "denied"
    if "Failed" in conditions:
        return "failed"
    status = csr.get("status") or {}
    if isinstance(status, dict) and status.get("certificate"):
        return "issued"
    return None


def node_addresses(node: Node | None) -> tuple[str, ...]:
    """A Node's ``InternalIP`` and ``ExternalIP`` addresses, in its order (empty for None): what a
    coordinator's serving certificate may name."""
    status = node.status if node is not None else None
    if status is None:
        return ()
    return tuple(a.address for a in status.addresses or [] if a.type in ("InternalIP", "ExternalIP") and a.address)


_Signed = Sign | SignRoot | SignServing


def _now_text() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class CsrSigner:
    """Approves, denies and signs coordinator-client and coordinator-serving CSRs (see the module docstring).

    Args (keyword-only):
        client: the controller's API client (``deploy/11-rbac-controller.yaml``: CSRs get, list,
            watch; ``/approval`` and ``/status`` update; signer ``approve`` and ``sign``).
        metrics: the controller's metrics.
        pool_of: the pool of a covered node, or None (``csrpolicy.decide``).
        node_addresses: a node's InternalIP and ExternalIP addresses, empty if unknown (the SANs a
            coordinator's serving certificate may have; default: none, so none is signed).
        ready: True once ``pool_of`` knows every node (the Node informer's first list is in); until
            then requests wait (retried every ``retry_s``), so none is denied for a node not yet seen.
        namespace: the controller's namespace (the pool CAs).
        agent: whose node certificate requests may be signed.
        coordinator: whose serving and root certificate requests may be signed.
        workers: requests handled at once (default 2).
        api_timeout_s: bound of every API call and list page, seconds.
        watch_timeout_s: a watch silent this long is re-opened, seconds.
        retry_s: seconds before a request whose handling failed is looked at again (default 2 s).
        backoff_max_s: longest wait between two tries of a failed list or watch, seconds.
    """

    def __init__(self, *, client: AsyncClient, metrics: ControllerMetrics, pool_of: Callable[[str], str | None],
                 ready: Callable[[], bool], namespace: str = "edgewatch", agent: AgentIdentity | None = None,
                 node_addresses: Callable[[str], Collection[str]] = lambda node: (),
                 coordinator: CoordinatorIdentity | None = None, workers: int = 2, api_timeout_s: float = 10.0,
                 watch_timeout_s: float = 150.0, retry_s: float = 2.0, backoff_max_s: float = 5.0) -> None:
        self.client = client
        self.metrics = metrics
        self.pool_of = pool_of
        self.ready = ready
        self.agent = agent or AgentIdentity(namespace=namespace)
        self.coordinator = coordinator or CoordinatorIdentity(namespace=namespace)
        self.node_addresses = node_addresses
        self.workers = workers
        self.api_timeout_s = api_timeout_s
        self.retry_s = retry_s
        self.cas = PoolCAs(client=client, namespace=namespace, api_timeout_s=api_timeout_s)
        self.queue = WorkQueue()
        self.store: Store[dict[str, Any]] = Store(on_event=self._on_csr)  # the client signer's
        self.serving_store: Store[dict[str, Any]] = Store(on_event=self._on_csr)
        self.informer_config = InformerConfig(request_timeout_s=api_timeout_s, idle_timeout_s=watch_timeout_s,
                                              backoff_max_s=backoff_max_s)

    async def run(self) -> None:
        """Follow both signers' CSRs and handle them until cancelled."""
        async with asyncio.TaskGroup() as tg:
            for signer, store in ((COORDINATOR_CLIENT_SIGNER, self.store),
                                  (COORDINATOR_SERVING_SIGNER, self.serving_store)):
                informer: Informer[dict[str, Any]] = Informer(
                    source=lister_watcher(self.client, CERTIFICATE_SIGNING_REQUESTS,
                                          field_selector=f"spec.signerName={signer}"),
                    sink=store, name="csrsigner", config=self.informer_config)
                tg.create_task(informer.run())
            tg.create_task(self.queue.serve(workers=self.workers, handle=self.handle))

    def _on_csr(self, op: str, csr: dict[str, Any]) -> None:
        name = (csr.get("metadata") or {}).get("name", "")
        if op == "DELETED":
            self.queue.forget(name)
        elif decided(csr) is None:
            self.queue.add(name)

    async def _call(self, call: Awaitable[_T]) -> _T:
        async with asyncio.timeout(self.api_timeout_s):
            return await call

    async def handle(self, name: str) -> None:
        """One request from the queue: decide and write; on an API error, retry in ``retry_s``."""
        csr = self.store.objects.get(name) or self.serving_store.objects.get(name)  # CSR names are cluster-wide
        if csr is None or decided(csr) is not None:
            return
        if not self.ready():
            self.queue.add_after(name, self.retry_s)
            return
        try:
            await self._handle(name, csr)
        except (*API_ERRORS, ValueError) as exc:
            log.info("CSR %s: %s%s; retrying", name, "conflict: " if is_conflict(exc) else "",
                     str(exc)[:300] or type(exc).__name__, extra={"kind": "csr_retry", "csr": name})
            self.queue.add_after(name, self.retry_s)

    async def _handle(self, name: str, csr: dict[str, Any]) -> None:
        decision = decide_api(csr.get("spec"), agent=self.agent, coordinator=self.coordinator, pool_of=self.pool_of,
                              node_addresses=self.node_addresses)
        approved = "Approved" in _conditions(csr)
        if isinstance(decision, Ignore):  # the field selector keeps these out; never touch one
            return
        if isinstance(decision, Deny):
            if approved:
                await self._fail(name, csr, decision)
            else:
                await self._deny(name, csr, decision)
            return
        if not approved:
            csr = await self._approve(name, csr, decision)
        await self._issue(name, csr, decision)

    def _with_condition(self, csr: dict[str, Any], *, type_: str, reason: str, message: str) -> dict[str, Any]:
        body = dict(csr)
        status = dict(body.get("status") or {})
        now = _now_text()
        status["conditions"] = [*(status.get("conditions") or []), {
            "type": type_, "status": "True", "reason": reason, "message": message,
            "lastUpdateTime": now, "lastTransitionTime": now}]
        body["status"] = status
        return body

    async def _deny(self, name: str, csr: dict[str, Any], decision: Deny) -> None:
        body = self._with_condition(csr, type_="Denied", reason=_reason(decision), message=decision.message)
        await self._call(self.client.replace(CertificateSigningRequestApproval.from_dict(body), name))
        self.metrics.csr_decisions.labels(result="denied", reason=decision.reason).inc()
        log.warning("denied CSR %s: %s", name, decision.message,
                    extra={"kind": "csr_denied", "csr": name, "reason": decision.reason,
                           "requester": (csr.get("spec") or {}).get("username", "")})
        await self._event(csr, reason="CertificateDenied", message=f"{decision.reason}: {decision.message}")

    async def _fail(self, name: str, csr: dict[str, Any], decision: Deny) -> None:
        body = self._with_condition(csr, type_="Failed", reason=_reason(decision), message=decision.message)
        await self._call(self.client.replace(CertificateSigningRequestStatus.from_dict(body), name))
        self.metrics.csr_decisions.labels(result="failed", reason=decision.reason).inc()
        log.warning("approved CSR %s not signed: %s", name, decision.message,
                    extra={"kind": "csr_failed", "csr": name, "reason": decision.reason})
        await self._event(csr, reason="CertificateNotSigned", message=f"{decision.reason}: {decision.message}")

    async def _approve(self, name: str, csr: dict[str, Any], decision: _Signed) -> dict[str, Any]:
        reason, message = _approval(decision)
        body = self._with_condition(csr, type_="Approved", reason=reason, message=message)
        written = await self._call(self.client.replace(CertificateSigningRequestApproval.from_dict(body), name))
        out: dict[str, Any] = written.to_dict()
        return out

    async def _issue(self, name: str, csr: dict[str, Any], decision: _Signed) -> None:
        ca = await self.cas.get(decision.pool)
        now = dt.datetime.now(dt.UTC)
        if isinstance(decision, SignServing):
            cn = SERVING_CN
            pem = sign_serving_certificate(ca, public_key=decision.public_key, cn=cn, ips=decision.ips,
                                           dns_names=decision.dns_names, lifetime_s=decision.lifetime_s, now=now)
        else:
            cn = COORDINATOR_ROOT_USER if isinstance(decision, SignRoot) else decision.node
            pem = sign_client_certificate(ca, public_key=decision.public_key, node=cn,
                                          lifetime_s=decision.lifetime_s, now=now)
        body = dict(csr)
        body["status"] = {**(csr.get("status") or {}), "certificate": base64.b64encode(pem).decode("ascii")}
        await self._call(self.client.replace(CertificateSigningRequestStatus.from_dict(body), name))
        self.metrics.csr_decisions.labels(result="signed", reason="ok").inc()
        log.info("signed CSR %s: CN=%s, node %s, pool %s, %d s", name, cn, decision.node, decision.pool,
                 decision.lifetime_s, extra={"kind": "csr_signed", "csr": name, "node": decision.node, "cn": cn,
                                             "pool": decision.pool, "lifetime_s": decision.lifetime_s})

    async def _event(self, csr: dict[str, Any], *, reason: str, message: str) -> None:
        meta = csr.get("metadata") or {}
        now = _now_text()
        event = Event.from_dict({
            "metadata": {"name": f"{meta.get('name', 'csr')}.{secrets.token_hex(6)}", "namespace": "default"},
            "involvedObject": {"kind": "CertificateSigningRequest", "apiVersion": "certificates.k8s.io/v1",
                               "name": meta.get("name", ""), "uid": meta.get("uid", "")},
            "reason": reason, "message": message[:1000], "type": "Warning",
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        })
        try:
            await self._call(self.client.create(event))
        except API_ERRORS as exc:
            log.info("could not record event %s on CSR %s: %s", reason, meta.get("name"), exc or type(exc).__name__)


def _approval(decision: _Signed) -> tuple[str, str]:
    """The Approved condition's reason and message for what is signed."""
    if isinstance(decision, SignServing):
        return ("EdgewatchCoordinatorServingCertificate",
                f"pool coordinator serving certificate on node {decision.node} of pool {decision.pool}")
    if isinstance(decision, SignRoot):
        return ("EdgewatchCoordinatorRootCertificate",
                f"pool coordinator root client certificate on node {decision.node} of pool {decision.pool}")
    return "EdgewatchNodeClientCertificate", f"client certificate for node {decision.node} of pool {decision.pool}"


def _reason(decision: Deny) -> str:
    """A condition reason (CamelCase) for a policy reason: ``EdgewatchPolicyNodeClaim``."""
    return "EdgewatchPolicy" + "".join(part.capitalize() for part in decision.reason.split("_"))
