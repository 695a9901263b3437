"""The edgewatch cloud controller.

It runs in the cloud, next to the control plane, and is the only part of edgewatch that decides taints
and evictions. For every *covered* node (``coverLabel`` of the edgewatch-config ConfigMap) it combines
the cloud's view (its Lease in ``kube-node-lease``: renewed by the node itself, renewed on its behalf by
a peer with the current ``edgewatch.io/delegate-heartbeat`` mark, or not renewed) with the edge's view
(the ``EdgeHealthy`` Node condition published from the votes of the node's peers) into one state per
node, and makes the API match it. Freshness is always judged by when the controller *observed* a
change, never by another machine's clock (docs/clock-skew.md).

Modules, one concept each:

- :mod:`~edgewatch.controller.model`: the vocabulary (views, states, snapshots, config, plan);
- :mod:`~edgewatch.controller.views`: the cloud and edge views and the table (every freshness judgement);
- :mod:`~edgewatch.controller.autonomy`: the autonomy time of nodes without edge evidence;
- :mod:`~edgewatch.controller.taints`: tolerations, eviction timing, merging our taints and annotations;
- :mod:`~edgewatch.controller.decision`: ``plan``, the functional core;
- :mod:`~edgewatch.controller.observations`, :mod:`~edgewatch.controller.snapshots`: from API objects
  and observed times to snapshots;
- :mod:`~edgewatch.controller.coverage`: which nodes are handled;
- :mod:`~edgewatch.controller.workqueue`, :mod:`~edgewatch.controller.reconciler`: per-node work;
- :mod:`~edgewatch.controller.leader`, :mod:`~edgewatch.controller.ops`, :mod:`~edgewatch.controller.main`:
  leader election, /healthz /readyz /metrics, the process.
"""
