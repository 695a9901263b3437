"""The controller's copy of watched objects (edgewatch.controller.seen): never an object older than
our own write, never a guess from ordering resourceVersions.

Property: for any interleaving of watch events (delivered in resourceVersion order, as the
apiserver does) and our writes (whose versions the watch delivers later, in order), whatever
``get`` returns is never older than the newest version our own writes have returned so far.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from edgewatch.controller.seen import SeenObjects


@dataclass
class Meta:
    resourceVersion: str | None


@dataclass
class Obj:
    metadata: Meta


def obj(version: int) -> Obj:
    return Obj(metadata=Meta(resourceVersion=str(version)))


def test_our_write_hides_older_versions_until_the_watch_delivers_it() -> None:
    seen: SeenObjects[Obj] = SeenObjects()
    seen.seen("a", obj(1))
    assert seen.get("a") == obj(1)
    seen.wrote("a", obj(3))
    assert seen.get("a") is None  # read the API meanwhile
    seen.seen("a", obj(2))  # in flight before our write
    assert seen.get("a") is None
    seen.seen("a", obj(3))
    assert seen.get("a") == obj(3)
    seen.seen("a", obj(4))  # somebody else's later write
    assert seen.get("a") == obj(4)


def test_delete_forget_and_restart() -> None:
    seen: SeenObjects[Obj] = SeenObjects()
    seen.seen("a", obj(1))
    seen.seen("a", None)
    assert seen.get("a") is None and len(seen) == 0
    seen.seen("b", obj(5))
    seen.forget("b")  # a 409 said it was stale
    assert seen.get("b") is None
    seen.wrote("b", obj(7))
    seen.restart()  # a new watch starts with every object as it is now
    seen.seen("b", obj(8))
    assert seen.get("b") == obj(8)
    seen.wrote("c", Obj(metadata=Meta(resourceVersion=None)))  # no version: nothing to wait for
    seen.seen("c", obj(9))
    assert seen.get("c") == obj(9)


@given(st.lists(st.sampled_from(["external", "ours", "deliver", "respond"]), max_size=60))
def test_never_older_than_our_newest_write(steps: list[str]) -> None:
    seen: SeenObjects[Obj] = SeenObjects()
    version = 0
    pending: list[int] = []  # versions written, not yet delivered by the watch (in order)
    unanswered: list[int] = []  # our writes whose response has not arrived yet
    newest_ours = 0
    for step in steps:
        if step == "external":
            version += 1
            pending.append(version)
        elif step == "ours":
            version += 1
            pending.append(version)
            unanswered.append(version)
        elif step == "respond" and unanswered:
            answered = unanswered.pop(0)
            seen.wrote("a", obj(answered))
            newest_ours = max(newest_ours, answered)
        elif step == "deliver" and pending:
            seen.seen("a", obj(pending.pop(0)))
        got = seen.get("a")
        if got is not None:
            assert int(got.metadata.resourceVersion or 0) >= newest_ours


def test_the_watch_may_deliver_our_write_before_its_response() -> None:
    seen: SeenObjects[Obj] = SeenObjects()
    seen.seen("a", obj(1))
    seen.seen("a", obj(2))  # our write, delivered first
    seen.seen("a", obj(3))  # and somebody else's after it
    seen.wrote("a", obj(2))  # the response arrives now
    assert seen.get("a") == obj(3)
    seen.seen("a", obj(4))
    assert seen.get("a") == obj(4)  # never stuck waiting for a version already delivered
