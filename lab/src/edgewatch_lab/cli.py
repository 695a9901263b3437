"""The lab's commands: ``playground`` (a local edge cluster on real Kubernetes binaries with real
network faults) and ``sim`` (groups of up to 1,000 agents on a virtual clock).

They are not part of the product: the ``edgewatch`` command shows them when this distribution
(``edgewatch-lab``, in ``lab/`` of the repository) is installed beside it, through the entry-point
group ``edgewatch.commands``; ``edgewatch-lab`` runs them on their own. Each imports its machinery
lazily, so ``edgewatch --help`` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.group()
def lab() -> None:
    """The edgewatch lab: the playground and the simulator."""


@click.group()
def playground() -> None:
    """A local edge cluster: real control plane, simulated nodes in network namespaces."""


@playground.command("smoke")
@click.option("--keep-seconds", type=float, default=0.0, show_default=True,
              help="Keep the control plane up this long (seconds) for a look with kubectl.")
def playground_smoke(keep_seconds: float) -> None:
    """Start the real control plane with two simulated nodes, check it works, stop it."""
    from edgewatch_lab.testing.smoke import run_smoke

    sys.exit(run_smoke(keep_seconds=keep_seconds))


@playground.command("list")
def playground_list() -> None:
    """List the built-in scenarios."""
    from edgewatch_lab.playground.scenario import builtin_scenarios, load_scenario

    for name in sorted(builtin_scenarios()):
        click.echo(f"{name:18} {load_scenario(name).description}")


@playground.command("run")
@click.argument("scenario")
@click.option("--baseline", is_flag=True, help="Stock Kubernetes: no agents, no controller (= --system stock).")
@click.option("--system", type=click.Choice(["edgewatch", "superedge", "stock"]), default=None,
              help="What judges the nodes (default edgewatch): superedge installs SuperEdge v0.9.0's "
              "edge-health and its webhook instead (built on first use; measured, not judged).")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path), help="Write the JSON report here.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Draw the timeline (.svg or .png).")
@click.option("--live/--no-live", default=True, show_default=True, help="Live table while it runs.")
@click.option("--keep-logs", is_flag=True, help="Keep the run's logs even when every expectation held.")
@click.option("--install", "install_method", type=click.Choice(["kustomize", "helm"]), default="kustomize",
              show_default=True, help="Install edgewatch from deploy/ (kustomize overlay, kubectl apply) "
              "or from charts/edgewatch (helm install with the same settings as values).")
@click.option("--coordinators", "coordinator_mode", type=click.Choice(["process", "pods"]), default=None,
              help="How pools with a coordinator get it (default: the scenario's topology, itself "
              "'process'): an etcd the lab runs, or pods as shipped (poolCoordinators {pool: auto}).")
@click.option("--prometheus", is_flag=True, help="Run a real Prometheus (built on first use) that scrapes "
              "the edgewatch controller and agents and evaluates the shipped alert rules; the report's "
              "'alerts' lists what fired and when.")
def playground_run(scenario: str, baseline: bool, system: str | None, report: Path | None, plot: Path | None,
                   live: bool, keep_logs: bool, install_method: str, coordinator_mode: str | None,
                   prometheus: bool) -> None:
    """Play SCENARIO (a built-in name or a YAML file) and check its expectations.

    Exits 1 if an expectation failed. Example: edgewatch playground run node-failure --report r.json
    """
    from edgewatch_lab.playground.cli import run_one

    if baseline and system not in (None, "stock"):
        raise click.UsageError("--baseline is --system stock")
    sys.exit(run_one(scenario, baseline=baseline, report=report, plot=plot, live=live, keep_logs=keep_logs,
                     install_method=install_method, coordinator_mode=coordinator_mode, prometheus=prometheus,
                     system=system))


@playground.command("compare")
@click.argument("scenario")
@click.option("--report-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("reports"),
              show_default=True, help="Where to write the JSON reports (one per system).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path),
              help="Draw the timelines (.svg/.png): all runs in this file, and one file per system beside it.")
@click.option("--systems", default="edgewatch,stock", show_default=True,
              help="Comma-separated, run in this order: edgewatch, superedge (SuperEdge v0.9.0's edge-health, "
              "built on first use), stock.")
@click.option("--live/--no-live", default=True, show_default=True)
@click.option("--install", "install_method", type=click.Choice(["kustomize", "helm"]), default="kustomize",
              show_default=True, help="Install edgewatch from deploy/ (kustomize) or charts/edgewatch (helm).")
@click.option("--prometheus", is_flag=True, help="Run a real Prometheus (built on first use) that scrapes "
              "the edgewatch controller and agents and evaluates the shipped alert rules; the report's "
              "'alerts' lists what fired and when.")
def playground_compare(scenario: str, report_dir: Path, plot: Path | None, systems: str, live: bool,
                       install_method: str, prometheus: bool) -> None:
    """Play SCENARIO on each system (default: edgewatch, then stock Kubernetes) and print the
    summaries side by side. Example: edgewatch playground compare node-failure --systems
    edgewatch,superedge,stock --plot reports/node-failure.svg"""
    from edgewatch_lab.playground.cli import compare

    sys.exit(compare(scenario, report_dir=report_dir, plot=plot, live=live, install_method=install_method,
                     prometheus=prometheus, systems=tuple(s.strip() for s in systems.split(",") if s.strip())))


@playground.command("table")
@click.argument("scenarios", nargs=-1, required=True)
@click.option("--report-dir", type=click.Path(file_okay=False, exists=True, path_type=Path), default=Path("reports"),
              show_default=True, help="Where `compare` wrote the reports.")
@click.option("--systems", default="edgewatch,superedge,stock", show_default=True,
              help="Comma-separated columns, in this order.")
def playground_table(scenarios: tuple[str, ...], report_dir: Path, systems: str) -> None:
    """Print one Markdown table of SCENARIOS' summaries, one column per system, from the reports
    `compare` wrote (docs/lab.md's comparison is this output). Example: edgewatch playground table
    node-failure cut-and-kill --report-dir reports/peers"""
    from edgewatch_lab.playground.comparison import SYSTEMS, load_reports, scenarios_markdown

    chosen = tuple(s.strip() for s in systems.split(",") if s.strip())
    unknown = sorted(set(chosen) - set(SYSTEMS))
    if unknown:
        raise click.BadParameter(f"unknown system(s) {', '.join(unknown)}; known: {', '.join(SYSTEMS)}",
                                 param_hint="--systems")
    try:
        by_scenario = {s: load_reports(report_dir, s, chosen) for s in scenarios}
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    missing = [s for s, reports in by_scenario.items() if not reports]
    if missing:
        raise click.ClickException(f"no report in {report_dir} for {', '.join(missing)}")
    click.echo(scenarios_markdown(by_scenario, systems=chosen), nl=False)


@playground.command("up")
@click.argument("scenario", default="cloud-partition")
@click.option("--baseline", is_flag=True, help="Without edgewatch.")
def playground_up(scenario: str, baseline: bool) -> None:
    """Start SCENARIO's cluster (no faults) and keep it running until Ctrl-C, for kubectl and
    `edgewatch status`."""
    from edgewatch_lab.playground.cli import up

    sys.exit(up(scenario, baseline=baseline))


@playground.command("down")
def playground_down() -> None:
    """Remove what a crashed or killed playground left behind (namespaces, processes, folders)."""
    from edgewatch_lab.playground.cli import down

    sys.exit(down())


@click.command("sim")
@click.option("--sizes", default="5,50,200,1000", show_default=True, help="Group sizes, comma-separated.")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of every random choice.")
@click.option("--kills", type=int, default=10, show_default=True, help="Killed nodes timed per size.")
@click.option("--node-hours", type=float, default=20.0, show_default=True,
              help="Simulated node-hours per size and loss level for the false-verdict count.")
@click.option("--loss", "losses", default="0.1,0.3", show_default=True, help="Per-node packet loss levels.")
@click.option("--cost-sizes", default=None, help="Sizes measured with real envelopes (default: all).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write every figure as JSON.")
def sim(sizes: str, seed: int, kills: int, node_hours: float, losses: str, cost_sizes: str | None,
        json_path: Path | None) -> None:
    """Simulate groups of each size on a virtual clock with the agents' real core (topology,
    detectors, heartbeats, the reach count, duties) and print docs/scaling.md's table: kill -> unhealthy,
    false verdicts under loss, messages and bytes per node, and splits. Deterministic for a seed.

    \b
    Example (docs/scaling.md's table, about 10 minutes on 2 cores):
      edgewatch sim --json reports/sim.json
    """
    import json

    from edgewatch_lab.sim.table import markdown, measure

    def ints(text: str) -> list[int]:
        return [int(x) for x in text.split(",") if x.strip()]

    result = measure(sizes=ints(sizes), seed=seed, kills=kills, node_hours=node_hours,
                     losses=[float(x) for x in losses.split(",") if x.strip()],
                     cost_sizes=ints(cost_sizes) if cost_sizes else None,
                     progress=lambda msg: click.echo(f"[sim] {msg}", err=True))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2) + "\n")
    click.echo(markdown(result))


@click.command("sim-sweep")
@click.option("--seeds", type=int, default=1000, show_default=True, help="Groups simulated per rule and loss level.")
@click.option("--first-seed", type=int, default=1, show_default=True, help="Seed of the first group.")
@click.option("--sizes", default="8,1000", show_default=True,
              help="Smallest and largest group size (each group's size is drawn log-uniformly between).")
@click.option("--loss", "losses", default="0.1,0.3", show_default=True, help="Per-node packet loss levels.")
@click.option("--seconds", type=float, default=120.0, show_default=True,
              help="Simulated seconds at the loss level per group, after a 20 s warm-up.")
@click.option("--rules", default="loss-aware", show_default=True,
              help="Failure detector rules compared on the same seeds: loss-aware (the default), fixed.")
@click.option("--workers", type=int, default=None, help="Processes (default: one per core).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the summary and every run as JSON.")
def sim_sweep(seeds: int, first_seed: int, sizes: str, losses: str, seconds: float, rules: str,
              workers: int | None, json_path: Path | None) -> None:
    """Count false UNHEALTHY verdicts of live nodes under packet loss over many simulated groups and
    print them with the node-hours observed, per detector rule and loss level. Deterministic.

    \b
    Examples:
      edgewatch sim-sweep --seeds 1000 --json reports/false-verdicts.json   # hours on 2 cores
      edgewatch sim-sweep --seeds 100 --sizes 8,200 --rules loss-aware,fixed
    """
    import json

    from edgewatch_lab.sim.sweep import markdown, summary, sweep

    low, high = (int(x) for x in sizes.split(","))
    runs = sweep(seeds=seeds, first_seed=first_seed, min_size=low, max_size=high,
                 losses=[float(x) for x in losses.split(",") if x.strip()], seconds=seconds,
                 rules=[r.strip() for r in rules.split(",") if r.strip()], workers=workers,
                 progress=lambda msg: click.echo(f"[sim-sweep] {msg}", err=True))
    rows = summary(runs)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps({"summary": rows, "runs": [vars(r) for r in runs]}, indent=2) + "\n")
    click.echo(markdown(rows))


lab.add_command(playground)
lab.add_command(sim)
lab.add_command(sim_sweep)
