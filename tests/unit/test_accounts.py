import json
import os
import stat
from pathlib import Path

import pytest

from protocol.accounts import (
    import_keystore,
    list_accounts,
    load_signer,
    new_keystore,
    resolve_address,
)
from protocol.config import devnet_settings
from protocol.errors import AccountError, ConfigError

KEY = "0x" + "11" * 32


def test_dev_accounts_resolve_by_name_and_address() -> None:
    settings = devnet_settings()
    assert load_signer("dev3").address == settings.dev_addresses[3]
    assert load_signer(settings.dev_addresses[3]).name == "dev3"
    assert resolve_address("dev9") == settings.dev_addresses[9]


def test_keystore_is_encrypted_private_and_unlocks(crucible_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = import_keystore("alice", KEY, password="correct horse")
    path = crucible_home / "keystores" / "alice.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert KEY[2:] not in path.read_text(), "the key must be stored encrypted"
    monkeypatch.setenv("CRUCIBLE_PASSWORD", "correct horse")
    signer = load_signer("alice")
    assert signer.address == info.address == load_signer(info.address).address
    assert KEY[2:] not in repr(signer) and KEY[2:] not in str(signer)
    monkeypatch.setenv("CRUCIBLE_PASSWORD", "wrong")
    with pytest.raises(AccountError, match="wrong password"):
        load_signer("alice")


def test_new_keystore_and_listing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_PASSWORD", "pw")
    info = new_keystore("bob")
    names = {account.name: account for account in list_accounts()}
    assert names["bob"].address == info.address and names["bob"].kind == "keystore"
    assert names["dev0"].kind == "devnet"
    with pytest.raises(ConfigError, match="exists already"):
        new_keystore("bob")
    with pytest.raises(ConfigError, match="reserved"):
        new_keystore("dev1")


def test_environment_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_PRIVATE_KEY", KEY)
    assert load_signer("env").address == "0x19E7E376E7C213B7E7e7e46cc70A5dD086DAff2A"
    monkeypatch.setenv("CRUCIBLE_PRIVATE_KEY", "0x1234")
    with pytest.raises(AccountError, match="not a valid private key"):
        load_signer("env")


def test_unknown_accounts_and_bad_keys_refused(crucible_home: Path) -> None:
    with pytest.raises(AccountError, match="unknown account"):
        load_signer("nobody")
    with pytest.raises(ConfigError, match="malformed private key"):
        import_keystore("x", "0x12", password="pw")
    with pytest.raises(ConfigError, match="malformed account name"):
        import_keystore("../evil", KEY, password="pw")
    assert not (crucible_home / "keystores" / "x.json").exists()
    assert json.dumps([a.__dict__ for a in list_accounts()]).count("PRIVATE") == 0
