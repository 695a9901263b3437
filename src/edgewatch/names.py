"""Names edgewatch puts into the Kubernetes API: annotations, labels, taints, the Node condition,
and the peer port. One place, so agent, controller, manifests and docs agree.

Limits: only names; the meaning of each lives with the code that writes it (cited below).
"""

from __future__ import annotations

import hashlib
import re

DOMAIN = "edgewatch.io"

# Lease annotations written by whoever renews a cut-off node's Lease on its behalf
# (OpenYurt's Yurt-Coordinator design: the delegate mark lets the cloud tell "alive but cut off" from "failed").
DELEGATE_HEARTBEAT_ANNOTATION = f"{DOMAIN}/delegate-heartbeat"   # "true"
DELEGATED_BY_ANNOTATION = f"{DOMAIN}/delegated-by"               # node name of the delegate
DELEGATED_RENEW_TIME_ANNOTATION = f"{DOMAIN}/delegated-renew-time"  # the renewTime the delegate wrote
DELEGATED_VIA_ANNOTATION = f"{DOMAIN}/delegated-via"             # "peer", "coordinator" or "autonomy"

# Node condition the agents publish: the edge view (TKE Edge-style vote), visible in `kubectl describe node`.
EDGE_CONDITION_TYPE = "EdgeHealthy"
# Node condition each agent with --coordinator writes on its own node: its pool-coordinator role
# (reason Leader / Follower / Pending) and the coordinator's state.
ROLE_CONDITION_TYPE = "EdgePoolCoordinator"

# Label that groups nodes (TKE Edge's multi-region grouping); the node pool label for the coordinator.
DEFAULT_GROUP_LABEL = f"{DOMAIN}/topology-zone"
POOL_LABEL = f"{DOMAIN}/pool"

# Taints the controller owns (TKE Edge's decision table): no new pods on a disconnected node; evict from a failed one.
CLOUD_UNREACHABLE_TAINT_KEY = f"{DOMAIN}/cloud-unreachable"
FAILED_TAINT_KEY = f"{DOMAIN}/failed"
#: Kubernetes' out-of-service taint (KEP-2268, non-graceful node shutdown): kube-controller-manager force-deletes
#: the terminating pods of a NotReady node carrying it and detaches their volumes.
OUT_OF_SERVICE_TAINT_KEY = "node.kubernetes.io/out-of-service"
#: Node annotation (operator-owned): "enabled" / "disabled" overrides the ConfigMap's outOfServicePools.
OUT_OF_SERVICE_ANNOTATION = f"{DOMAIN}/out-of-service"

# Per-node override of the unknown-policy autonomy time (like OpenYurt's autonomy-duration).
AUTONOMY_DURATION_ANNOTATION = f"{DOMAIN}/autonomy-duration"

# Peer checks and vote exchange between agents (port 51005, as TKE Edge's edge-health).
DEFAULT_PEER_PORT = 51005

NODE_LEASE_NAMESPACE = "kube-node-lease"

DEFAULT_POOL_CACHE_PORT = 51007
"""The agent's pool-cache endpoint (HTTPS on loopback; kube-proxy and CoreDNS of the node read
EndpointSlices and Services there, see edgewatch.poolcache)."""

IDENTITY_NAMESPACE = "edgewatch-nodes"
"""Per-node objects named like their node, each written only by that node's own agent (enforced by
the apiserver, deploy/15-policy-agent.yaml): the ConfigMap of its public keys."""

KEY_RECORD_KEY = "keys"
"""The ConfigMap key of a node's public key record (edgewatch.core.identity.parse_key_record)."""
EXCHANGE_KEY_RECORD_KEY = "exchange-key"
"""In ``edgewatch-nodes/<node>``: the node's X25519 exchange key, signed by its identity key
(``edgewatch.core.pairkey``): the pair keys of peer protocol v6's liveness datagrams."""

EVIDENCE_ANNOTATION = f"{DOMAIN}/evidence"
"""On the Lease ``edgewatch-nodes/<node>``: the node's signed statements and the ones it carries
(edgewatch.core.evidence)."""

