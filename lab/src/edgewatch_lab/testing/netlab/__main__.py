"""``python -m edgewatch_lab.testing.netlab``: runs :func:`edgewatch_lab.testing.netlab.cli.main`
(see there; the one subcommand is ``cleanup``)."""

from __future__ import annotations

import sys

from edgewatch_lab.testing.netlab.cli import main

sys.exit(main())
