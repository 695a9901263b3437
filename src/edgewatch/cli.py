"""The ``edgewatch`` command line: ``agent``, ``controller``, ``status``, ``kubeconfig``,
``rotate-key``, ``uninstall``, ``pool-etcd-acl``; and, when the lab distribution (``edgewatch-lab``) is installed beside it,
``playground``, ``sim`` and ``sim-sweep`` (entry-point group ``edgewatch.commands``; never in the image).

Each subcommand lives in its own module and is imported lazily, so ``edgewatch --help`` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from edgewatch import __version__
from edgewatch.controller.model import UnknownPolicy
from edgewatch.names import DEFAULT_PEER_PORT, DEFAULT_POOL_CACHE_PORT

#: Entry-point group through which installed add-ons (the lab) contribute subcommands.
COMMANDS_GROUP = "edgewatch.commands"


class _Commands(click.Group):
    """The product's own subcommands, plus those installed add-ons declare (``edgewatch.commands``
    entry points: the lab's ``playground`` and ``sim``), looked up only when a name is not one of
    ours or the list is shown, so ``edgewatch agent`` never scans the installed packages. A broken
    add-on never breaks the product's own commands."""

    def _installed(self) -> dict[str, click.Command]:
        from importlib.metadata import entry_points

        found: dict[str, click.Command] = {}
        for ep in entry_points(group=COMMANDS_GROUP):
            if ep.name in self.commands:
                continue
            try:
                command = ep.load()
            except Exception as exc:  # noqa: BLE001 - an add-on's import error must not stop the agent
                print(f"edgewatch: ignoring the {ep.name!r} command of an add-on: {exc}", file=sys.stderr)
                continue
            if isinstance(command, click.Command):
                found[ep.name] = command
        return found

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._installed()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, cmd_name) or self._installed().get(cmd_name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="edgewatch")
def main() -> None:
    """edgewatch: tell an edge node that is cut off from the cloud from one that is dead.

    \b
    agent       runs on every edge node: peer checks, signed votes, heartbeat delegation
    controller  runs in the cloud: the node status decision table (taints, evictions)
    status      prints every node's cloud view, edge view and state
    playground  (lab) a local edge cluster on real Kubernetes binaries with real network faults
    sim         (lab) groups of up to 1,000 agents on a virtual clock: detection, loss, cost, splits
    sim-sweep   (lab) false verdicts under packet loss over many simulated groups
    """


@main.command()
@click.option("--node", envvar="NODE_NAME", required=True, help="This node's name (env NODE_NAME).")
@click.option("--identity-file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="This node's private signing key (Ed25519 PEM), created on first start; keep it on the node "
                   "(the DaemonSet's hostPath state folder). Rotate with 'edgewatch rotate-key'.")
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None,
              help="Kubeconfig (env KUBECONFIG; default: in-cluster, the pod's ServiceAccount and "
                   "KUBERNETES_SERVICE_HOST/PORT).")
@click.option("--listen-address", default="0.0.0.0", show_default=True,
              help="Address of the peer/ops server. With 0.0.0.0 (hostNetwork) peer traffic is sent from this "
                   "node's InternalIP, which peers require.")
@click.option("--port", type=int, default=DEFAULT_PEER_PORT, show_default=True, help="Peer port (also /metrics).")
@click.option("--namespace", default="edgewatch", show_default=True, help="Namespace of the edgewatch-config ConfigMap.")
@click.option("--kubelet-healthz-url", default="http://127.0.0.1:10248/healthz", show_default=True,
              help="This node's kubelet health endpoint (the kubelet's default healthz address; on the host's "
                   "loopback, so the agent needs hostNetwork).")
@click.option("--coordinator", "coordinator_url", default=None,
              help="Pool coordinator (etcd) URL, http(s)://HOST:PORT. Default: this node's pool's entry in the "
                   "edgewatch-config ConfigMap key poolCoordinators (YAML 'pool: URL'), followed live; no entry: "
                   "no coordinator (peer path only).")
