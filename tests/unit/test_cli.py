"""The command line: help for every command, invalid agent settings refused with exit code 2."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgewatch.cli import main


@pytest.mark.parametrize("args", [[], ["agent"], ["controller"], ["status"], ["playground"],
                                  ["playground", "run"], ["playground", "compare"], ["playground", "up"]])
def test_every_command_has_help(args: list[str]) -> None:
    result = CliRunner().invoke(main, [*args, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def _key(tmp_path: Path) -> Path:
    key = tmp_path / "keys"
    key.write_text("k1:" + base64.b64encode(os.urandom(32)).decode() + "\n")
    return key


@pytest.mark.parametrize("extra", [
    ["--node", "Not_A_Node"],                                  # not a DNS-1123 name
    ["--node", "n1", "--vote-ttl", "1"],                       # vote TTL below 3 exchange periods
    ["--node", "n1", "--probe-timeout", "5"],                  # a probe longer than two periods
    ["--node", "n1", "--cloud-down-after", "0"],
    ["--node", "n1", "--peer-max-connections-per-source", "0"],  # the peer port's bounds (agent.peerserver)
    ["--node", "n1", "--peer-request-timeout", "0"],
])
def test_agent_refuses_invalid_settings(tmp_path: Path, extra: list[str]) -> None:
    result = CliRunner().invoke(main, ["agent", "--key-file", str(_key(tmp_path)), "--log-format", "text", *extra])
    assert result.exit_code == 2, result.output


def test_agent_coordinator_tls_flags_go_together(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    result = CliRunner().invoke(main, ["agent", "--node", "n1", "--key-file", str(_key(tmp_path)),
                                       "--coordinator", "https://127.0.0.1:2379", "--coordinator-ca", str(ca)])
    assert result.exit_code == 2


def test_build_progress_lines_are_parsed_into_a_bar() -> None:
    from edgewatch_lab.playground.cli import BUILD_PROGRESS

    m = BUILD_PROGRESS.search("[edgewatch build] Kubernetes v1.36.3: 887/2618 packages compiled, 146 s elapsed")
    assert m and (m["label"], m["n"], m["total"]) == ("Kubernetes v1.36.3", "887", "2618")
    assert BUILD_PROGRESS.search("[edgewatch build] building etcd v3.6.16 (581 packages; ...)") is None
