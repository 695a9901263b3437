"""The playground's commands (``edgewatch playground run|compare|up|down``), kept apart from the
click definitions so they can be called from tests and ``make demo``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
from pathlib import Path

from rich.console import Console

from edgewatch_lab.playground.prometheus import format_alerts
from edgewatch_lab.playground.comparison import SYSTEMS, SUFFIXES, TITLES, table as systems_table
from edgewatch_lab.playground.runner import RunResult, run_scenario, with_coordinator_mode
from edgewatch_lab.playground.scenario import ScenarioError, load_scenario


#: A progress line of hack/binaries/build.sh: "[edgewatch build] <label>: <n>/<total> packages compiled, ...".
BUILD_PROGRESS = re.compile(r"\] (?P<label>.+?): (?P<n>\d+)/(?P<total>\d+) packages")


def binaries_with_progress(console: Console):  # type: ignore[no-untyped-def]
    """The control-plane binaries; a first build shows a progress bar (packages compiled)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from edgewatch_lab.testing.binaries import ensure_binaries

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("control-plane binaries", total=None)

        def on_line(line: str) -> None:
            m = BUILD_PROGRESS.search(line)
            if m:
                progress.update(task, description=f"building {m['label']}", completed=int(m["n"]),
                                total=int(m["total"]))
            elif line.strip():
                progress.console.print(line)

        return ensure_binaries(on_progress=on_line)


def _print_result(console: Console, result: RunResult, *, label: str) -> None:
    if result.report.get("alerts") is not None:
        console.print("  alerts (Prometheus, the shipped rules; scenario seconds):")
        for line in format_alerts(result.report["alerts"]):
            console.print(f"    {line}", markup=False)
    for e in result.expectations:
        mark = "[green]PASS[/]" if e.passed else "[red]FAIL[/]"
        console.print(f"  {mark} {e.description}: {e.detail}")
    if result.logs:
        console.print(f"  logs of the {label} run: {result.logs[0].parent}")


def _write_plot(reports: list[dict], plot: Path) -> None:  # type: ignore[type-arg]
    from edgewatch_lab.playground.plot import plot_runs

    plot.parent.mkdir(parents=True, exist_ok=True)
    plot_runs(reports, plot)


def _install_line(result: RunResult) -> str:
    """How edgewatch was installed, for the console ("" for a baseline run)."""
    done = result.install
    if done.get("method") == "helm":
        return (f"installed with helm: release {done['release']} ({done['chart']}, revision {done['revision']}, "
                f"{done['status']}) in namespace {done['namespace']}")
    return f"installed with {done['method']}" if done else ""


def run_one(name: str, *, baseline: bool, report: Path | None, plot: Path | None, live: bool,
            keep_logs: bool, install_method: str = "kustomize", coordinator_mode: str | None = None,
            prometheus: bool = False, system: str | None = None) -> int:
    """``playground run``: exit code 0 if every expectation held, 1 otherwise, 2 for a bad scenario.
    ``install_method``: how edgewatch is installed (``install.METHODS``); ``coordinator_mode``
    (``process`` / ``pods``) overrides the scenario's ``coordinators``; ``prometheus``: a real
    Prometheus evaluates the shipped alert rules (the report's ``alerts``)."""
    console = Console()
    try:
        scenario = with_coordinator_mode(load_scenario(name), coordinator_mode)
    except (ScenarioError, ValueError) as exc:
        console.print(f"[red]{exc}[/]")
        return 2
    binaries = binaries_with_progress(console)
    result = run_scenario(scenario, baseline=baseline, console=console, live=live, keep_logs=keep_logs,
                          binaries=binaries, install_method=install_method, prometheus=prometheus, system=system)
    label = TITLES[result.report["system"]]
    if _install_line(result):
        console.print(_install_line(result))
    console.print(f"[bold]{scenario.name} ({label})[/]: summary {json.dumps(result.report['summary'])}")
    _print_result(console, result, label=label)
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(result.report, indent=2))
    if plot is not None:
        _write_plot([result.report], plot)
    return 0 if result.passed else 1