@click.option("--pool", default=None, help="Node pool name for the coordinator (default: the edgewatch.io/pool label).")
@click.option("--coordinator-ca", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="CA of the coordinator's serving certificate (https:// URLs).")
@click.option("--coordinator-cert", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Client certificate for the coordinator (etcd --client-cert-auth).")
@click.option("--coordinator-key", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Client key for the coordinator.")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Persist the group roster here (survives restarts during a cut). If it cannot be written the "
                   "agent logs it once, counts edgewatch_agent_state_save_failures_total and runs from memory.")
@click.option("--coordinator-certificate", "coordinator_certificate", is_flag=True, default=False,
              help="Obtain, store (in --state-dir, key 0600) and rotate this node's client certificate for the pool "
                   "coordinator from the controller's signer (a CertificateSigningRequest; needs a pod-bound token "
                   "and RBAC to create and get CSRs); the pool coordinator then connects with it, trusting only "
                   "the pool CA.")
@click.option("--pool-cache-address", default="127.0.0.1", show_default=True,
              help="Where the pool cache's read-only Kubernetes API (EndpointSlices, Services) listens, for this "
                   "node's kube-proxy and CoreDNS.")
@click.option("--pool-cache-port", type=int, default=DEFAULT_POOL_CACHE_PORT, show_default=True,
              help="Its HTTPS port; 0 turns the node side of the pool cache off.")
@click.option("--exchange-period", type=float, default=1.0, show_default=True, help="Seconds between exchanges.")
@click.option("--vote-ttl", type=float, default=5.0, show_default=True, help="Seconds a vote counts (>= 3 periods).")
@click.option("--probe-timeout", type=float, default=0.8, show_default=True, help="Seconds per peer exchange.")
@click.option("--cloud-interval", type=float, default=2.0, show_default=True, help="Seconds between cloud-link probes.")
@click.option("--cloud-timeout", type=float, default=2.0, show_default=True, help="Seconds per cloud-link probe.")
@click.option("--cloud-down-after", type=int, default=3, show_default=True,
              help="Failed probes in a row before the cloud link counts as down (one slow request never does).")
@click.option("--cloud-up-after", type=int, default=2, show_default=True,
              help="Good probes in a row before it counts as up again.")
@click.option("--peer-request-timeout", type=float, default=3.0, show_default=True,
              help="Seconds a whole request (headers and body) may take to arrive on the peer port, from its "
                   "first byte; slower connections are closed (a peer gives up after --probe-timeout anyway).")
@click.option("--peer-idle-timeout", type=float, default=30.0, show_default=True,
              help="Seconds a keep-alive connection to the peer port may sit without a request (above the "
                   "peers' own 15 s, so they always close first).")
@click.option("--peer-max-connections-per-source", type=int, default=8, show_default=True,
              help="Connections one address may hold open on the peer port (a peer needs one; a stranger's "
                   "IPv6 address counts as its /64); more are refused with 503 before a byte is read.")
@click.option("--peer-max-stranger-connections", type=int, default=64, show_default=True,
              help="Connections all strangers (neither this node nor a group member: scrapers, pods, the LAN) "
                   "may hold open together; this node and its peers are never refused by this bound.")
@click.option("--peer-kubelet-port", type=click.IntRange(0, 65535), default=10250, show_default=True,
              help="The peers' kubelet port: a dead vote on a neighbour whose kubelet accepts a TCP connection "
                   "here (its agent is down, not the node), or never did (the check cannot tell), is marked "
                   "unconfirmed, and the controller then waits for that node's Lease; 0: no such check (every "
                   "dead vote unconfirmed).")
@click.option("--log-level", default="INFO", show_default=True)
@click.option("--log-format", type=click.Choice(["json", "text"]), default="json", show_default=True)
def agent(**opts: object) -> None:
    """Run the edge agent on this node: peer checks, signed votes, verdicts, heartbeat carrying.

    Example (what the DaemonSet runs, hostNetwork, NODE_NAME from the downward API, in-cluster
    credentials, the pool coordinator from the ConfigMap):

    \b
      edgewatch agent --identity-file /var/lib/edgewatch/identity.key --state-dir /var/lib/edgewatch
    """
    from edgewatch.agent.main import run_agent

    sys.exit(run_agent(**opts))  # type: ignore[arg-type]


@main.command("rotate-key")
@click.option("--identity-file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The agent's key file (e.g. /var/lib/edgewatch/identity.key on the node).")
def rotate_key(identity_file: Path) -> None:
    """Put a new signing key first in a node's key file and keep the current one second.

    The agent publishes both at its next start and signs with the new one; peers accept either, so
    nothing is dropped (the old key goes at the next rotation). Example, on the node, then restart
    the node's agent pod:

    \b
      edgewatch rotate-key --identity-file /var/lib/edgewatch/identity.key
    """
    from edgewatch.core.identity import rotate_key_file

    keys = rotate_key_file(identity_file)
    click.echo(f"signing key {keys[0].key_id}; still published: {', '.join(k.key_id for k in keys[1:]) or '-'}")


@main.command()
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig (default: in-cluster).")
@click.option("--namespace", default="edgewatch", show_default=True,
              help="Namespace of the leader-election Lease and of the edgewatch-config ConfigMap.")
@click.option("--identity", envvar="POD_NAME", default=None, help="Leader-election identity (default host-pid).")
@click.option("--confirm", type=float, default=20.0, show_default=True,
              help="Seconds a disconnected state must last before the NoSchedule taint.")
@click.option("--edge-ttl", type=float, default=60.0, show_default=True,
              help="Seconds an EdgeHealthy verdict counts after the controller last saw it refreshed.")
@click.option("--unknown-policy", type=click.Choice([p.value for p in UnknownPolicy]), default="autonomy",
              show_default=True, help="What to do without edge evidence.")
@click.option("--autonomy", type=float, default=300.0, show_default=True,
              help="Seconds pods are kept without edge evidence (per node: edgewatch.io/autonomy-duration).")
@click.option("--node-monitor-grace", type=float, default=40.0, show_default=True,
              help="kube-controller-manager's --node-monitor-grace-period in this cluster, seconds (stock: 40 "
                   "before Kubernetes 1.32, 50 since). At least 20: the carry bound (5 s past the control plane's "
                   "clock) must never hide a live node's own renewals past it.")
@click.option("--challenge-timeout", type=float, default=1.5, show_default=True,
              help="Seconds a node its peers see dead or suspect has to answer the controller's challenge (a beacon naming "
                   "it) over its own cloud link before it is failed without waiting for its Lease to go overdue; "
                   "0: no challenges (a dead node is failed 2-12 s later, by the kubelet's phase).")
@click.option("--resync", type=float, default=30.0, show_default=True, help="Seconds between full resyncs.")
@click.option("--workers", type=int, default=8, show_default=True,
              help="Nodes reconciled at once (one node is never handled by two at a time).")
@click.option("--api-timeout", type=float, default=10.0, show_default=True,
              help="Seconds every API call may take (a watch silent for 150 s is re-opened).")
@click.option("--metrics-address", default="0.0.0.0", show_default=True)
@click.option("--metrics-port", type=int, default=8080, show_default=True, help="/healthz, /readyz, /metrics.")
@click.option("--coordinator-image", envvar="EDGEWATCH_IMAGE", default="", show_default=True,
              help="The edgewatch image (carries etcd) of the pool coordinators run for 'auto' pools "
                   "(env EDGEWATCH_IMAGE; default: this controller's own, read from its Pod --pod-name).")
@click.option("--pod-name", envvar="POD_NAME", default=None,
              help="This controller's Pod (env POD_NAME, set by the manifest): its image runs the coordinators.")
@click.option("--log-level", default="INFO", show_default=True)
@click.option("--log-format", type=click.Choice(["json", "text"]), default="json", show_default=True)
def controller(**opts: object) -> None:
    """Run the cloud controller: the node status decision table (taints, evictions, Events).

    Only nodes covered by the edgewatch-config ConfigMap (label key coverLabel; empty = all) are
    handled; freshness is judged by when the controller saw each Lease renewal and verdict change,
    never by the nodes' clocks (docs/clock-skew.md).
    """
    from edgewatch.controller.main import run_controller

    sys.exit(run_controller(**opts))  # type: ignore[arg-type]


@main.command()
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("/var/lib/edgewatch"),
              show_default=True, help="The agent's state folder (its pool-cache/ holds the endpoint's certificate).")
