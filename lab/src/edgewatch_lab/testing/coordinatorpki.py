"""The pool coordinator's certificates as its own requesters would have stored them, for tests and
benchmarks that run ``edgewatch pool-coordinator`` without the controller's signer: the serving
and root certificates signed by the pool CA (``edgewatch.controller.poolca``) and saved where
``edgewatch.csr`` keeps them, so the program finds them and requests none; and a block of free
ports for its listeners.

Limits: certificates for loopback clusters that live minutes to a day.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import time
from pathlib import Path

from edgewatch import certfiles, certs
from edgewatch.controller.poolca import PoolCA, sign_client_certificate, sign_serving_certificate
from edgewatch.poolcoordinator.certificates import SERVING_COMMON_NAME, TlsFiles, root_spec, serving_spec

__all__ = ["free_port_block", "issue_pod_certificates"]


def issue_pod_certificates(ca: PoolCA, data_dir: Path, *, node: str, host_ip: str, lifetime_s: int = 86400,
                           write_ca: bool = True) -> TlsFiles:
    """Save the pod's serving certificate (SANs ``host_ip``, 127.0.0.1 and localhost) and its root
    client certificate under ``<data_dir>/tls`` with their records, and (``write_ca``) the pool CA
    file; returns the files. Each certificate lives ``lifetime_s`` seconds.

    Raises:
        OSError: a file cannot be written.
    """
    now = dt.datetime.now(dt.timezone.utc)
    tls = TlsFiles.under(data_dir)
    tls.folder.mkdir(parents=True, exist_ok=True)
    if write_ca:
        tls.ca_file.write_bytes(ca.cert_pem())
    key = certs.new_key()
    ips = [ipaddress.ip_address(a) for a in dict.fromkeys((host_ip, "127.0.0.1"))]
    pem = sign_serving_certificate(ca, public_key=key.public_key(), cn=SERVING_COMMON_NAME, ips=ips,
                                   dns_names=["localhost"], lifetime_s=lifetime_s, now=now)
    certfiles.save(tls.server, key=key, certificate=serving_spec(node=node, host_ip=host_ip).check(pem, key, lifetime_s),
                   received_at=time.time())
    key = certs.new_key()
    pem = sign_client_certificate(ca, public_key=key.public_key(), node="root", lifetime_s=lifetime_s, now=now)
    certfiles.save(tls.root, key=key, certificate=root_spec(node=node).check(pem, key, lifetime_s),
                   received_at=time.time())
    return tls


def free_port_block(host: str = "127.0.0.1") -> int:
    """A port p with p .. p+3 free on ``host`` (etcd's client port, the ops port, etcd's peer and
    metrics ports).

    Raises:
        RuntimeError: none found in 200 tries.
    """
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port > 65000:
            continue
        try:
            for p in range(port, port + 4):
                with socket.socket() as probe:
                    probe.bind((host, p))
        except OSError:
            continue
        return port
    raise RuntimeError("no block of 4 free ports")
