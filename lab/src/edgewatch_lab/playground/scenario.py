"""Playground scenarios: a topology of simulated edge nodes, timed faults, and what should happen.

A scenario is a YAML file (or the name of a built-in one, see :func:`builtin_scenarios`)::

    name: cloud-partition
    description: one line
    topology:
      pools: [{name: a, nodes: 5, coordinator: true}]   # nodes are named <pool>-<n>, n from 1;
                                                        # kube_proxy: [a-5] runs a real kube-proxy there;
                                                        # coredns: [a-4] a real CoreDNS (cluster DNS);
                                                        # real_nodes: 2 makes a-1, a-2 real nodes (a real
                                                        # kubelet, containerd and runc; the rest simulated)
                                                        # out_of_service: true opts the pool into the
                                                        # out-of-service taint (outOfServicePools)
      grouping: false
      cloud_nodes: 1        # cloud-1 (control plane, tainted) .. cloud-N (workers); no agent there
      coordinators: process # how pools with coordinator: true get it: process = an etcd the lab runs
                            # on a host of its own; pods = as shipped (poolCoordinators {pool: auto}:
                            # the controller's Deployment, a pod on one of the pool's nodes)
      release: fae0b3b      # optional: install that commit's edgewatch (deploy/ and code) at the
                            # start instead of this checkout's (kustomize only; rollout steps move on)
    timings: {node_monitor_grace_s: 20, toleration_s: 30, autonomy_s: 300}   # optional, these defaults
    steps:                                   # times are seconds from the scenario's start
      - {at: 10, action: cut-cloud, pool: a}                 # or nodes: [a-1, a-2]
      - {at: 130, action: restore-cloud, pool: a}            # or nodes
      - {at: 140, action: split, pool: a, sides: [[a-1, a-2, a-3], [a-4, a-5]]}
      - {at: 150, action: loss, nodes: [a-1], percent: 30}   # or pool; percent 0 removes the loss
      - {at: 160, action: kill, node: a-2}
      - {at: 170, action: revive, node: a-2}               # kill/revive also cloud-2..cloud-N
      - {at: 175, action: skew, node: a-4, seconds: -40}     # a-4's clock (kubelet, agent) 40 s slow; 0 ends it
      - {at: 180, action: kill-leader, pool: a}              # pools with coordinator: true only
      - {at: 185, action: kill-coordinator, pool: a}         # pools with coordinator: true only;
                                                             # coordinators: pods kills the node its pod runs on
      - {at: 190, action: revive-coordinator, pool: a}       # pods: waits for the rescheduled pod Ready
      - {at: 195, action: restart-controller}
      - {at: 195.5, action: kill-controller-leader}         # SIGKILL of the leading replica only
      - {at: 196, action: scale-controller, replicas: 0}    # every edgewatch controller replica gone;
                                                             # a later step with 2 brings them back
      - {at: 198, action: scale, replicas: 6}                # the sample Deployment (a cloud-side change)
      - {at: 199, action: rollout}                           # edgewatch's agents and controller: new pods
                                                             # (release: <commit> rolls to that release)
      - {at: 199.5, action: uninstall}                       # docs/uninstall.md: delete the install, then
                                                             # edgewatch uninstall (at most one; no rollout after)
      - {at: 200, action: heal}                              # ends every cut, split and loss
      - {at: 230, action: end}                               # exactly one, the last
    statefulsets:                            # optional: one-replica StatefulSets (pod <name>-0) whose
      - {name: db-a2, node: a-2}             # pod prefers the node (preferred node affinity); Ready
                                             # there before t=0
    expect:
      - {pool: a, evictions: 0, endpoint_removals: 0, never_not_ready: true}
      - {nodes: [a-2], evicted_within_s: 15, detected_within_s: 10, state_at_end: failed}
      - {nodes: [a-1], evictions: ">0", baseline: true}      # only checked on --baseline runs
      - {statefulset: db-a2, moved_within_s: 90}             # about a StatefulSet's pod

Expectation keys (each entry targets exactly one of ``pool`` / ``nodes`` / ``statefulset``):

* ``evictions``, ``endpoint_removals``: the count over all targeted nodes, either an int (exact) or a
  comparison ``[op]N`` with op one of ``==``, ``>``, ``>=``, ``<``, ``<=`` (``">0"``, ``"<=2"``);
* ``never_not_ready``: true = no targeted node's Ready condition was ever not True; false = at least one's was;
* ``evicted_within_s``: every targeted node's pods were evicted within this many seconds after each of
  its kills (a target that is never killed, or had no pods at the kill, fails);
* ``detected_within_s``: every targeted node reached state ``failed`` (baseline: ``not_ready``) within
  this many seconds after each of its kills;
* ``state_at_end``: every targeted node's last recorded state. edgewatch runs: normal, disconnected,
  failed, unknown; baseline runs (stock Kubernetes): normal, not_ready;
* ``untouched``: true = edgewatch never tainted, annotated or held (Lease mark) any targeted node
  (what a node edgewatch does not cover must get);
* ``never_tainted``: true = no targeted node ever got one of edgewatch's taints;
* ``kube_proxy_follows_within_s``: after every ``scale`` step, each targeted node's real kube-proxy
  (pool key ``kube_proxy: [nodes]``) programs the Service's new endpoints within this many seconds of
  the cloud showing them; ``kube_proxy_misses``: true = after some ``scale`` step it never does before
  the next step (a cut-off node reading the cloud directly);
* ``coredns_follows_within_s`` / ``coredns_misses``: the same for the node's real CoreDNS (pool key
  ``coredns: [nodes]``): its answer for the sample workload's headless Service
  (``sample-headless``) has the addresses of the Service's new endpoints within this many seconds
  of the cloud showing them / never has them before the next step;
* ``lease_carried``: true = the node's Lease was carried by a peer (a current delegated-heartbeat
  mark was seen) and at the end it is the node's own again (holder the node, the mark gone, after
  the node's kubelet renewed it); false = never carried;
* ``containers_stopped``: true = at every kill of the node (a real node, ``real_nodes``) its pod
  containers were running and none survived the kill;
* ``replaced_within_s``: after every kill of the node, the sample Service had again as many ready
  endpoints on live nodes as just before the kill within this many seconds;
* ``killed``: true = the entry is about those of its targets killed during the run (kill,
  kill-leader, kill-coordinator with ``coordinators: pods``), false = about those never killed;
  which nodes those are is known only at run time (a target set left empty fails every check);
* ``coordinator_moved_within_s`` (``coordinators: pods``): after every ``kill-coordinator`` of the
  pool, its coordinator pod is Ready on another node within this many seconds;
* ``led_within_s``: after every ``kill-coordinator`` of the pool, a live node of the pool leads it
  (the agents' ``EdgePoolCoordinator`` Node condition) within this many seconds;
* ``cache_from_coordinator_within_s``: after every ``kill-coordinator`` of the pool, every live node
  of the pool serves its pool cache from the coordinator (the agents' ``edgewatch_poolcache_source``
  metric) within this many seconds; these three take ``pool``, not ``nodes``;
* ``alert_within_s`` (runs with ``--prometheus``: a real Prometheus evaluates the shipped alert
  rules): after every kill of each targeted node, an alert naming it (its ``node`` label), or
  ``EdgewatchNodeFailed`` (per namespace: any firing), fires within this many seconds;
  ``no_alerts``: true = neither ``EdgewatchNodeCutOff`` nor ``EdgewatchAgentNotReady`` fires for a
  targeted node during the run. Without ``--prometheus`` both fail ("needs --prometheus"); both only
  on edgewatch runs and covered nodes;
* ``out_of_service_taint``: true = every targeted node got ``node.kubernetes.io/out-of-service``
  (KEP-2268; edgewatch applies it to a node it judges FAILED on verified evidence in a pool with
  ``out_of_service: true``) at some point; false = none ever did;
* ``moved_within_s``, ``moved``, ``stays`` (``statefulset`` targets, and only these;
  ``edgewatch_lab.playground.statefulsets``): the StatefulSet's pod seen at the start is replaced by
  a pod Ready on another node within this many seconds of that node's first kill (of t=0 if it is
  never killed or the pod had left it before) / such a replacement is (true) or is never (false) Ready before the end / the start
  pod is never deleted and is the same pod (uid) at the end (true) or not (false);
* ``agents_updated``: for each ``rollout`` step, the number of targeted nodes that ran an agent of
  the rollout's version (Ready) before the next rollout or the end — one count for every rollout, or
  a list with one per rollout — as a count like ``evictions`` (a DaemonSet rollout waits for a node
  whose old pod cannot go: one cut off from the cloud, or dead); edgewatch runs only;
* ``clean_at_end`` (needs an ``uninstall`` step): true = at the end no targeted node nor its Lease
  carries a mark of edgewatch (the lab's own definition, ``edgewatch_lab.playground.marks``: any
  ``edgewatch.io/`` taint, annotation or Lease annotation but the operator's settings, a Node
  condition not the kubelet's, the out-of-service taint of value ``edgewatch``), nothing of
  edgewatch is left in its namespaces or cluster-wide (``edgewatch_lab.playground.uninstalling``;
  pods still Terminating on a cut-off or dead node are Kubernetes' and listed apart), and
  ``edgewatch uninstall`` exited 0; false = something is left; edgewatch runs only;
* ``evicted_after_uninstall_within_s`` (needs an ``uninstall`` step): no targeted node's pod was
  evicted before the step, and each targeted node's pods were evicted within this many seconds
  after it (stock Kubernetes back on a node it cannot hear); edgewatch runs only;
* ``baseline``: false (default) = checked on edgewatch runs only; true = on baseline runs only.

Nodes ``cloud-1`` .. ``cloud-<cloud_nodes>`` are in zone ``cloud`` with no agent (not covered by
edgewatch): ``cloud-1`` is the tainted control-plane node and cannot be faulted; the others are
ordinary workers that also get pods of the sample workload. Expectations may target them by name;
their detection state is ``not_ready`` (stock), in edgewatch runs too.

Validation: unknown keys are errors with their path; steps are sorted by time (stably); exactly one
``end`` step, strictly after every other step; no two identical actions on the same target at the same
time; every node and pool referenced exists; ``split`` sides are non-empty, disjoint and in the pool;
``percent`` in 0..100; coordinator actions and ``kill-leader`` only for pools with ``coordinator: true``;
``kill`` only of a node that is up and ``revive`` only of one that was killed (likewise for coordinators);
``skew`` ``seconds`` within ±3600 and not on ``cloud-1`` (the machine's own clock) nor on a real node
(its containers read the machine's clock); ``real_nodes`` at most the pool's ``nodes``;
``containers_stopped`` only on real nodes; ``alert_within_s`` / ``no_alerts`` only on covered nodes
and not with ``baseline: true``; no pool named ``cloud``; StatefulSet names unique, each on a node of the
topology that takes workload pods (not ``cloud-1``), and every ``statefulset`` an expectation names declared.
Every problem is reported as a :class:`ScenarioError` naming the step (or expectation) index as written
in the file and the field.

Limits: this module only describes and checks scenarios; the runner plays them, and
:mod:`edgewatch_lab.playground.report` judges a run against the expectations. Which node ``kill-leader``
kills is only known at run time, so nothing can be expected of it here by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Final, Literal

import yaml
from pydantic import (
    Field,
    StrictBool,
    ValidationError,
    model_validator,
)

from edgewatch.core.types import DNS1123_LABEL_PATTERN
from edgewatch_lab.playground.crosscheck import compact_node_names, cross_check
from edgewatch_lab.playground.steps import (
    ACTIONS,
    CutCloud,
    End,
    Heal,
    Kill,
    KillControllerLeader,
    KillCoordinator,
    KillLeader,
    Loss,
    RestartController,
    RestoreCloud,
    Revive,
    ReviveCoordinator,
    Rollout,
    Scale,
    ScaleController,
    Skew,
    Split,
    Step,
)
from edgewatch_lab.playground.expectation import (
    BASELINE_STATES,
    EDGEWATCH_STATES,
    Comparison,
    Expectation,
    StrictModel as _Model,
)

__all__ = [
    "ACTIONS",
    "BASELINE_STATES",
    "EDGEWATCH_STATES",
    "Comparison",
    "CutCloud",
    "End",
    "Expectation",
    "Heal",
    "Kill",
    "KillControllerLeader",
    "KillCoordinator",
    "KillLeader",
    "Loss",
    "Pool",
    "RestartController",
    "RestoreCloud",
    "Revive",
    "ReviveCoordinator",
    "Rollout",
    "Scale",
    "ScaleController",
    "Scenario",
    "ScenarioError",
    "Skew",
    "Split",
    "StatefulSetSpec",
    "Step",
    "Timings",
    "Topology",
    "builtin_scenarios",
    "compact_node_names",
    "dump_scenario",
    "load_scenario",
    "parse_scenario",
]

SCENARIO_DIR: Final = Path(__file__).parent / "scenarios"


_NAME = DNS1123_LABEL_PATTERN


class ScenarioError(ValueError):
    """A scenario that cannot be loaded; ``problems`` lists every problem found, one line each."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        self.problems = list(problems or [])
        if self.problems:
            message = message + "\n" + "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(message)


