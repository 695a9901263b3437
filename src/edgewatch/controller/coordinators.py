"""The controller's pool coordinator manager (docs/install.md): runs a coordinator for every pool the
``edgewatch-config`` ConfigMap marks ``auto`` (``poolCoordinators: {factory-1: auto}``) and tells
the agents where it runs now.

How: three informers (:class:`edgewatch.kube.informer.Informer`) in the edgewatch namespace follow
the ``edgewatch-config`` ConfigMap (field selector ``metadata.name``), and the Deployments and Pods
labelled ``app.kubernetes.io/component=coordinator``. Any change marks the state dirty; one worker
(changes coalesce: a burst is one pass) then, once all three have listed:

* for each ``auto`` pool, brings its Deployment to :func:`~edgewatch.controller.coordinatorspec.coordinator_deployment`:
  created if absent; replaced (PUT with the resourceVersion read) if a field we render differs
  (:func:`~edgewatch.controller.coordinatorspec.drift`); a 409 re-reads it and tries again;
* deletes the Deployments it manages (``app.kubernetes.io/managed-by=edgewatch-controller``)
  whose pool is no longer ``auto`` (background propagation: their pods go with them);
* writes the ConfigMap ``edgewatch-pool-coordinators`` with
  :func:`~edgewatch.controller.coordinatorspec.discovered_urls` of the pods, restricted to
  ``auto`` pools, only when its content changes (create, or replace with the resourceVersion read);
* sets ``edgewatch_controller_pool_coordinator_ready{pool}`` (1 / 0 per ``auto`` pool; the series
  of a pool no longer ``auto`` is removed).

Why create/replace and not server-side apply: ``edgewatch.kube.api`` exports no Deployment model,
and lightkube's ``apply`` needs one; a replace guarded by the resourceVersion needs no extra verb
and writes only when our fields drifted (an apply would be sent on every pass). Deployments go
through the client's raw HTTP handle as JSON (:func:`edgewatch.kube.http.http_client_of`).

Every API call is bounded by ``api_timeout_s``; errors are logged and the pass is retried after
``retry_s``; nothing here ends the controller. Only the leader runs it (``edgewatch.controller.main``).

Limits: an invalid ``poolCoordinators`` value keeps the previous ``auto`` set (as the agents do);
with no image configured no Deployment is written (discovery and the metric still run).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, Final, TypeVar

from edgewatch.controller.coordinatorspec import (
    MANAGED_BY,
    coordinator_deployment,
    discovered_urls,
    drift,
    pool_of,
)
from edgewatch.controller.coverage import CONFIGMAP_NAME
from edgewatch.controller.evidence import CONTROLLER_BACKOFF_MAX_S
from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.core.grouping import CONFIG_KEY_POOL_COORDINATORS
from edgewatch.core.poolconfig import parse_pool_coordinators
from edgewatch.kube.api import ApiError, AsyncClient, ConfigMap, ObjectMeta
from edgewatch.kube.errors import API_ERRORS, is_conflict, is_not_found
from edgewatch.kube.http import http_client_of
from edgewatch.kube.informer import Informer, InformerConfig
from edgewatch.kube.listwatch import lister_watcher
from edgewatch.kube.resources import CONFIGMAPS, PODS, ApiResource
from edgewatch.kube.store import Store
from edgewatch.kube.upsert import Outcome, create_or_update
from edgewatch.names import (
    COORDINATOR_COMPONENT,
    DEFAULT_COORDINATOR_OPS_PORT,
    DEFAULT_COORDINATOR_PORT,
    POOL_COORDINATORS_CONFIGMAP,
    coordinator_name,
)

__all__ = ["DEPLOYMENTS", "CoordinatorManager", "HttpStatusError"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

DEPLOYMENTS: Final = ApiResource("apps", "v1", "deployments", "Deployment")
COMPONENT_SELECTOR: Final = f"app.kubernetes.io/component={COORDINATOR_COMPONENT}"


class HttpStatusError(Exception):
    """A raw API request answered with an unexpected HTTP status ``code``."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"HTTP {code}: {detail:.300}")
        self.code = code