def compare(name: str, *, report_dir: Path, plot: Path | None, live: bool, install_method: str = "kustomize",
            prometheus: bool = False, systems: tuple[str, ...] = ("edgewatch", "stock")) -> int:
    """``playground compare``: SCENARIO on each of ``systems`` one after the other (``SYSTEMS``:
    edgewatch installed the ``install_method`` way, SuperEdge's edge-health, stock Kubernetes), the
    same scenario, timings and workload; one report per system in ``report_dir``
    (``<scenario><suffix>.json``, ``comparison.SUFFIXES``), the summaries side by side, and with
    ``plot`` one timeline of all the runs plus one per system (``<plot stem>-<system><suffix>``).
    ``prometheus``: the edgewatch run with a real Prometheus (see ``run_one``). Exit 1 if an
    expectation of an edgewatch or stock run failed (a SuperEdge run is measured, not judged)."""
    console = Console()
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown or not systems:
        console.print(f"[red]systems must be some of {', '.join(SYSTEMS)}, got {', '.join(systems) or 'none'}[/]")
        return 2
    try:
        scenario = load_scenario(name)
    except ScenarioError as exc:
        console.print(f"[red]{exc}[/]")
        return 2
    results: dict[str, RunResult] = {}
    binaries = binaries_with_progress(console)
    for system in systems:
        label = TITLES[system]
        console.rule(f"{scenario.name}: {label}")
        results[system] = run_scenario(scenario, baseline=system == "stock", system=system, console=console,
                                       live=live, binaries=binaries, install_method=install_method,
                                       prometheus=prometheus and system == "edgewatch")
        if _install_line(results[system]):
            console.print(_install_line(results[system]))
        _print_result(console, results[system], label=label)
    report_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for system, result in results.items():
        path = report_dir / f"{scenario.name}{SUFFIXES[system]}.json"
        path.write_text(json.dumps(result.report, indent=2))
        paths.append(str(path))
    reports = {system: result.report for system, result in results.items()}
    console.print(systems_table(reports))
    console.print(f"reports: {', '.join(paths)}")
    if plot is not None:
        _write_plot(list(reports.values()), plot)
        drawn = [str(plot)]
        if len(reports) > 1:
            for system, report in reports.items():
                one = plot.with_name(f"{plot.stem}-{system}{plot.suffix}")
                _write_plot([report], one)
                drawn.append(str(one))
        console.print(f"timelines: {', '.join(drawn)}")
    return 0 if all(r.passed for r in results.values()) else 1


def up(name: str, *, baseline: bool) -> int:
    """``playground up``: start the cluster of ``name`` and keep it until Ctrl-C / SIGTERM."""
    from edgewatch_lab.playground.cluster import PlaygroundCluster

    console = Console()
    scenario = load_scenario(name)
    with console.status("starting the control plane, nodes and agents"):
        cluster = PlaygroundCluster(scenario=scenario, system="stock" if baseline else "edgewatch",
                                    binaries=binaries_with_progress(console))
        cluster.__enter__()
    try:
        console.print(f"cluster up: export KUBECONFIG={cluster.admin_kubeconfig}")
        console.print("  kubectl get nodes; edgewatch status; Ctrl-C stops and removes everything")

        async def wait() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()

        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(wait())
    finally:
        with console.status("stopping everything"):
            cluster.stop()
            cluster.remove_workdir()
    return 0


def down() -> int:
    """``playground down``: remove leftovers of runs whose owner process is gone."""
    from edgewatch_lab.testing.controlplane import ControlPlane
    from edgewatch_lab.testing.netlab import NetLab
    from edgewatch_lab.testing.realnode import cleanup_stale as cleanup_real_nodes

    NetLab.cleanup_stale()
    real = cleanup_real_nodes()  # after the labs: a lab's real nodes go once its registry file is gone
    removed = ControlPlane.cleanup_stale()
    Console().print(f"removed stale labs, the real nodes of {len(real)} lab(s) and {len(removed)} stale control plane(s)")
    return 0
