"""The pool etcd's access-control plan (``edgewatch.pooletcd.acl``): applying it gives exactly one
user and role per member, with exactly its own grants; a second plan is empty."""

from __future__ import annotations


from hypothesis import given
from hypothesis import strategies as st

from edgewatch.poolkeys import Access, Grant, PoolKeys, node_grants
from edgewatch.pooletcd.acl import AclStep, Suspensions, plan_acl, role_name

KEYS = PoolKeys("p")
NAMES = st.sampled_from(["a", "b", "c", "a-b", "root", "n-1"])


def _apply(steps: list[AclStep], roles: dict[str, set[Grant]], users: dict[str, set[str]]) -> None:
    for s in steps:
        if s.op == "add_role":
            assert s.name not in roles
            roles[s.name] = set()
        elif s.op == "delete_role":
            del roles[s.name]
            for r in users.values():
                r.discard(s.name)
        elif s.op == "grant":
            roles[s.name].add(s.grant)
        elif s.op == "revoke":
            roles[s.name].remove(s.grant)
        elif s.op == "add_user":
            assert s.name not in users
            users[s.name] = set()
        elif s.op == "delete_user":
            del users[s.name]
        elif s.op == "grant_role":
            assert s.role in roles
            users[s.name].add(s.role)
        elif s.op == "revoke_role":
            users[s.name].remove(s.role)
        else:
            raise AssertionError(s.op)


def _frozen(roles: dict[str, set[Grant]], users: dict[str, set[str]]):
    return ({k: tuple(sorted(v)) for k, v in roles.items()}, {k: tuple(sorted(v)) for k, v in users.items()})


@given(st.sets(NAMES), st.sets(NAMES), st.sets(NAMES))
def test_plan_converges_and_is_idempotent(before: set[str], after: set[str], stray: set[str]) -> None:
    roles: dict[str, set[Grant]] = {"root": set(), "operator": {Grant(b"/x", b"", Access.READ)}}
    users: dict[str, set[str]] = {"root": {"root"}, "alice": {"operator"}}
    r, u = _frozen(roles, users)
    _apply(plan_acl(keys=KEYS, members=before, roles=r, users=u), roles, users)
    for n in (stray & set(users)) - {"root", "alice"}:  # someone widened a node's rights by hand
        users[n].add("operator")
        roles[role_name(n)].add(Grant(b"/", b"0", Access.READWRITE))
    r, u = _frozen(roles, users)
    _apply(plan_acl(keys=KEYS, members=after, roles=r, users=u), roles, users)
    members = after - {"root"}
    for n in members:
        assert users[n] == {role_name(n)}
        assert roles[role_name(n)] == set(node_grants(KEYS, n))
    assert {n for n in users if n not in ("root", "alice")} == members
    assert users["root"] == {"root"} and users["alice"] == {"operator"}  # never touched
    assert "operator" in roles and "root" in roles
    r, u = _frozen(roles, users)
    assert plan_acl(keys=KEYS, members=after, roles=r, users=u) == []


def test_root_is_never_a_node() -> None:
    steps = plan_acl(keys=KEYS, members=["root"], roles={}, users={})
    assert steps == []


def test_steps_for_a_new_pool() -> None:
    steps = plan_acl(keys=KEYS, members=["n-1"], roles={}, users={})
    assert [s.op for s in steps] == ["add_role"] + ["grant"] * len(node_grants(KEYS, "n-1")) + ["add_user",
                                                                                                 "grant_role"]
    assert all(s.name == role_name("n-1") for s in steps[:-2])
    assert steps[-1] == AclStep("grant_role", "n-1", role=role_name("n-1"))


def test_departed_node_loses_its_user_before_its_role() -> None:
    roles = {role_name("gone"): node_grants(KEYS, "gone")}
    users = {"gone": (role_name("gone"),)}
    steps = plan_acl(keys=KEYS, members=[], roles=roles, users=users)
    assert steps == [AclStep("delete_user", "gone"), AclStep("delete_role", role_name("gone"))]




@given(st.sets(NAMES), st.sets(NAMES), st.sets(NAMES))
def test_a_suspended_member_loses_its_writes_and_gets_them_back(members: set[str], read_only: set[str],
                                                                no_area: set[str]) -> None:
    roles: dict[str, set[Grant]] = {"root": set()}
    users: dict[str, set[str]] = {"root": {"root"}}
    r, u = _frozen(roles, users)
    _apply(plan_acl(keys=KEYS, members=members, roles=r, users=u), roles, users)
    r, u = _frozen(roles, users)
    suspended = Suspensions(read_only=frozenset(read_only), no_area=frozenset(no_area))
    _apply(plan_acl(keys=KEYS, members=members, roles=r, users=u, suspended=suspended), roles, users)
    pool_read = Grant(KEYS.prefix.encode(), b"/edgewatch/pools/p0", Access.READ)
    for n in members - {"root"}:
        grants = roles[role_name(n)]
        assert pool_read in grants
        if n in read_only:
            assert grants == {pool_read}
        elif n in no_area:
            assert grants == set(node_grants(KEYS, n)) - {g for g in node_grants(KEYS, n)
                                                          if g.key == KEYS.writer(n).encode()}
            assert any(g.key == KEYS.heartbeat(n) for g in grants)  # its heartbeat and candidacy stay
        else:
            assert grants == set(node_grants(KEYS, n))
    r, u = _frozen(roles, users)
    _apply(plan_acl(keys=KEYS, members=members, roles=r, users=u), roles, users)  # suspensions over
    assert all(roles[role_name(n)] == set(node_grants(KEYS, n)) for n in members - {"root"})


def test_who_writes_a_key() -> None:
    keys = PoolKeys("p")
    assert keys.writer_of(keys.heartbeat("n-1")) == "n-1"
    assert keys.writer_of(keys.candidate("n-1")) == "n-1"
    assert keys.writer_of(keys.sync("n-1")) == "n-1"
    assert keys.writer_of(keys.writer("n-1").encode() + b"cache/services/x") == "n-1"
    assert keys.writer_of(keys.disqualified("n-1")) is None       # the coordinator's (root)
    assert keys.writer_of(keys.heartbeats + b"a/b") is None
    assert keys.writer_of(b"/edgewatch/pools/p/nodes/n-1") is None  # no area without a slash
    assert keys.writer_of(b"/edgewatch/pools/q/heartbeats/n-1") is None
    # every key a node may write by its grants is charged to that node
    for grant in node_grants(keys, "n-1"):
        if grant.access is Access.READWRITE:
            assert keys.writer_of(grant.key + (b"x" if grant.range_end else b"")) == "n-1"