# --------------------------------------------------------------------------------------------------
# Topology and timings



class Pool(_Model):
    """A node pool (site): ``nodes`` nodes named ``<name>-1`` .. ``<name>-<nodes>``."""

    name: Annotated[str, Field(pattern=_NAME, max_length=40)]
    nodes: Annotated[int, Field(ge=1, le=200)]
    #: Whether the pool runs a pool coordinator (leader election, heartbeat forwarding, pool cache).
    coordinator: StrictBool = False
    #: Nodes of this pool that run a real kube-proxy (nftables, in the node's namespace) reading
    #: Services and EndpointSlices from the agent's pool cache (edgewatch runs) or from the cloud
    #: apiserver (baseline runs); the report records the backends it programs for the sample Service.
    kube_proxy: list[str] = Field(default_factory=list)
    #: Nodes of this pool that run a real CoreDNS (kubernetes plugin, in the node's namespace) with
    #: its own ServiceAccount token, reading the agent's pool cache (edgewatch runs; Namespaces are
    #: forwarded to the cloud) or the cloud (baseline); the report records its answer for the sample
    #: workload's headless Service.
    coredns: list[str] = Field(default_factory=list)
    #: How many of the pool's nodes are real (``<pool>-1`` .. ``<pool>-<real_nodes>``): a real
    #: kubelet, containerd and runc in the node's namespace, running edgewatch's agent and the
    #: sample workload as containers (``edgewatch_lab.testing.realnode``). The others are simulated.
    real_nodes: Annotated[int, Field(ge=0, le=20)] = 0
    #: Whether the operator opted the pool into the out-of-service taint (edgewatch's ConfigMap key
    #: ``outOfServicePools``, docs/out-of-service.md): edgewatch then taints a node it judges FAILED
    #: on verified evidence ``node.kubernetes.io/out-of-service`` and kube-controller-manager
    #: force-deletes the node's terminating pods (a StatefulSet's replica is recreated elsewhere).
    out_of_service: StrictBool = False

    def node_names(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(1, self.nodes + 1)]

    def real_node_names(self) -> list[str]:
        """The pool's real nodes: its first ``real_nodes``."""
        return self.node_names()[: self.real_nodes]

    @model_validator(mode="after")
    def _kube_proxy_nodes(self) -> Pool:
        outside = [n for n in self.kube_proxy if n not in self.node_names()]
        if outside:
            raise ValueError(f"kube_proxy: {', '.join(map(repr, outside))} not in pool {self.name!r}")
        if self.real_nodes > self.nodes:
            raise ValueError(f"real_nodes: {self.real_nodes} is more than the pool's {self.nodes} nodes")
        real_proxied = [n for n in self.kube_proxy if n in self.real_node_names()]
        if real_proxied:
            raise ValueError(f"kube_proxy: {', '.join(real_proxied)} are real nodes, which run their own kube-proxy")
        outside = [n for n in self.coredns if n not in self.node_names()]
        if outside:
            raise ValueError(f"coredns: {', '.join(map(repr, outside))} not in pool {self.name!r}")
        real_dns = [n for n in self.coredns if n in self.real_node_names()]
        if real_dns:
            raise ValueError(f"coredns: {', '.join(real_dns)} are real nodes (CoreDNS runs on simulated ones)")
        return self


