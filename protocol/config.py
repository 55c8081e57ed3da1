"""Where things live and the devnet's settings, loaded once from `anvil.env` and the environment."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from protocol.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent
ANVIL_ENV = REPO_ROOT / "anvil.env"
DEPLOYMENTS_DIR = REPO_ROOT / "deployments"
CONTRACTS_OUT = REPO_ROOT / "contracts" / "out"
DEV_ACCOUNT_COUNT = 10


@dataclass(frozen=True)
class DevnetSettings:
    """The local devnet as `anvil.env` describes it."""

    port: int
    rpc_url: str
    chain_id: int
    mnemonic: str
    block_time_s: int  # seconds between blocks; 0: one block per transaction
    dev_addresses: tuple[str, ...]
    # Anvil's public development keys; they never leave this object except to sign.
    dev_private_keys: tuple[str, ...]


def parse_env_file(path: Path) -> dict[str, str]:
    """Returns the KEY=VALUE pairs of a dotenv-style file (quotes stripped, comments skipped)."""
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$", line)
        if match and not line.lstrip().startswith("#"):
            values[match.group(1)] = match.group(2).strip("\"'")
    return values


@cache
def devnet_settings(path: Path = ANVIL_ENV) -> DevnetSettings:
    """Returns the devnet settings from `anvil.env`."""
    if not path.exists():
        raise ConfigError(f"{path} is missing: it describes the devnet")
    env = parse_env_file(path)
    try:
        return DevnetSettings(
            port=int(env["ANVIL_PORT"]),
            rpc_url=env["ANVIL_RPC_URL"],
            chain_id=int(env["ANVIL_CHAIN_ID"]),
            mnemonic=env["ANVIL_MNEMONIC"],
            block_time_s=int(env.get("ANVIL_BLOCK_TIME", "1")),
            dev_addresses=tuple(env[f"DEV{i}_ADDRESS"] for i in range(DEV_ACCOUNT_COUNT)),
            dev_private_keys=tuple(env[f"DEV{i}_PRIVATE_KEY"] for i in range(DEV_ACCOUNT_COUNT)),
        )
    except (KeyError, ValueError) as error:
        raise ConfigError(f"{path} lacks or garbles {error}") from None


def crucible_home() -> Path:
    """Returns the state folder: keystores, the devnet's files. `CRUCIBLE_HOME` overrides it."""
    return Path(os.environ.get("CRUCIBLE_HOME", Path.home() / ".crucible"))
