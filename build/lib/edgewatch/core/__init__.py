"""edgewatch's functional core: pure, clock-free code for the edge agent.

Failure detection (:mod:`.detector`), the vote rule (:mod:`.quorum`), node
grouping (:mod:`.grouping`), message signing (:mod:`.signing`) and the wire
format (:mod:`.wire`). Nothing in this package does I/O (except
:func:`.signing.load_keyring`, a thin file reader) or reads a clock: time is
always passed in as ``now`` (seconds).
"""
