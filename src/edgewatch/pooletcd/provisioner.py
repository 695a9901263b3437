"""Apply a pool's etcd access control through etcd's Auth API (``reconcile_acl``).

What it is for
    Run next to the pool coordinator's etcd with its root credentials (a client certificate
    ``CN=root`` from the pool's CA): creates one user per member node (no password: etcd takes
    the user name from the client certificate's CN), one role each with exactly that node's grants
    (:func:`edgewatch.pooletcd.acl.plan_acl`), removes departed nodes, and switches authentication
    on (creating ``root`` first, as etcd requires). Idempotent: a second call with the same members
    changes nothing.

Errors
    ``AclError`` (reason ``unreachable``, ``timeout``, ``denied``, ``etcd``) for any failed call;
    the steps applied before it stay applied, and the next call resumes from what etcd has.

Limits
    Every call is bounded by ``timeout_s``; the member list comes from the caller (the pool's
    roster). Source: etcd's authentication guide (https://etcd.io/docs/v3.6/op-guide/authentication/rbac/).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

import grpc
from aetcd import rpc as etcd_rpc

from edgewatch.poolkeys import Access, Grant, PoolKeys
from edgewatch.pooletcd.acl import NO_SUSPENSIONS, AclStep, Suspensions, plan_acl

__all__ = ["AclError", "AclResult", "reconcile_acl"]

log = logging.getLogger(__name__)


class AclError(RuntimeError):
    """An Auth API call failed; ``reason`` is the metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class AclResult:
    """What one reconcile did: the steps applied and whether it switched auth on."""

    steps: tuple[AclStep, ...]
    enabled_auth: bool


def _reason(exc: grpc.RpcError) -> str:
    code = exc.code() if hasattr(exc, "code") else None
    if code is grpc.StatusCode.UNAVAILABLE:
        return "unreachable"
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return "timeout"
    if code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
        return "denied"
    return "etcd"


class _Auth:
    """etcd's Auth service on one channel, every call under ``timeout_s``."""

    def __init__(self, channel: grpc.aio.Channel, timeout_s: float) -> None:
        self.stub = etcd_rpc.AuthStub(channel)
        self.timeout_s = timeout_s

    async def call(self, method: str, request: object) -> object:
        try:
            return await getattr(self.stub, method)(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            details = exc.details() if hasattr(exc, "details") else str(exc)
            raise AclError(_reason(exc), f"{method}: {details}") from exc

    async def state(self) -> tuple[dict[str, tuple[Grant, ...]], dict[str, tuple[str, ...]]]:
        roles: dict[str, tuple[Grant, ...]] = {}
        for name in (await self.call("RoleList", etcd_rpc.AuthRoleListRequest())).roles:  # type: ignore[attr-defined]
            got = await self.call("RoleGet", etcd_rpc.AuthRoleGetRequest(role=name))
            roles[name] = tuple(sorted(Grant(p.key, p.range_end, Access(p.permType))
                                       for p in got.perm))  # type: ignore[attr-defined]
        users: dict[str, tuple[str, ...]] = {}
        for name in (await self.call("UserList", etcd_rpc.AuthUserListRequest())).users:  # type: ignore[attr-defined]
            got = await self.call("UserGet", etcd_rpc.AuthUserGetRequest(name=name))
            users[name] = tuple(got.roles)  # type: ignore[attr-defined]
        return roles, users

    async def apply(self, step: AclStep) -> None:
        r = etcd_rpc
        if step.op in ("grant", "revoke"):
            assert step.grant is not None
            g = step.grant
            if step.op == "grant":
                perm = r.Permission(permType=g.access.value, key=g.key, range_end=g.range_end)
                await self.call("RoleGrantPermission", r.AuthRoleGrantPermissionRequest(name=step.name, perm=perm))
            else:
                await self.call("RoleRevokePermission",
                                r.AuthRoleRevokePermissionRequest(role=step.name, key=g.key, range_end=g.range_end))
        elif step.op == "add_role":
            await self.call("RoleAdd", r.AuthRoleAddRequest(name=step.name))
        elif step.op == "delete_role":
            await self.call("RoleDelete", r.AuthRoleDeleteRequest(role=step.name))
        elif step.op == "add_user":
            await self.call("UserAdd", r.AuthUserAddRequest(name=step.name,
                                                            options=r.UserAddOptions(no_password=True)))
        elif step.op == "delete_user":
            await self.call("UserDelete", r.AuthUserDeleteRequest(name=step.name))
        elif step.op == "grant_role":
            await self.call("UserGrantRole", r.AuthUserGrantRoleRequest(user=step.name, role=step.role))
        elif step.op == "revoke_role":
            await self.call("UserRevokeRole", r.AuthUserRevokeRoleRequest(name=step.name, role=step.role))
        else:  # pragma: no cover - plan_acl makes only the ops above
            raise ValueError(f"unknown ACL step {step.op!r}")

    async def enable(self, users: dict[str, tuple[str, ...]]) -> bool:
        """Switch authentication on, after creating ``root`` with the ``root`` role as etcd
        requires; True if this set ``root`` up (the first reconcile). etcd answers AuthEnable on
        an enabled cluster with success, and aetcd's stubs have no AuthStatus: so it is always
        called, and whether it was the first time is told by ``root``."""
        first = "root" not in users
        if first:
            await self.call("UserAdd", etcd_rpc.AuthUserAddRequest(
                name="root", options=etcd_rpc.UserAddOptions(no_password=True)))
        if "root" not in users.get("root", ()):
            await self.call("UserGrantRole", etcd_rpc.AuthUserGrantRoleRequest(user="root", role="root"))
        await self.call("AuthEnable", etcd_rpc.AuthEnableRequest())
        return first


async def reconcile_acl(*, target: str, credentials: grpc.ChannelCredentials | None, pool: str,
                        members: Iterable[str], timeout_s: float = 5.0, enable: bool = True,
                        suspended: Suspensions = NO_SUSPENSIONS) -> AclResult:
    """Make the pool's etcd at ``target`` (``host:port``) have exactly one user and role per
    member (see the module docstring), then switch authentication on if ``enable``.

    Args:
        target: the etcd client endpoint, ``host:port``.
        credentials: TLS credentials with a root client certificate (None: plain gRPC, for an
            etcd without TLS, where authentication can only be off or password based).
        pool: the pool (a DNS-1123 label).
        members: the pool's nodes now.
        timeout_s: bound of each call, seconds.
        enable: switch etcd's authentication on at the end.
        suspended: members over their write quota now (``plan_acl``).

    Raises:
        AclError: a call failed (see the module docstring).
    """
    options = [("grpc.enable_retries", 0)]
    channel = (etcd_rpc.secure_channel(target, credentials, options=options) if credentials is not None
               else etcd_rpc.insecure_channel(target, options=options))
    try:
        auth = _Auth(channel, timeout_s)
        roles, users = await auth.state()
        steps = plan_acl(keys=PoolKeys(pool), members=members, roles=roles, users=users, suspended=suspended)
        for step in steps:
            await auth.apply(step)
        enabled = await auth.enable(users) if enable else False
        if steps or enabled:
            log.info("pool etcd access control reconciled", extra={
                "pool": pool, "steps": len(steps), "enabled_auth": enabled,
                "users": sorted({s.name for s in steps if s.op in ("add_user", "delete_user")})})
        return AclResult(steps=tuple(steps), enabled_auth=enabled)
    finally:
        await channel.close()
