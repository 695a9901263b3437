"""The lab's polling helpers (edgewatch_lab.testing.smoke): a request timeout while the one machine
is busy (CI runs two scenarios at once) is retried until the deadline, and a create whose response
was lost counts as done when the retry finds the object (409)."""

from __future__ import annotations

import httpx2 as httpx
import pytest
from lightkube import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Service

from edgewatch_lab.testing.smoke import create_until_done, wait_for


def _api_error(code: int) -> ApiError:
    request = httpx.Request("POST", "https://apiserver.invalid/api/v1/namespaces/x/services")
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": f"code {code}"}
    return ApiError(request=request, response=httpx.Response(code, json=body, request=request))


class _FlakyCreates:
    """Answers each create with the next outcome from ``outcomes`` (an exception or None)."""

    def __init__(self, outcomes: list[BaseException | None]) -> None:
        self.outcomes = outcomes
        self.calls = 0

    async def create(self, obj: object) -> object:
        outcome = self.outcomes[self.calls]
        self.calls += 1
        if outcome is not None:
            raise outcome
        return obj


def _service() -> Service:
    return Service(metadata=ObjectMeta(name="sample", namespace="x"))


async def test_wait_for_polls_again_after_a_transport_timeout() -> None:
    answers = iter([httpx.ReadTimeout("slow"), False, "done"])

    async def predicate() -> object:
        answer = next(answers)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    assert await wait_for(predicate, timeout_s=5, interval_s=0, what="x") == "done"


async def test_wait_for_reraises_the_transport_error_at_the_deadline() -> None:
    async def predicate() -> object:
        raise httpx.ConnectError("apiserver down")

    with pytest.raises(httpx.ConnectError):
        await wait_for(predicate, timeout_s=0, interval_s=0, what="x")


async def test_wait_for_still_times_out_on_a_false_predicate() -> None:
    async def predicate() -> bool:
        return False

    with pytest.raises(TimeoutError, match="waiting for the thing"):
        await wait_for(predicate, timeout_s=0, interval_s=0, what="the thing")


async def test_a_timed_out_wait_says_what_explain_found() -> None:
    async def predicate() -> bool:
        return False

    async def explain() -> str:
        return "3 pods Pending"

    with pytest.raises(TimeoutError, match="waiting for the thing: 3 pods Pending"):
        await wait_for(predicate, timeout_s=0, interval_s=0, what="the thing", explain=explain)


async def test_a_failing_explain_is_named_and_never_masks_the_timeout() -> None:
    async def predicate() -> bool:
        return False

    async def explain() -> str:
        raise httpx.ConnectError("apiserver down")

    with pytest.raises(TimeoutError, match=r"waiting for the thing: \(no account: ConnectError: apiserver down\)"):
        await wait_for(predicate, timeout_s=0, interval_s=0, what="the thing", explain=explain)


async def test_a_lost_create_response_then_409_counts_as_created() -> None:
    client = _FlakyCreates([httpx.ReadTimeout("lost response"), _api_error(409)])
    assert await create_until_done(client, _service(), timeout_s=30)  # type: ignore[arg-type]
    assert client.calls == 2


async def test_create_refusals_other_than_409_are_raised_at_once() -> None:
    client = _FlakyCreates([_api_error(403)])
    with pytest.raises(ApiError):
        await create_until_done(client, _service(), timeout_s=30)  # type: ignore[arg-type]
    assert client.calls == 1
