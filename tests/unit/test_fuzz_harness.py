"""The fuzz harness (hack/fuzz.py, ``make fuzz``) runs every target; a short run here keeps it
working as the parsers change (the long run's figures are in docs/security.md)."""

from __future__ import annotations

from _scripts import load_script


def test_every_fuzz_target_runs_and_counts_its_inputs(capsys) -> None:  # type: ignore[no-untyped-def]
    module = load_script("hack/fuzz.py", name="edgewatch_fuzz")
    total = module.run(40)
    assert total == 40 * len(module.TARGETS)
    out = capsys.readouterr().out
    for parser in ("decode_envelope", "decode_evidence", "decode_roster", "decode_value", "parse_heartbeat",
                   "BeaconHolder.trust"):  # the parsers fed by the network or the API stay covered
        assert parser in out, parser
