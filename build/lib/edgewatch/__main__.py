"""``python -m edgewatch`` is the ``edgewatch`` console script."""

from edgewatch.cli import main

main()
