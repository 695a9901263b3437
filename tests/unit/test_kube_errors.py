"""The one classification of API errors (edgewatch.kube.errors)."""

from __future__ import annotations

import httpx2 as httpx
import pytest
from lightkube import ApiError
from lightkube.models.meta_v1 import Status

from edgewatch.kube.errors import (
    API_ERRORS,
    is_already_exists,
    is_conflict,
    is_gone,
    is_not_found,
    is_too_many_requests,
    status_code,
)


def _api_error(code: int, reason: str | None = None) -> ApiError:
    """An ApiError as lightkube raises it for an apiserver answer (the Status in the body)."""
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": "x"}
    if reason is not None:
        body["reason"] = reason
    response = httpx.Response(code, json=body, request=httpx.Request("GET", "https://example.invalid/api"))
    return ApiError(response=response)


@pytest.mark.parametrize(("exc", "retried", "code"), [
    (_api_error(409), True, 409),
    (_api_error(404), True, 404),
    (httpx.ConnectError("refused"), True, None),
    (httpx.ReadTimeout("slow"), True, None),
    (ConnectionResetError(), True, None),
    (TimeoutError(), True, None),          # an asyncio.timeout bound ran out
    (ValueError("a bug"), False, None),
    (KeyError("a bug"), False, None),
])
def test_what_a_caller_retries_and_the_status_it_reads(exc: BaseException, retried: bool, code: int | None) -> None:
    assert isinstance(exc, API_ERRORS) is retried
    assert status_code(exc) == code


_PREDICATES = {
    "not_found": is_not_found, "conflict": is_conflict, "already_exists": is_already_exists, "gone": is_gone,
    "too_many_requests": is_too_many_requests,
}


@pytest.mark.parametrize(("exc", "true_for"), [
    (_api_error(404, "NotFound"), {"not_found"}),
    (_api_error(409, "Conflict"), {"conflict"}),                          # a stale resourceVersion
    (_api_error(409, "AlreadyExists"), {"conflict", "already_exists"}),   # a create of a name that exists
    (_api_error(409), {"conflict"}),                                      # no reason given: a conflict
    (_api_error(410, "Expired"), {"gone"}),
    (_api_error(410, "Gone"), {"gone"}),
    (_api_error(429, "TooManyRequests"), {"too_many_requests"}),
    (_api_error(403, "Forbidden"), set()),
    (_api_error(422, "Invalid"), set()),
    (_api_error(500, "InternalError"), set()),
    # the way tests build one without a response (tests/unit/_fakekube.py)
    (ApiError(status=Status(code=404, message="x")), {"not_found"}),
    (ApiError(status=Status(code=409, reason="AlreadyExists", message="x")), {"conflict", "already_exists"}),
    (ApiError(status=Status(message="no code")), set()),
])
def test_each_predicate_reads_the_status_code_and_reason(exc: ApiError, true_for: set[str]) -> None:
    assert {name for name, predicate in _PREDICATES.items() if predicate(exc)} == true_for


@pytest.mark.parametrize("exc", [
    httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), ConnectionResetError(), TimeoutError(),
    ValueError("404"), KeyError(409), RuntimeError("HTTP 429"),
    # an HTTP error status that is not an apiserver Status (httpx's own, e.g. a raw request's raise_for_status)
    httpx.HTTPStatusError("Not Found", request=httpx.Request("GET", "https://example.invalid/"),
                          response=httpx.Response(404)),
])
def test_no_predicate_holds_for_anything_but_an_api_error(exc: BaseException) -> None:
    assert not any(predicate(exc) for predicate in _PREDICATES.values())
