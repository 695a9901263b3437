"""The edgewatch cloud controller.

It runs in the cloud, next to the control plane, and is the only part of edgewatch that decides taints
and evictions. For every *covered* node (``coverLabel`` of the edgewatch-config ConfigMap) it combines
the cloud's view (its Lease in ``kube-node-lease``: renewed by the node itself, renewed on its behalf by
a peer with the current ``edgewatch.io/delegate-heartbeat`` mark, or not renewed) with the edge's view
(the verdict the controller verified itself: the strict majority of the node's group's signed
statements, each naming a beacon the controller issued) into one state per node, and makes the API
match it. Freshness is always judged by when the controller *observed* a change or counted a verdict,
never by another machine's clock (docs/clock-skew.md).

Data flows one way: watches and signed statements -> the pure decision core -> a plan -> writes. The
``EdgeHealthy`` Node condition is output only: the controller writes the verified verdict there for
``kubectl``, and never reads it back.

Modules, one concept each:

- :mod:`~edgewatch.controller.model`: the vocabulary (views, states, inputs, config, plan);
- :mod:`~edgewatch.controller.views`: the cloud and edge views and the table (every freshness judgement);
- :mod:`~edgewatch.controller.autonomy`: the autonomy time of nodes without edge evidence;
- :mod:`~edgewatch.controller.taints`: tolerations, eviction timing, merging our taints and annotations;
- :mod:`~edgewatch.controller.decision`: ``plan``, the functional core;
- :mod:`~edgewatch.controller.observations`, :mod:`~edgewatch.controller.snapshots`: from API objects
  and observed times to snapshots;
- :mod:`~edgewatch.controller.verified`, :mod:`~edgewatch.controller.evidence`: the verified verdicts
  (keys, beacons, signed statements, the count) and their I/O;
- :mod:`~edgewatch.controller.edgecondition`: the ``EdgeHealthy`` condition (output only);
- :mod:`~edgewatch.controller.quiet`, :mod:`~edgewatch.controller.planbook`: when a look needs no
  reconcile or no new plan, and the plans kept;
- :mod:`~edgewatch.controller.coverage`: which nodes are handled;
- :mod:`~edgewatch.controller.workqueue`, :mod:`~edgewatch.controller.seen`,
  :mod:`~edgewatch.controller.reconciler`, :mod:`~edgewatch.controller.evictions`: per-node work;
- :mod:`~edgewatch.controller.roster`: the group rosters;
- :mod:`~edgewatch.controller.leader`, :mod:`~edgewatch.controller.ops`, :mod:`~edgewatch.controller.main`,
  :mod:`~edgewatch.controller.metrics`: leader election, /healthz /readyz /metrics, the process;
- :mod:`~edgewatch.controller.standby`: what a replica that does not lead keeps watching (the warm
  standby the reconciler starts from).
"""
