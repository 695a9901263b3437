"""The network lab's maintenance command line: ``python -m edgewatch_lab.testing.netlab cleanup``
(the Makefile's ``clean-lab`` target) removes the labs whose owner process is gone and the lab
objects that no registry file claims.

Limits: one subcommand; needs root; prints the removed lab ids on stdout, failures on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from edgewatch_lab.testing.netlab.commands import NetLabError
from edgewatch_lab.testing.netlab.lab import NetLab


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m edgewatch_lab.testing.netlab``.

    Subcommands:
        cleanup: run :meth:`NetLab.cleanup_stale` and print the removed lab ids.

    Returns:
        Process exit status (0 success, 1 failure).
    """
    parser = argparse.ArgumentParser(
        prog="python -m edgewatch_lab.testing.netlab",
        description="Maintenance for edgewatch network labs.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what is being done")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("cleanup", help="remove labs whose owner process is gone and unregistered lab objects")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if args.command == "cleanup":
        if os.geteuid() != 0:
            print("cleanup needs root", file=sys.stderr)
            return 1
        try:
            removed = NetLab.cleanup_stale()
        except (NetLabError, OSError) as exc:
            print(f"cleanup failed: {exc}", file=sys.stderr)
            return 1
        print(f"removed {len(removed)} stale lab(s){': ' + ' '.join(removed) if removed else ''}")
    return 0