@click.option("--server", default=None,
              help=f"The endpoint's URL (default: https://127.0.0.1:{DEFAULT_POOL_CACHE_PORT}).")
@click.option("--token-file", default=None,
              help="A token file the client sends, e.g. its projected ServiceAccount token: the cache serves only "
                   "tokens the cloud authenticates and authorizes, and passes it through on forwarded requests.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the kubeconfig here (mode 0644) instead of printing it.")
def kubeconfig(state_dir: Path, server: str | None, token_file: str | None, output: Path | None) -> None:
    """Print the kubeconfig a node client (kube-proxy, CoreDNS, kubectl) uses to read the pool cache.

    Run it on the node (the agent keeps its certificate in STATE_DIR/pool-cache/). Cached
    resources are answered from the cache, also while the node is cut off from the cloud, to a
    client whose token the cloud authenticated and authorized (checked before the cut; a token
    never seen before cannot be checked while cut off); everything else is forwarded to the cloud
    with the client's own token.

    \b
      edgewatch kubeconfig --token-file /var/lib/kube-proxy/token -o /var/lib/kube-proxy/pool.kubeconfig
      kubectl --kubeconfig /var/lib/kube-proxy/pool.kubeconfig get endpointslices -A --watch
    """
    from edgewatch.poolcache.tls import CERT_FILE, client_kubeconfig

    cert = state_dir / "pool-cache" / CERT_FILE
    try:
        ca = cert.read_bytes()
    except OSError as exc:
        click.echo(f"cannot read the pool cache's certificate {cert}: {exc.strerror} (is the agent running here "
                   f"with --state-dir {state_dir}?)", err=True)
        sys.exit(2)
    text = client_kubeconfig(server=server or f"https://127.0.0.1:{DEFAULT_POOL_CACHE_PORT}", ca_pem=ca,
                             token_file=token_file)
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text)
        output.chmod(0o644)


