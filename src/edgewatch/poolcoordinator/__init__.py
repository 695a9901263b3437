"""The pool coordinator as edgewatch runs it (docs/install.md, ``poolCoordinators: {<pool>: auto}``): one
pod per ``auto`` pool, host network, pinned to the pool's nodes, running
``edgewatch pool-coordinator``, which

1. obtains its serving certificate and etcd's root client certificate from the controller through
   CertificateSigningRequests (``certificates``: the specs, the pool CA, the files under
   ``<data-dir>/tls``; the loop is ``edgewatch.csr``);
2. runs etcd as a supervised child process with TLS and client-certificate authentication
   (``etcdprocess``);
3. keeps etcd's users and roles equal to the pool's Nodes (``members``, applying
   ``edgewatch.pooletcd.provisioner.reconcile_acl``);
4. serves ``/healthz``, ``/readyz`` and ``/metrics`` (``health``: whether etcd answers;
   ``metrics``; the server is ``edgewatch.opsserver``);

wired together by ``coordinator`` under one TaskGroup.
"""
