"""Accounts: Anvil's named dev accounts, encrypted keystores and a key from the environment.

A `Signer` holds a key only to sign; its repr shows the address alone, and nothing here logs
or returns a key.
"""

from __future__ import annotations

import getpass
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eth_account import Account
from eth_account.signers.local import LocalAccount

from protocol.config import crucible_home, devnet_settings
from protocol.errors import AccountError, ConfigError
from protocol.values import checked_address

PRIVATE_KEY_ENV = "CRUCIBLE_PRIVATE_KEY"
PASSWORD_ENV = "CRUCIBLE_PASSWORD"


@dataclass(frozen=True)
class Signer:
    """An address that can sign transactions."""

    address: str
    name: str
    _account: LocalAccount = field(repr=False, compare=False)

    def sign_transaction(self, transaction: dict[str, Any]) -> bytes:
        """Returns the raw signed transaction."""
        return bytes(self._account.sign_transaction(transaction).raw_transaction)

    def sign_message(self, message: Any) -> str:
        """Returns the 0x-hex EIP-191 signature of an encoded message (`encode_defunct`)."""
        return "0x" + bytes(self._account.sign_message(message).signature).hex()


@dataclass(frozen=True)
class AccountInfo:
    """One entry of `crucible account list`."""

    name: str
    address: str
    kind: str  # "devnet", "keystore" or "environment"


def keystore_dir() -> Path:
    """Returns the folder of encrypted keystores."""
    return crucible_home() / "keystores"


def _keystore_path(name: str) -> Path:
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise ConfigError(f"malformed account name {name!r}: use letters, digits, '-', '_' or '.'")
    return keystore_dir() / f"{name}.json"


def dev_account_index(name: str) -> int | None:
    """Returns N for `devN` (0-9), else None."""
    if name.startswith("dev") and name[3:].isdigit() and 0 <= int(name[3:]) < 10:
        return int(name[3:])
    return None


def _password(confirm: bool = False) -> str:
    if PASSWORD_ENV in os.environ:
        return os.environ[PASSWORD_ENV]
    if not sys.stdin.isatty():
        # getpass would warn that it cannot hide the input, then read the password from the pipe.
        raise AccountError(f"a keystore password is needed: set {PASSWORD_ENV} or run in a terminal")
    try:
        password = getpass.getpass("Keystore password: ")
        if confirm and getpass.getpass("Repeat password: ") != password:
            raise AccountError("the passwords differ")
    except EOFError:
        raise AccountError(f"a keystore password is needed: set {PASSWORD_ENV} or run in a terminal") from None
    return password


def new_keystore(name: str, password: str | None = None) -> AccountInfo:
    """Creates a fresh key, stores it encrypted under `name` and returns its address."""
    return _store(name, Account.create(), password)


def import_keystore(name: str, private_key: str, password: str | None = None) -> AccountInfo:
    """Stores an existing private key encrypted under `name`."""
    try:
        account = Account.from_key(private_key.strip())
    except Exception:
        raise ConfigError("malformed private key: expected 32 bytes of hex") from None
    return _store(name, account, password)


def _store(name: str, account: LocalAccount, password: str | None) -> AccountInfo:
    path = _keystore_path(name)
    if dev_account_index(name) is not None or name == "env":
        raise ConfigError(f"account name {name!r} is reserved")
    if path.exists():
        raise ConfigError(f"an account named {name!r} exists already ({path})")
    encrypted = Account.encrypt(account.key, password if password is not None else _password(confirm=True))
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    # The keystore is readable by its owner only, and appears whole or not at all.
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(encrypted, handle)
    temporary.replace(path)
    return AccountInfo(name=name, address=account.address, kind="keystore")


def list_accounts() -> list[AccountInfo]:
    """Returns the devnet accounts, the keystores and the environment's key, if set."""
    devnet = devnet_settings()
    accounts = [AccountInfo(f"dev{i}", address, "devnet") for i, address in enumerate(devnet.dev_addresses)]
    if keystore_dir().exists():
        for path in sorted(keystore_dir().glob("*.json")):
            address = json.loads(path.read_text()).get("address", "")
            accounts.append(AccountInfo(path.stem, checked_address("0x" + address.removeprefix("0x")), "keystore"))
    if os.environ.get(PRIVATE_KEY_ENV):
        accounts.append(AccountInfo("env", load_signer("env").address, "environment"))
    return accounts


def resolve_address(name_or_address: str) -> str:
    """Returns the address an account name or address stands for, without unlocking anything."""
    if name_or_address.startswith("0x"):
        return checked_address(name_or_address)
    for account in list_accounts():
        if account.name == name_or_address:
            return account.address
    raise AccountError(f"unknown account {name_or_address!r}: see `crucible account list`")


def load_signer(name_or_address: str) -> Signer:
    """Returns a signer for `devN`, `env` (CRUCIBLE_PRIVATE_KEY), a keystore name or its address."""
    index = dev_account_index(name_or_address)
    devnet = devnet_settings()
    if name_or_address.startswith("0x") and checked_address(name_or_address) in devnet.dev_addresses:
        index = devnet.dev_addresses.index(checked_address(name_or_address))
    if index is not None:
        account = Account.from_key(devnet.dev_private_keys[index])
        return Signer(account.address, f"dev{index}", account)
    if name_or_address == "env":
        key = os.environ.get(PRIVATE_KEY_ENV)
        if not key:
            raise AccountError(f"account 'env' needs {PRIVATE_KEY_ENV} to be set")
        try:
            account = Account.from_key(key.strip())
        except Exception:
            raise AccountError(f"{PRIVATE_KEY_ENV} is not a valid private key") from None
        return Signer(account.address, "env", account)
    path = _find_keystore(name_or_address)
    try:
        decrypted = Account.decrypt(json.loads(path.read_text()), _password())
    except ValueError:
        raise AccountError(f"wrong password for account {path.stem!r}") from None
    account = Account.from_key(decrypted)
    return Signer(account.address, path.stem, account)


def _find_keystore(name_or_address: str) -> Path:
    if name_or_address.startswith("0x"):
        address = checked_address(name_or_address)
        for account in list_accounts():
            if account.kind == "keystore" and account.address == address:
                return _keystore_path(account.name)
        raise AccountError(f"no keystore holds {address}: see `crucible account list`")
    path = _keystore_path(name_or_address)
    if not path.exists():
        raise AccountError(f"unknown account {name_or_address!r}: see `crucible account list`")
    return path
