"""The signed-upload message: what an uploader signs and the headers that carry it. The relay checks
it, the fetching client's `upload` makes it; both import it from here."""

from __future__ import annotations

# Uploads signed to expire further ahead than this are refused (a signature is a short-lived permit).
MAX_EXPIRY_AHEAD_S = 3600
UPLOAD_HEADERS = ("x-crucible-address", "x-crucible-expiry", "x-crucible-signature")


def upload_message(cid: str, size: int, expiry: int) -> str:
    """The text an uploader signs (EIP-191) for a relay to accept `size` bytes of `cid` until `expiry`."""
    return f"crucible-upload:{cid}:{size}:{expiry}"
