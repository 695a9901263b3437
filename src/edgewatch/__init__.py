"""edgewatch: edge-node health for Kubernetes.

Tells a node that is cut off from the cloud from one that is dead: agents on the
nodes check each other and vote by strict majority within their group, carry the
heartbeat of cut-off peers to the cloud, and a cloud controller combines the
cloud's and the edge's view (TKE Edge's decision table) into taints and evictions.
"""

__version__ = "0.2.0"
