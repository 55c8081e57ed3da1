"""Choosing a store from one line of text: a local folder (the default: the state folder's `store/`),
relay URLs separated by commas (fetched into the local store, uploads signed), or `kubo:` and a Kubo
node's RPC API URL (a real IPFS node: adds pinned, reads verified against their CIDs)."""

from __future__ import annotations

from pathlib import Path

from protocol.accounts import Signer
from protocol.artifacts.fetch import RelayStore
from protocol.artifacts.kubo import KuboStore
from protocol.artifacts.store import LocalStore, Store
from protocol.config import crucible_home
from protocol.errors import ConfigError


def default_store() -> LocalStore:
    """The state folder's local store."""
    return LocalStore(crucible_home() / "store")


def relay_urls(text: str) -> list[str] | None:
    """Relay URLs of a comma-separated list, or None when `text` names a local store folder or (`kubo:`)
    an IPFS node."""
    if text.startswith("kubo:"):
        return None
    parts = [part.strip() for part in text.split(",") if part.strip()]
    for part in parts:
        scheme, separator, _ = part.partition("://")
        if separator and scheme not in ("http", "https"):
            raise ConfigError(f"{part!r} is not a relay URL: relays are http:// or https://")
    if parts and all(part.startswith(("http://", "https://")) for part in parts):
        return parts
    if any(part.startswith(("http://", "https://")) for part in parts) or len(parts) != 1:
        raise ConfigError(f"{text!r} is neither a local store folder nor a comma-separated list of relay URLs")
    return None


def open_store(text: str | None, signer: Signer | None = None) -> Store:
    """The store `text` names (None: the default local store)."""
    if text is None:
        return default_store()
    if text.startswith("kubo:"):
        api = text.removeprefix("kubo:")
        if not api.startswith(("http://", "https://")):
            raise ConfigError(f"{text!r}: kubo: takes the node's RPC API URL, e.g. kubo:http://127.0.0.1:5001")
        return KuboStore(api)
    relays = relay_urls(text)
    if relays is None:
        return LocalStore(Path(text))
    return RelayStore(relays, default_store(), signer)


def describe_store(store: Store) -> str:
    """One line naming where a store keeps its bytes, for a role's `started` event."""
    if isinstance(store, KuboStore):
        return f"kubo:{store.api_url}"
    if isinstance(store, RelayStore):
        return ",".join(store.urls)
    if isinstance(store, LocalStore):
        return str(store.root)
    return type(store).__name__
