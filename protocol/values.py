"""Checks and conversions for what users type: addresses, CIDs, token amounts."""

from __future__ import annotations

from decimal import Context, Decimal, InvalidOperation, localcontext

from eth_utils import is_address, to_checksum_address
from multiformats import CID

from protocol.errors import ConfigError

UINT256_MAX = 2**256 - 1
# Token arithmetic with enough digits for any uint256 (78) and its decimals: the default context's 28 digits
# would round a large amount silently, or fail to quantize it.
EXACT = Context(prec=160)


def checked_address(text: str, what: str = "address") -> str:
    """Returns the checksummed form of an EVM address, or raises ConfigError naming it."""
    if not isinstance(text, str) or not is_address(text):
        raise ConfigError(f"malformed {what}: {text!r} is not a 20-byte hex address")
    return to_checksum_address(text)


def is_cid(text: str) -> bool:
    """Whether `text` parses as a CIDv0 or CIDv1."""
    try:
        CID.decode(text)
    except Exception:
        return False
    return True


def checked_cid(text: str, what: str = "CID") -> str:
    """Returns the CID unchanged when it parses as CIDv0 or CIDv1, else raises ConfigError."""
    if not is_cid(text):
        raise ConfigError(f"malformed {what}: {text!r} is not a CID")
    return text


def to_wei(amount: str | int | Decimal, decimals: int, what: str = "amount") -> int:
    """Returns whole tokens (`"12.5"`) as integer base units, refusing negative or too-precise values."""
    try:
        value = Decimal(str(amount))
    except InvalidOperation:
        raise ConfigError(f"malformed {what}: {amount!r} is not a number") from None
    if not value.is_finite() or value < 0:
        raise ConfigError(f"{what} must be a non-negative number, got {amount!r}")
    if value.adjusted() > 78:
        raise ConfigError(f"{what} {amount} is too large for a token amount")
    with localcontext(EXACT):
        scaled = value.scaleb(decimals)
        if scaled > UINT256_MAX:
            raise ConfigError(f"{what} {amount} is too large for a token amount")
        if scaled != scaled.to_integral_value():
            raise ConfigError(f"{what} {amount} has more than {decimals} decimals")
        return int(scaled)


def from_wei(amount_wei: int, decimals: int) -> Decimal:
    """Returns base units as whole tokens, exactly, without an exponent (`1000`, `12.5`)."""
    with localcontext(EXACT):
        value = Decimal(amount_wei).scaleb(-decimals).normalize()
        return value.quantize(Decimal(1)) if value == value.to_integral_value() else value


SHOWN_DECIMALS = 4


def format_tokens(amount_wei: int, decimals: int, symbol: str = "") -> str:
    """Returns an amount for people: thousands separators, at most four decimals, the symbol (`1,234.5 CRU`).
    A rounded amount says so (`≈442.3429 CRU`, `<0.0001 CRU`); exact base units belong in JSON `*_wei`."""
    value = from_wei(amount_wei, decimals)
    with localcontext(EXACT):
        shown = value.quantize(Decimal(1).scaleb(-SHOWN_DECIMALS))
    prefix = ""
    if shown != value:
        prefix = "≈"
        if shown == 0:
            prefix, shown = "<", Decimal(1).scaleb(-SHOWN_DECIMALS)
    text = f"{shown:,f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{prefix}{text} {symbol}".strip()
