"""The edgewatch cloud controller.

It runs in the cloud, next to the control plane, and is the only part of edgewatch that decides taints
and evictions. It combines the cloud's view of each node (its Lease in ``kube-node-lease``: renewed by the
node itself, renewed on its behalf by a peer with the ``edgewatch.io/delegate-heartbeat: "true"`` mark, or
not renewed at all) with the edge's view (the ``EdgeHealthy`` Node condition published from the votes of
the node's peers) into one state per node, and makes the API match it.

- :mod:`edgewatch.controller.decision` is the functional core: pure functions from API snapshots and a
  ``now`` (seconds since the epoch) to the desired taints, annotations, events and evictions.
"""
