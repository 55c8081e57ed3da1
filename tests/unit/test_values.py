from decimal import Decimal

import pytest

from protocol.errors import ConfigError
from protocol.values import checked_address, checked_cid, format_tokens, from_wei, to_wei


def test_addresses_are_checksummed_and_garbage_refused() -> None:
    assert checked_address("0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266") == "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
    for bad in ("0x1234", "f39fd6e51aad88f6f4ce6ab8827279cfffb9226", "hello", ""):
        with pytest.raises(ConfigError, match="malformed address"):
            checked_address(bad)


def test_cids_v0_and_v1_accepted_garbage_refused() -> None:
    assert checked_cid("QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG")
    assert checked_cid("bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy")
    for bad in ("bafy-model", "Qm123", "", "not a cid"):
        with pytest.raises(ConfigError, match="malformed CID"):
            checked_cid(bad)


def test_token_amounts_round_trip_exactly() -> None:
    assert to_wei("12.5", 18) == 12_500_000_000_000_000_000
    assert to_wei("0.000000000000000001", 18) == 1
    assert from_wei(12_500_000_000_000_000_000, 18) == Decimal("12.5")
    assert str(from_wei(1000 * 10**18, 18)) == "1000"
    assert format_tokens(1_234_500_000_000_000_000_000, 18, "CRU") == "1,234.5 CRU"


def test_amounts_for_people_have_a_few_decimals_and_say_when_rounded() -> None:
    assert format_tokens(442_342_931_937_172_774_870, 18, "CRU") == "≈442.3429 CRU"
    assert format_tokens(2_999_990_000_000_000_000, 18, "CRU") == "≈3 CRU"
    assert format_tokens(5 * 10**12, 18, "CRU") == "<0.0001 CRU"
    assert format_tokens(0, 18, "CRU") == "0 CRU"
    assert format_tokens(9_000 * 10**18, 18) == "9,000"


@pytest.mark.parametrize("bad", ["-1", "abc", "1e400000", "NaN", "0.0000000000000000001"])
def test_bad_amounts_refused(bad: str) -> None:
    with pytest.raises(ConfigError):
        to_wei(bad, 18)


def test_amounts_past_28_digits_are_exact_and_never_a_traceback() -> None:
    """Decimal's default context keeps 28 digits. Broken version: drop `localcontext(EXACT)` in protocol/values.py
    → `to_wei` rounds the 48-digit amount and `format_tokens(10**58)` raises decimal.InvalidOperation (the
    48-line traceback of `stake deposit 1e40`)."""
    assert (
        to_wei("123456789012345678901234567890.123456789012345678", 18)
        == 123456789012345678901234567890123456789012345678
    )
    assert format_tokens(10**58, 18, "CRU") == "10,000,000,000,000,000,000,000,000,000,000,000,000,000 CRU"
    assert format_tokens(2**256 - 1, 18, "CRU").startswith("≈115,792,089,237,316,195,423,570,985,008,687,907,853,269")
    assert from_wei(2**256 - 1, 0) == 2**256 - 1
    with pytest.raises(ConfigError, match="too large"):
        to_wei("2e59", 18)