_ERRORS: Final = (*API_ERRORS, HttpStatusError)


class CoordinatorManager:
    """Keeps each ``auto`` pool's coordinator Deployment and the URL ConfigMap; see the module docstring.

    Args (keyword-only):
        client: the controller's API client (:class:`edgewatch.kube.client.CloudApi`: the
            Deployments go through its raw HTTP handle).
        namespace: the edgewatch namespace (ConfigMaps, Deployments, Pods).
        image: the edgewatch image the coordinator pods run ("": the controller's own, read from its
            Pod ``own_pod``; neither: write no Deployment).
        own_pod: the controller's own Pod in ``namespace`` (env POD_NAME): its ``controller``
            container's image is the coordinators' when ``image`` is empty, so a kustomize overlay's
            or Helm value's image reaches them too.
        metrics: the controller's metrics (``pool_coordinator_ready``).
        port / ops_port: the coordinator's etcd client and ops ports on its node.
        api_timeout_s: bound of every API call and list page, seconds.
        watch_timeout_s: a watch silent this long is re-opened, seconds.
        retry_s: pause after a failed pass before the next, seconds.
        tries: reads and writes of one Deployment or ConfigMap before a pass gives up on 409s.

    Raises:
        TypeError: ``client`` has no raw HTTP handle.
    """

    def __init__(self, *, client: AsyncClient, namespace: str, image: str, metrics: ControllerMetrics,
                 own_pod: str | None = None, port: int = DEFAULT_COORDINATOR_PORT, ops_port: int = DEFAULT_COORDINATOR_OPS_PORT,
                 api_timeout_s: float = 10.0, watch_timeout_s: float = 150.0, retry_s: float = 2.0,
                 tries: int = 5) -> None:
        http = http_client_of(client)
        if http is None:
            raise TypeError("the coordinator manager needs a CloudApi client (raw HTTP for Deployments)")
        self.client = client
        self.http = http
        self.namespace = namespace
        self.image = image
        self.own_pod = own_pod
        self.metrics = metrics
        self.port = port
        self.ops_port = ops_port
        self.api_timeout_s = api_timeout_s
        self.retry_s = retry_s
        self.tries = tries
        self.auto: frozenset[str] = frozenset()
        self.passes = 0  # passes that completed without error
        self.config: Store[dict[str, Any]] = Store(on_event=self._on_config)
        self.deployments: Store[dict[str, Any]] = Store(on_event=self._on_change)
        self.pods: Store[dict[str, Any]] = Store(on_event=self._on_change)
        self._dirty = asyncio.Event()
        self._ready_series: set[str] = set()
        self._no_image_logged: set[str] = set()  # pools already logged as left without a Deployment
        self._informer_config = InformerConfig(request_timeout_s=api_timeout_s, idle_timeout_s=watch_timeout_s,
                                               backoff_max_s=CONTROLLER_BACKOFF_MAX_S)

    # -- informers ----------------------------------------------------------------------------------

    def _informer(self, resource: ApiResource, store: Store[dict[str, Any]], **selectors: str) -> Informer[Any]:
        return Informer(source=lister_watcher(self.client, resource, namespace=self.namespace, **selectors),
                        sink=store, name="coordinators", config=self._informer_config)

    async def run(self) -> None:
        """Follow the ConfigMap, Deployments and Pods and keep the coordinators until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._informer(CONFIGMAPS, self.config,
                                          field_selector=f"metadata.name={CONFIGMAP_NAME}").run())
            tg.create_task(self._informer(DEPLOYMENTS, self.deployments, label_selector=COMPONENT_SELECTOR).run())
            tg.create_task(self._informer(PODS, self.pods, label_selector=COMPONENT_SELECTOR).run())
            tg.create_task(self._work())

    def _on_config(self, op: str, cm: dict[str, Any]) -> None:
        data = {} if op == "DELETED" else (cm.get("data") or {})
        try:
            parsed = parse_pool_coordinators(data.get(CONFIG_KEY_POOL_COORDINATORS))
        except ValueError as exc:
            log.error("refusing %s's %s: %s; keeping auto pools %s", CONFIGMAP_NAME, CONFIG_KEY_POOL_COORDINATORS,
                      exc, sorted(self.auto), extra={"kind": "config_rejected"})
            return
        if parsed.auto != self.auto:
            log.info("pools with an edgewatch-run coordinator: %s", sorted(parsed.auto) or "none",
                     extra={"kind": "coordinator_pools"})
        self.auto = parsed.auto
        self._dirty.set()

    def _on_change(self, op: str, obj: dict[str, Any]) -> None:
        self._dirty.set()

    async def _own_image(self) -> None:
        """Take the coordinators' image from the controller's own Pod, once (retried until read)."""
        if self.image or not self.own_pod:
            return
        while not self.image:
            try:
                code, pod = await self._request("GET", PODS.path(self.namespace, self.own_pod))
                containers = ((pod or {}).get("spec") or {}).get("containers") or [] if code == 200 else []
                named = [c for c in containers if c.get("name") == "controller"] or containers[:1]
                image = named[0].get("image") if named else None
                if isinstance(image, str) and image:
                    self.image = image
                    log.info("pool coordinators run the controller's own image %s", image,
                             extra={"kind": "coordinator_image", "image": image})
                    return
                log.warning("no image in the controller's own pod %s (HTTP %s); retrying", self.own_pod, code)
            except _ERRORS as exc:
                log.warning("could not read the controller's own pod %s: %s; retrying", self.own_pod,
                            str(exc)[:300] or type(exc).__name__)
            await asyncio.sleep(self.retry_s)

    async def _work(self) -> None:
        await self._own_image()
        for store in (self.config, self.deployments, self.pods):
            await store.synced.wait()  # never act on half a picture (a pool's Deployment unseen yet)
        self._dirty.set()
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self.sync()
                self.passes += 1
            except _ERRORS as exc:
                log.warning("pool coordinators not brought up to date: %s; retrying in %.0f s",
                            str(exc)[:300] or type(exc).__name__, self.retry_s, extra={"kind": "coordinators_error"})
                self._dirty.set()
                await asyncio.sleep(self.retry_s)

    # -- one pass -----------------------------------------------------------------------------------

    async def sync(self) -> None:
        """One pass over the stores' current state (see the module docstring).

        Raises:
            ApiError, HttpError, OSError, TimeoutError, HttpStatusError: a write failed (the caller
            retries the whole pass).
        """
        auto = self.auto
        failure: BaseException | None = None
        for pool in sorted(auto):
            try:
                await self._ensure(pool)
            except _ERRORS as exc:  # one pool's failure does not hold back the others
                log.warning("coordinator of pool %s not written: %s", pool, str(exc)[:300] or type(exc).__name__)
                failure = exc
        for dep in list(self.deployments.objects.values()):
            meta = dep.get("metadata") or {}
            pool = pool_of(dep)
            ours = (meta.get("labels") or {}).get("app.kubernetes.io/managed-by") == MANAGED_BY
            if ours and (pool not in auto or meta.get("name") != coordinator_name(pool)):
                await self._delete(meta)
        urls = {pool: url for pool, url in discovered_urls(list(self.pods.objects.values()), port=self.port).items()
                if pool in auto}
        for pool in sorted(auto):
            self.metrics.pool_coordinator_ready.labels(pool=pool).set(1 if pool in urls else 0)
        for pool in self._ready_series - auto:
            self.metrics.pool_coordinator_ready.remove(pool)
        self._ready_series = set(auto)
        await self._publish(urls)
        if failure is not None:
            raise failure

    async def _call(self, call: Awaitable[_T]) -> _T:
        async with asyncio.timeout(self.api_timeout_s):
            return await call

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        response = await self._call(self.http.request(method, path, json=body, timeout=self.api_timeout_s))
        try:
            payload = response.json()
        except ValueError:
            payload = None
        return response.status_code, payload

    async def _ensure(self, pool: str) -> None:
        if not self.image:
            if pool in self._no_image_logged:
                return
            self._no_image_logged.add(pool)
            log.error("pool %s wants an edgewatch-run coordinator but the controller has no --coordinator-image",
                      pool, extra={"kind": "coordinator_no_image", "pool": pool})
            return
        want = coordinator_deployment(pool=pool, namespace=self.namespace, image=self.image, port=self.port,
                                      ops_port=self.ops_port)
        name = want["metadata"]["name"]
        path = DEPLOYMENTS.path(self.namespace, name)
        have = self.deployments.objects.get(f"{self.namespace}/{name}")
        for _ in range(self.tries):
            if have is None:
                code, body = await self._request("POST", DEPLOYMENTS.path(self.namespace), want)
                if code == 201:
                    log.info("created the coordinator Deployment %s of pool %s", name, pool,
                             extra={"kind": "coordinator_created", "pool": pool})
                    return
                if code != 409:
                    raise HttpStatusError(code, str(body))
            else:
                changed = drift(want={"metadata": {"labels": want["metadata"]["labels"]}, "spec": want["spec"]},
                                have=have)
                if not changed:
                    return
                meta = dict(have.get("metadata") or {})
                meta["labels"] = {**(meta.get("labels") or {}), **want["metadata"]["labels"]}
                update = {**have, "metadata": meta, "spec": want["spec"]}  # resourceVersion read: 409 if stale
                update.pop("status", None)
                code, body = await self._request("PUT", path, update)
                if code == 200:
                    log.info("updated the coordinator Deployment %s of pool %s (%s)", name, pool,
                             ", ".join(changed[:5]), extra={"kind": "coordinator_updated", "pool": pool})
                    return
                if code not in (404, 409):
                    raise HttpStatusError(code, str(body))
            code, body = await self._request("GET", path)  # 409/404: read it again and retry
            if code not in (200, 404):
                raise HttpStatusError(code, str(body))
            have = body if code == 200 else None
        raise HttpStatusError(409, f"Deployment {name} kept changing: {self.tries} tries")

    async def _delete(self, meta: dict[str, Any]) -> None:
        name = str(meta.get("name"))
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background",
                "preconditions": {"uid": meta.get("uid")}}
        code, reply = await self._request("DELETE", DEPLOYMENTS.path(self.namespace, name), body)
        if code in (200, 202, 404, 409):  # 409: the uid differs, another object now has the name
            if code in (200, 202):
                log.info("deleted the coordinator Deployment %s (its pool is no longer auto)", name,
                         extra={"kind": "coordinator_deleted"})
            return
        raise HttpStatusError(code, str(reply))

    async def _publish(self, urls: dict[str, str]) -> None:
        """Write the URL ConfigMap if its data (read now: someone may have edited it) differs from ``urls``."""
        def set_urls(cm: ConfigMap) -> None:
            if dict(cm.data or {}) != urls:
                cm.data = dict(urls)

        template = ConfigMap(metadata=ObjectMeta(name=POOL_COORDINATORS_CONFIGMAP, namespace=self.namespace,
                                                 labels={"app.kubernetes.io/part-of": "edgewatch",
                                                         "app.kubernetes.io/managed-by": MANAGED_BY}))
        try:
            # the replace carries the resourceVersion read: a concurrent write is a 409, read again
            done = await create_or_update(client=self.client, template=template, mutate=set_urls,
                                          timeout_s=self.api_timeout_s, conflict_retries=max(self.tries - 1, 0))
        except ApiError as exc:
            if not (is_conflict(exc) or is_not_found(exc)):
                raise
            raise HttpStatusError(409, f"ConfigMap {POOL_COORDINATORS_CONFIGMAP} kept changing: "
                                       f"{self.tries} tries") from None
        if done.outcome is not Outcome.UNCHANGED:
            log.info("pool coordinators now %s", urls or "none", extra={"kind": "coordinator_urls"})
