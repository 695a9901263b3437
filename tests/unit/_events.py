"""The agent's parts' events recorded in lists (``edgewatch.agent.ports``: what the agent's metrics
count), for tests that check what a part tells."""

from __future__ import annotations


class Recorded:
    """Implements every part's events protocol; each list holds the arguments in order."""

    def __init__(self) -> None:
        self.watch_events: list[str] = []
        self.config_refusals: list[str] = []
        self.save_failures: list[str] = []
        self.key_refusals: list[str] = []
        self.evidence_writes: list[str] = []
        self.link_changes: list[bool] = []

    def watch_event_received(self, resource: str) -> None:
        self.watch_events.append(resource)

    def config_refused(self, reason: str) -> None:
        self.config_refusals.append(reason)

    def state_not_saved(self, reason: str) -> None:
        self.save_failures.append(reason)

    def key_record_refused(self, reason: str) -> None:
        self.key_refusals.append(reason)

    def evidence_written(self, result: str) -> None:
        self.evidence_writes.append(result)

    def cloud_link_changed(self, up: bool) -> None:
        self.link_changes.append(up)