CLOUD_POOL: Final = "cloud"


class Topology(_Model):
    pools: Annotated[list[Pool], Field(min_length=1)]
    #: Whether nodes are grouped by pool (each pool checks only itself) or all check each other.
    grouping: StrictBool = False
    #: Cloud nodes ``cloud-1..cloud-N`` (zone ``cloud``, no agent): cloud-1 is the tainted
    #: control-plane node, the others ordinary workers. Real clusters have at least the first.
    cloud_nodes: Annotated[int, Field(ge=1, le=20)] = 1
    #: How the pools with ``coordinator: true`` get it: ``process`` (an etcd the lab runs on a host
    #: of its own, named in ``poolCoordinators``) or ``pods`` (as shipped: ``{pool: auto}``, the
    #: controller's Deployment, its pod scheduled onto one of the pool's nodes).
    coordinators: Literal["process", "pods"] = "process"
    #: What edgewatch release is installed at the start (edgewatch runs): a git revision of this
    #: repository (e.g. the previous release's commit, CHANGELOG.md), whose ``deploy/`` is applied
    #: with the image of its own code (``edgewatch_lab.testing.revisions``); None: this checkout.
    #: Kustomize installs only; ``rollout`` steps move between releases.
    release: Annotated[str, Field(pattern=r"^[0-9a-f]{7,40}$")] | None = None

    def cloud_node_names(self) -> list[str]:
        """``cloud-1`` .. ``cloud-<cloud_nodes>``."""
        return [f"{CLOUD_POOL}-{i}" for i in range(1, self.cloud_nodes + 1)]

    @model_validator(mode="after")
    def _unique(self) -> Topology:
        seen: set[str] = set()
        for i, p in enumerate(self.pools):
            if p.name == CLOUD_POOL:
                raise ValueError(f"pools[{i}].name: {CLOUD_POOL!r} is reserved for the cloud nodes")
            if p.name in seen:
                raise ValueError(f"pools[{i}].name: pool {p.name!r} is defined twice")
            seen.add(p.name)
        names = [n for p in self.pools for n in p.node_names()]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"pools: node names collide: {', '.join(dup)}")
        return self


