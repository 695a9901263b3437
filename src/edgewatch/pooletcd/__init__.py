"""The pool coordinator's etcd, server side: its access control (docs/security.md).

``acl`` computes, purely, which etcd users and roles a pool needs (one user per node, named by
the CN of the node's client certificate, whose role lets it write only its own keys:
``edgewatch.poolkeys.node_grants``) and what to change to get there; ``provisioner`` applies that
through etcd's Auth API with the coordinator's root credentials and switches authentication on.
"""
