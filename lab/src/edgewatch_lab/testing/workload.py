"""The sample workload the smoke check, tests and playground run: a Deployment spread over the
nodes behind a Service; and the playground's one-replica StatefulSets pinned (preferred) to a node.

The image is the pod sandbox image (``registry.k8s.io/pause:3.10.2``, never pulled: the lab's real
nodes have it imported, see ``edgewatch_lab.testing.images``): on a real node (``real_nodes``) the pods
are real containers; the kubelet simulator only reports them Running.

Limits: the container serves nothing on its port; readiness is the container running.
"""

from __future__ import annotations

from lightkube.resources.apps_v1 import Deployment, StatefulSet
from lightkube.resources.core_v1 import Service

APP_LABEL = {"app": "sample"}
#: The label of a pinned StatefulSet's pods (its name as value); not ``app``, so the sample
#: Services never select them.
STATEFULSET_LABEL = "edgewatch-lab/statefulset"


def sample_deployment(*, namespace: str, replicas: int, name: str = "sample", strict: bool = False) -> Deployment:
    """A Deployment of ``replicas`` pods spread over nodes by topologySpreadConstraints on hostname.

    By default the spread is a preference (``ScheduleAnyway``), so a short cluster still schedules
    everything. ``strict=True`` makes it a rule (``DoNotSchedule``, maxSkew 1) over the nodes whose
    taints the pods do not tolerate left out (``nodeTaintsPolicy: Honor``, Kubernetes' "Pod Topology
    Spread Constraints"): every schedulable node then gets its share, which a scenario that kills a
    node needs (the scheduler's other scores, image locality and free resources, once left a real node
    with no pods under the preference), while a dead or cut-off node, tainted, does not block the
    replacements."""
    return Deployment.from_dict({
        "metadata": {"name": name, "namespace": namespace, "labels": APP_LABEL},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": APP_LABEL},
            "template": {
                "metadata": {"labels": APP_LABEL},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "topologySpreadConstraints": [{
                        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "DoNotSchedule" if strict else "ScheduleAnyway",
                        "labelSelector": {"matchLabels": APP_LABEL},
                        **({"nodeTaintsPolicy": "Honor"} if strict else {}),
                    }],
                    "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10.2",
                                    "imagePullPolicy": "IfNotPresent",
                                    "ports": [{"containerPort": 8080}]}],
                },
            },
        },
    })


def sample_service(*, namespace: str, name: str = "sample") -> Service:
    """A ClusterIP Service selecting the sample pods on port 80 -> 8080."""
    return Service.from_dict({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": APP_LABEL, "ports": [{"port": 80, "targetPort": 8080}]},
    })


def sample_headless_service(*, namespace: str, name: str = "sample-headless") -> Service:
    """A headless Service (``clusterIP: None``) selecting the sample pods: cluster DNS answers its
    name with the ready pods' addresses, so a scale changes the answer (CoreDNS in the playground)."""
    return Service.from_dict({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterIP": "None", "selector": APP_LABEL, "ports": [{"port": 8080, "targetPort": 8080}]},
    })


def pinned_statefulset(*, namespace: str, name: str, node: str) -> StatefulSet:
    """A StatefulSet of one replica (pod ``<name>-0``) that prefers ``node`` (preferred node
    affinity on ``kubernetes.io/hostname``, weight 100): scheduled there while it can be, and
    recreated elsewhere once its pod is gone. No ``serviceName`` (optional since Kubernetes 1.7,
    documented so since 1.33): nothing resolves the pod by name. No volume: what the lab measures is
    the pod's identity moving (stock Kubernetes keeps a dead node's pod Terminating forever)."""
    labels = {STATEFULSET_LABEL: name}
    return StatefulSet.from_dict({
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                        "weight": 100,
                        "preference": {"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]},
                    }]}},
                    "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10.2",
                                    "imagePullPolicy": "IfNotPresent"}],
                },
            },
        },
    })