class Timings(_Model):
    """The cluster timings the scenario's expectations assume (the runner configures the cluster)."""

    #: kube-controller-manager --node-monitor-grace-period (stock default 50 s).
    node_monitor_grace_s: Annotated[float, Field(gt=0)] = 20.0
    #: tolerationSeconds for not-ready / unreachable (DefaultTolerationSeconds, stock default 300 s).
    toleration_s: Annotated[float, Field(ge=0)] = 30.0
    #: edgewatch's autonomy time for nodes with no edge evidence (ControllerConfig.autonomy_s).
    autonomy_s: Annotated[float, Field(ge=0)] = 300.0


class StatefulSetSpec(_Model):
    """A one-replica StatefulSet of the workload namespace whose pod prefers ``node`` (preferred
    node affinity: placed there at the start, free to be recreated elsewhere). Its pod is
    ``<name>-0``; the runner waits for it Ready on ``node`` before t=0 and the report follows it."""

    name: Annotated[str, Field(pattern=_NAME, max_length=40)]
    node: str


# --------------------------------------------------------------------------------------------------
# Scenario


class Scenario(_Model):
    name: Annotated[str, Field(pattern=_NAME, max_length=63)]
    description: str = ""
    topology: Topology
    timings: Timings = Field(default_factory=Timings)
    steps: Annotated[list[Step], Field(min_length=1)]
    #: One-replica StatefulSets pinned (preferred) to named nodes, created with the sample workload.
    statefulsets: list[StatefulSetSpec] = Field(default_factory=list)
    expect: list[Expectation] = Field(default_factory=list)

    # -- helpers ---------------------------------------------------------------------------------

    def node_names(self) -> list[str]:
        """Every edge node (covered by edgewatch), pool by pool in topology order, ``<pool>-1`` first."""
        return [n for p in self.topology.pools for n in p.node_names()]

    def cloud_node_names(self) -> list[str]:
        """The cloud nodes ``cloud-1`` .. ``cloud-N`` (no agent; not covered by edgewatch)."""
        return self.topology.cloud_node_names()

    def all_node_names(self) -> list[str]:
        """Edge nodes, then cloud nodes."""
        return self.node_names() + self.cloud_node_names()

    def worker_node_names(self) -> list[str]:
        """The nodes that take workload pods: edge nodes and cloud workers (not cloud-1)."""
        return self.node_names() + self.cloud_node_names()[1:]

    def real_node_names(self) -> list[str]:
        """The real nodes (``real_nodes`` of each pool), pool by pool."""
        return [n for p in self.topology.pools for n in p.real_node_names()]

    def is_real(self, node: str) -> bool:
        """Whether ``node`` runs a real kubelet (see ``Pool.real_nodes``)."""
        return node in self.real_node_names()

    def is_covered(self, node: str) -> bool:
        """Whether edgewatch covers ``node`` (edge nodes; cloud nodes are not)."""
        return node in self.node_names()

    def pool(self, name: str) -> Pool:
        for p in self.topology.pools:
            if p.name == name:
                return p
        raise KeyError(f"no pool {name!r} in scenario {self.name!r}")

    def nodes_of(self, pool: str | None) -> list[str]:
        return self.pool(pool).node_names() if pool is not None else []

    def pool_of(self, node: str) -> str:
        """The pool of ``node`` (``cloud`` for cloud nodes); ``KeyError`` if it is not in the topology."""
        for p in self.topology.pools:
            if node in p.node_names():
                return p.name
        if node in self.cloud_node_names():
            return CLOUD_POOL
        raise KeyError(f"no node {node!r} in scenario {self.name!r}")

    def out_of_service_pools(self) -> list[str]:
        """The pools opted into the out-of-service taint (``out_of_service: true``), in topology order:
        the ConfigMap's ``outOfServicePools``."""
        return [p.name for p in self.topology.pools if p.out_of_service]

    def statefulset_names(self) -> list[str]:
        """The declared StatefulSets' names, in file order."""
        return [s.name for s in self.statefulsets]

    @property
    def end_time(self) -> float:
        """Seconds from the start at which the scenario ends (its ``end`` step)."""
        return next(s.at for s in self.steps if s.action == "end")

    def expectations_for(self, *, baseline: bool) -> list[Expectation]:
        return [e for e in self.expect if e.baseline == baseline]

    # -- cross-field validation ------------------------------------------------------------------

    @model_validator(mode="after")
    def _cross_check(self) -> Scenario:
        problems, order = cross_check(self)
        if problems:
            raise ValueError("\n".join(problems))
        self.steps = [self.steps[i] for i in order]
        return self