@main.command()
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig (default: in-cluster).")
@click.option("--namespace", default="edgewatch", show_default=True,
              help="Namespace of the edgewatch-config ConfigMap (for the COVERED column).")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
def status(kubeconfig: str | None, namespace: str, output: str) -> None:
    """Show every node's pool, coverage, heartbeat, edge verdict, state, delegate, role, taints and age."""
    from edgewatch.status import run_status

    sys.exit(run_status(kubeconfig=kubeconfig, namespace=namespace, output=output))


@main.command()
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig (default: in-cluster).")
@click.option("--namespace", default="edgewatch", show_default=True,
              help="edgewatch's namespace (its rosters, pool CAs, beacon; edgewatch-nodes is fixed).")
@click.option("--dry-run", is_flag=True, default=False, help="Print what would be removed; write nothing.")
@click.option("--api-timeout", type=float, default=10.0, show_default=True, help="Seconds per API request.")
@click.option("--force", is_flag=True, default=False,
              help="Clean even while the install's ServiceAccounts exist (its controller and agents would undo it).")
def uninstall(kubeconfig: str | None, namespace: str, dry_run: bool, api_timeout: float, force: bool) -> None:
    """Remove every mark edgewatch left on the cluster (taints, annotations, conditions, Lease marks,
    rosters, evidence, key records, pool CAs, CSRs). Run it after `kubectl delete -k deploy/
    --wait=false` or `helm uninstall` (docs/uninstall.md): it refuses while the install is still
    there. Exit 1 if something could not be removed, 2 if the cluster could not be read, 3 if the
    install is still there."""
    from edgewatch.uninstall import run_uninstall

    sys.exit(run_uninstall(kubeconfig=kubeconfig, namespace=namespace, dry_run=dry_run,
                           api_timeout_s=api_timeout, force=force))


