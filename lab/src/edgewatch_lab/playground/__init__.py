"""The playground (``edgewatch playground run SCENARIO``): a real local control plane, simulated edge
nodes in network namespaces running the real agent, the controller and a sample workload; a scenario's
timed faults played against them; what the real apiserver showed, recorded and reported side by side
with the same scenario on stock Kubernetes (``--baseline``).

Pure parts (no I/O beyond reading a scenario file and writing a plot):

* :mod:`edgewatch_lab.playground.scenario`: the scenario format, its validation and the built-in scenarios;
* :mod:`edgewatch_lab.playground.report`: what the runner records, the JSON report, the summary figures,
  the scenario's expectations checked against a report, and the side-by-side summary table;
* :mod:`edgewatch_lab.playground.plot`: one timeline panel per run (matplotlib, optional dependency).
"""