# --------------------------------------------------------------------------------------------------
# Loading


_ACTION_SET = set(ACTIONS)


def _format_loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _ACTION_SET and out.startswith("steps["):
            out += f" ({part})"
        else:
            out += ("." if out else "") + str(part)
    return out


def _problems(err: ValidationError) -> list[str]:
    problems: list[str] = []
    for e in err.errors(include_url=False):
        loc = _format_loc(tuple(e["loc"]))
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif e["type"] == "union_tag_invalid":
            loc += ".action"
            msg = f"unknown action {e.get('ctx', {}).get('tag')!r} (actions: {', '.join(ACTIONS)})"
        elif e["type"] == "union_tag_not_found":
            loc += ".action"
            msg = f"missing (actions: {', '.join(ACTIONS)})"
        elif e["type"] in ("value_error", "assertion_error"):
            msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
        for line in msg.split("\n"):
            problems.append(f"{loc}: {line}" if loc else line)
    return problems


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate already-parsed YAML; raises :class:`ScenarioError` listing every problem."""
    if not isinstance(data, dict):
        raise ScenarioError(f"scenario {source}: expected a mapping at the top level, "
                            f"got {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise ScenarioError(f"scenario {source} is not valid:", _problems(err)) from None


def builtin_scenarios() -> dict[str, Path]:
    """The built-in scenarios: name -> YAML file (package data, ``scenarios/*.yaml``)."""
    return {p.stem: p for p in sorted(SCENARIO_DIR.glob("*.yaml"))}


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load a built-in scenario by name, or a scenario YAML file by path."""
    builtins = builtin_scenarios()
    key = str(name_or_path)
    if key in builtins and not Path(key).is_file():
        path = builtins[key]
    else:
        path = Path(key)
        if not path.is_file():
            raise ScenarioError(
                f"no scenario {key!r}: not a built-in one ({', '.join(builtins) or 'none installed'}) "
                "and no such file"
            )
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ScenarioError(f"scenario {path}: cannot read: {err}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise ScenarioError(f"scenario {path}: not valid YAML{where}: {problem}") from None
    return parse_scenario(data, str(path))


def dump_scenario(scenario: Scenario) -> str:
    """The scenario as YAML (steps in time order); :func:`parse_scenario` of it gives it back."""
    data = scenario.model_dump(mode="json", exclude_none=True)
    data["steps"] = [{"at": st.pop("at"), "action": st.pop("action"), **st} for st in data["steps"]]
    return yaml.safe_dump(data, sort_keys=False)
