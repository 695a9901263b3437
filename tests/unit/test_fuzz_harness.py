"""The fuzz harness (hack/fuzz.py, ``make fuzz``) runs every target; a short run here keeps it
working as the parsers change (the long run's figures are in docs/security.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def test_every_fuzz_target_runs_and_counts_its_inputs(capsys) -> None:  # type: ignore[no-untyped-def]
    path = Path(__file__).resolve().parents[2] / "hack" / "fuzz.py"
    spec = importlib.util.spec_from_file_location("edgewatch_fuzz", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    total = module.run(40)
    assert total == 40 * len(module.TARGETS)
    out = capsys.readouterr().out
    for parser in ("decode_envelope", "decode_evidence", "decode_roster", "decode_value", "parse_heartbeat",
                   "BeaconHolder.trust"):  # the parsers fed by the network or the API stay covered
        assert parser in out, parser