@main.command("pool-etcd-acl")
@click.option("--endpoint", required=True, help="The pool etcd's client endpoint, host:port.")
@click.option("--pool", required=True, help="The node pool (a DNS-1123 label).")
@click.option("--ca", "ca_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="The pool CA certificate (PEM): the etcd serving certificate must be signed by it.")
@click.option("--cert", "cert_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="A client certificate with CN=root from the pool CA (PEM).")
@click.option("--key", "key_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="Its private key (PEM).")
@click.option("--member", "members", multiple=True, required=True,
              help="A node of the pool (repeat for each). Nodes not named lose their etcd user.")
@click.option("--timeout", type=float, default=5.0, show_default=True, help="Seconds per etcd call.")
@click.option("--no-enable", is_flag=True, default=False, help="Make users and roles but leave authentication off.")
def pool_etcd_acl(endpoint: str, pool: str, ca_file: Path, cert_file: Path, key_file: Path,
                  members: tuple[str, ...], timeout: float, no_enable: bool) -> None:
    """Give a pool coordinator's etcd one user and role per node, so each node writes only its own
    keys, and switch etcd's authentication on (docs/security.md). Idempotent; prints each change.

    \b
      edgewatch pool-etcd-acl --endpoint 10.0.0.5:2379 --pool factory-1 --ca pool-ca.crt \\
          --cert root.crt --key root.key --member edge-1 --member edge-2 --member edge-3
    """
    import asyncio

    import grpc

    from edgewatch.core.types import is_dns1123_label, is_dns1123_subdomain
    from edgewatch.pooletcd.provisioner import AclError, reconcile_acl

    bad = [m for m in members if not is_dns1123_subdomain(m)]
    if not is_dns1123_label(pool) or bad:
        click.echo(f"not a pool name (DNS-1123 label): {pool!r}" if not is_dns1123_label(pool)
                   else f"not node names (DNS-1123 subdomains): {bad}", err=True)
        sys.exit(2)
    try:
        credentials = grpc.ssl_channel_credentials(root_certificates=ca_file.read_bytes(),
                                                   private_key=key_file.read_bytes(),
                                                   certificate_chain=cert_file.read_bytes())
        result = asyncio.run(reconcile_acl(target=endpoint, credentials=credentials, pool=pool, members=members,
                                           timeout_s=timeout, enable=not no_enable))
    except (OSError, AclError) as exc:
        click.echo(f"pool etcd access control not reconciled: {exc}", err=True)
        sys.exit(1)
    for step in result.steps:
        target = step.role or (step.grant.key.decode(errors="replace") if step.grant else "")
        click.echo(f"{step.op:12} {step.name} {target}".rstrip())
    click.echo(f"{len(result.steps)} change(s); authentication "
               f"{'switched on' if result.enabled_auth else 'on' if not no_enable else 'left as it was'}")


@main.command("pool-coordinator")
@click.option("--pool", required=True, help="The node pool (its Nodes' edgewatch.io/pool label value).")
@click.option("--namespace", default="edgewatch", show_default=True, help="edgewatch's namespace (the pool CA).")
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig (default: in-cluster).")
@click.option("--node", envvar="NODE_NAME", default=None, help="The node this runs on (default: $NODE_NAME).")
@click.option("--host-ip", envvar="HOST_IP", default=None, help="The node's address (default: $HOST_IP).")
@click.option("--port", type=int, default=12379, show_default=True,
              help="etcd's client port (TLS; peer port+2 and metrics port+3 on loopback).")
@click.option("--ops-port", type=int, default=12380, show_default=True, help="/healthz, /readyz, /metrics.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/var/lib/edgewatch/coordinator"), show_default=True, help="tls/ and etcd/ live here.")
@click.option("--etcd-binary", default=None, help="The etcd executable (default: etcd on PATH).")
@click.option("--api-timeout", type=float, default=10.0, show_default=True, help="Seconds per API request.")
@click.option("--log-level", default="INFO", show_default=True)
@click.option("--log-format", type=click.Choice(["json", "text"]), default="json", show_default=True)
def pool_coordinator(**opts: object) -> None:
    """Run one pool's coordinator: etcd with certificates from the controller (CSRs), one etcd user
    per Node of the pool, /healthz, /readyz and /metrics. Run by the controller's Deployment for each
    `auto` pool (docs/install.md); not by hand."""
    from edgewatch.poolcoordinator.main import run_pool_coordinator

    sys.exit(run_pool_coordinator(**opts))  # type: ignore[arg-type]