BEACON_LEASE_NAME = "edgewatch-beacon"
"""The Lease (in the edgewatch namespace, written by the controller only) holding the beacon."""

BEACON_ANNOTATION = f"{DOMAIN}/beacon"
"""The newest beacon token (edgewatch.core.beacon)."""

BEACON_KEY_ANNOTATION = f"{DOMAIN}/beacon-key"
"""The controller's beacon public key, base64 of the raw 32 bytes."""

CHALLENGE_ANNOTATION = f"{DOMAIN}/challenge"
"""On the beacon Lease: the nodes this beacon challenges, comma-separated node names (absent: none).
A challenged node's agent signs a statement naming this beacon at once and writes it to its evidence
Lease, proving over its own cloud link that it is alive after the beacon was issued
(edgewatch.controller.challenges). Only a hint to write sooner: the proof is the signed statement."""

ANSWERS_CHALLENGES_ANNOTATION = f"{DOMAIN}/answers-challenges"
"""On an evidence Lease: ``"v1:<incarnation>"`` when the node's agent answers the beacon's challenges
and confirms its dead votes (the incarnation of its statements: an agent of an earlier release that
keeps the annotation after a rollback signs another incarnation, so its mark no longer counts). The
controller challenges a node only if it and every member of its group with a statement carry a
current mark, so an agent that never answers is not failed for it."""

UNCONFIRMED_DEAD_ANNOTATION = f"{DOMAIN}/unconfirmed-dead"
"""On an evidence Lease: the neighbours its agent votes dead without confirming it, comma-separated
node names (absent: none): their kubelet port answers (agent down, host up) or never answered lately
(edgewatch.core.hostalive). The controller does not fail such a node on an unanswered challenge."""

SUSPECTS_ANNOTATION = f"{DOMAIN}/suspects"
"""On an evidence Lease: the neighbours its agent suspects dead, comma-separated node names (absent:
none): failing two periods, their kubelet port no longer answering (edgewatch.core.suspicion). When
a strict majority of a node's peers suspect it, the controller challenges it; an unrefuted suspicion
counts as a dead vote once the challenge goes unanswered (SWIM's suspicion subprotocol)."""

CARRY_AHEAD_ANNOTATION = f"{DOMAIN}/carry-ahead"
"""On the beacon Lease: how far past its renewTime an agent's carried renewTime may be, a Go duration
in whole seconds (edgewatch.carryahead). Agents before the control-plane clock capped their carried
renewTimes by it; the admission policy now bounds them by the control plane's clock instead."""

CARRY_UNTIL_ANNOTATION = f"{DOMAIN}/carry-until"
"""On the group index (ConfigMap ``edgewatch-groups``, written by the controller only): the latest
renewTime an agent may carry, a MicroTime on the control plane's clock, moved forward while a
controller leads (edgewatch.controller.carrywindow; the carry admission policy reads it)."""

CONTROL_PLANE_CLOCK_LEASE = ("kube-system", "kube-controller-manager")
"""(namespace, name) of the Lease whose renewTime is the carry-clock admission policy's reference:
kube-controller-manager's leader-election Lease, renewed by the leader's own clock every retry
period (2 s by default; client-go leaderelection). The node lifecycle controller that marks nodes
NotReady runs in that same process, so while this clock stops nobody marks a node NotReady either."""

# Node client certificates for the pool coordinator (docs/security.md; edgewatch.controller.csrsigner,
# https://kubernetes.io/docs/reference/access-authn-authz/certificate-signing-requests/).
COORDINATOR_CLIENT_SIGNER = f"{DOMAIN}/coordinator-client"
"""The CertificateSigningRequest ``spec.signerName`` of a node's client certificate for its pool
coordinator (etcd): subject exactly ``CN=<node>``, usage client auth, signed by the pool's CA."""

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
"""The user extra a pod-bound ServiceAccount token carries: the node its Pod runs on (Kubernetes
1.32+); the apiserver copies it into a CSR's ``spec.extra``."""

