"""The pool-scope resource cache (OpenYurt's Yurt-Coordinator, docs/pool-cache.md): the pool leader
watches EndpointSlices and Services once for the pool and stores them in the pool coordinator's etcd;
every agent serves them to its own node's clients (kube-proxy, CoreDNS, kubectl) on a read-only,
Kubernetes-API-compatible endpoint, also while the node is cut off from the cloud."""
