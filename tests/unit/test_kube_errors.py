"""The one classification of API errors (edgewatch.kube.errors)."""

from __future__ import annotations

import httpx2 as httpx
import pytest
from lightkube import ApiError

from edgewatch.kube.errors import API_ERRORS, status_code


def _api_error(code: int) -> ApiError:
    response = httpx.Response(code, json={"kind": "Status", "apiVersion": "v1", "code": code, "message": "x"},
                              request=httpx.Request("GET", "https://example.invalid/api"))
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
