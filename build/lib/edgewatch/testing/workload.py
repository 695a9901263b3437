"""The sample workload the smoke check, tests and playground run: a Deployment spread over the
nodes behind a Service.

Limits: the pods never run a container (the kubelet simulator only reports them Running); the image
name is a label for humans.
"""

from __future__ import annotations

from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Service

APP_LABEL = {"app": "sample"}


def sample_deployment(*, namespace: str, replicas: int, name: str = "sample") -> Deployment:
    """A Deployment of ``replicas`` pods spread over nodes (topologySpreadConstraints on hostname,
    ScheduleAnyway so a short cluster still schedules everything)."""
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
                        "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": APP_LABEL},
                    }],
                    "containers": [{"name": "app", "image": "registry.invalid/sample:1",
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