POOL_CA_PREFIX = "edgewatch-pool-ca"
"""Name prefix of a pool's CA (:func:`pool_ca_name`): the ConfigMap of its certificate alone (key
:data:`POOL_CA_CONFIGMAP_KEY`, in the edgewatch namespace, readable by agents) and the keys
``<name>.crt`` and ``<name>.key`` of the Secret :data:`POOL_CA_SECRET_NAME`."""

POOL_CA_SECRET_NAME = "edgewatch-pool-cas"
"""The Secret (edgewatch namespace, read by the controller only) holding every pool's CA, certificate
and key in PEM. One Secret, so RBAC can name it: pool names come from label values."""

POOL_CA_CONFIGMAP_KEY = "ca.crt"
"""The key of the CA certificate (PEM) in a pool CA's ConfigMap."""


def pool_ca_name(pool: str) -> str:
    """The name of ``pool``'s CA, ``edgewatch-pool-ca-<slug>-<hash>``: its ConfigMap, and the stem
    of its keys in the Secret :data:`POOL_CA_SECRET_NAME`.

    A pool is a label value (up to 63 characters of ``[A-Za-z0-9_.-]``), an object name is a
    lowercase DNS label: the slug is the value lowercased with every other character a dash, cut to
    30 characters, and the first 10 hex digits of its SHA-256 keep two pools that slug alike apart
    (the roster names' scheme, ``edgewatch.core.roster.roster_name``). 59 characters at most.
    """
    slug = re.sub(r"[^a-z0-9-]+", "-", pool.lower()).strip("-")[:30].strip("-")
    digest = hashlib.sha256(pool.encode()).hexdigest()[:10]
    return f"{POOL_CA_PREFIX}-{slug}-{digest}" if slug else f"{POOL_CA_PREFIX}-{digest}"


# The pool coordinator as edgewatch runs it (docs/install.md, ``poolCoordinators: {<pool>: auto}``).
COORDINATOR_SERVICE_ACCOUNT = "edgewatch-coordinator"
"""The ServiceAccount of the pool coordinator pods (edgewatch namespace)."""

COORDINATOR_SERVING_SIGNER = f"{DOMAIN}/coordinator-serving"
"""The CertificateSigningRequest ``spec.signerName`` of a pool coordinator's serving certificate:
usage server auth, SANs exactly the IP addresses of the node its pod runs on plus ``localhost`` and
``127.0.0.1``, signed by the pool's CA."""

COORDINATOR_ROOT_USER = "root"
"""etcd's administrator user: the CN of the client certificate the pool coordinator pod uses to
manage its etcd's users and roles (signed only for the coordinator's ServiceAccount)."""

POOL_COORDINATORS_CONFIGMAP = "edgewatch-pool-coordinators"
"""The ConfigMap (edgewatch namespace, written by the controller, read by agents) that tells where
each ``auto`` pool's coordinator runs now: key = pool, value = ``https://<node IP>:<port>``; a pool
whose coordinator pod is not Ready has no key."""

COORDINATOR_COMPONENT = "coordinator"
"""The ``app.kubernetes.io/component`` label value of pool coordinator Deployments and pods (with
``app.kubernetes.io/name: edgewatch`` and ``edgewatch.io/pool: <pool>``)."""

DEFAULT_COORDINATOR_PORT = 12379
"""The pool coordinator's etcd client port on its node (host network). Not 2379, which a node that
also runs a control-plane etcd already uses."""

DEFAULT_COORDINATOR_OPS_PORT = 12380
"""The pool coordinator pod's /healthz, /readyz and /metrics port (host network)."""


def coordinator_name(pool: str) -> str:
    """The name of ``pool``'s coordinator Deployment, ``edgewatch-coordinator-<slug>-<hash>`` (the
    scheme of :func:`pool_ca_name`; 63 characters at most)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", pool.lower()).strip("-")[:30].strip("-")
    digest = hashlib.sha256(pool.encode()).hexdigest()[:10]
    return f"edgewatch-coordinator-{slug}-{digest}" if slug else f"edgewatch-coordinator-{digest}"
