"""The ``edgewatch`` command line: ``agent``, ``controller``, ``status`` and ``playground``.

Each subcommand lives in its own module and is imported lazily, so ``edgewatch --help`` stays fast
and a subcommand that is not built yet says so and exits non-zero instead of pretending.
"""

from __future__ import annotations

import sys

import click

from edgewatch import __version__

NOT_BUILT_EXIT = 3


def _not_built(name: str, issue: str) -> None:
    click.echo(f"edgewatch {name}: not built yet ({issue}).", err=True)
    sys.exit(NOT_BUILT_EXIT)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="edgewatch")
def main() -> None:
    """edgewatch: tell an edge node that is cut off from the cloud from one that is dead.

    \b
    agent       runs on every edge node: peer checks, signed votes, heartbeat delegation
    controller  runs in the cloud: the node status decision table (taints, evictions)
    status      prints every node's cloud view, edge view and state
    playground  a local edge cluster on real Kubernetes binaries with real network faults
    """


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def agent() -> None:
    """Run the edge agent on this node."""
    _not_built("agent", "see the edge agent issue")


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def controller() -> None:
    """Run the cloud controller."""
    _not_built("controller", "see the cloud controller issue")


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def status() -> None:
    """Show every node's cloud view, edge view and state."""
    _not_built("status", "see the cloud controller issue")


@main.group()
def playground() -> None:
    """A local edge cluster: real control plane, simulated nodes in network namespaces."""


@playground.command("smoke")
@click.option("--keep-seconds", type=float, default=0.0, show_default=True,
              help="Keep the control plane up this long (seconds) for a look with kubectl.")
def playground_smoke(keep_seconds: float) -> None:
    """Start the real control plane with two simulated nodes, check it works, stop it."""
    from edgewatch.testing.smoke import run_smoke

    sys.exit(run_smoke(keep_seconds=keep_seconds))


@playground.command("run", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def playground_run() -> None:
    """Play a scenario with edgewatch (and --baseline without)."""
    _not_built("playground run", "see the playground issue")
