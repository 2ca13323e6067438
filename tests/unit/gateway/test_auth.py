"""API keys: `authorization: Bearer <key>` metadata, every rejection branch."""
from __future__ import annotations

import pytest

from gateway.auth import check_api_key, holds_key
from runtime.errors import Unauthenticated

KEYS = ("alpha-key", "beta-key")


def test_no_keys_configured_lets_everything_through() -> None:
    check_api_key([], ())
    check_api_key([("authorization", "Bearer anything")], ())


@pytest.mark.parametrize("metadata", [
    [("authorization", "Bearer alpha-key")],
    [("authorization", "Bearer beta-key")],
    [("Authorization", "bearer beta-key")],  # header name and scheme are case-insensitive
    [("x-request-id", "1"), ("authorization", "BEARER alpha-key")],
    [("authorization", b"Bearer alpha-key")],  # binary metadata values
])
def test_a_configured_key_passes(metadata: list[tuple[str, str | bytes]]) -> None:
    check_api_key(metadata, KEYS)


@pytest.mark.parametrize(("metadata", "text"), [
    ([], "missing `authorization: Bearer <key>`"),
    ([("x-api-key", "alpha-key")], "missing"),
    ([("authorization", "alpha-key")], "malformed"),
    ([("authorization", "Basic alpha-key")], "malformed"),
    ([("authorization", "Bearer ")], "malformed"),
    ([("authorization", "Bearer")], "malformed"),
    ([("authorization", "Bearer gamma-key")], "not recognised"),
    ([("authorization", "Bearer alpha-ke")], "not recognised"),
    ([("authorization", "Bearer alpha-key ")], "not recognised"),
    ([("authorization", "Bearer ALPHA-KEY")], "not recognised"),  # keys themselves are case-sensitive
    ([("authorization", "Bearer ключ")], "not recognised"),
])
def test_rejections(metadata: list[tuple[str, str | bytes]], text: str) -> None:
    with pytest.raises(Unauthenticated, match=text) as info:
        check_api_key(metadata, KEYS)
    assert info.value.grpc_code_name == "UNAUTHENTICATED"


def test_only_the_first_authorization_header_counts() -> None:
    with pytest.raises(Unauthenticated):
        check_api_key([("authorization", "Bearer wrong"), ("authorization", "Bearer alpha-key")], KEYS)


@pytest.mark.parametrize(("metadata", "holds"), [
    ([("authorization", "Bearer beta-key")], True),
    ([("authorization", b"bearer alpha-key")], True),
    ([("authorization", "Bearer gamma-key")], False),
    ([("authorization", "Basic alpha-key")], False),  # another scheme never matches
    ([("authorization", "Bearer ")], False),
    ([], False),
])
def test_holds_key_says_whether_the_bearer_key_is_listed(metadata: list[tuple[str, str | bytes]],
                                                         holds: bool) -> None:
    assert holds_key(metadata, KEYS) is holds
    assert holds_key(metadata, ()) is False
