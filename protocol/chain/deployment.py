"""Deploying the contracts and the address books in `deployments/<chainId>.json`."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from protocol.accounts import Signer
from protocol.chain.connection import Chain
from protocol.chain.contracts import artifact
from protocol.config import DEPLOYMENTS_DIR
from protocol.errors import ChainError, ConfigError
from protocol.values import checked_address

DEV_TOKEN_SUPPLY_EACH = 1_000_000 * 10**18
DEFAULT_UNBONDING_S = 7 * 24 * 3600
DEVNET_UNBONDING_S = 120


@dataclass(frozen=True)
class Deployment:
    """Where the contracts of one chain live; the keys of the JSON file are the contracts' names."""

    chainId: int
    DevToken: str | None
    Token: str
    StakeManager: str
    TaskMarket: str
    TaskMarketLens: str
    deployBlock: int
    unbondingPeriodSeconds: int

    def save(self, path: Path) -> None:
        """Writes the address book whole or not at all."""
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(asdict(self), indent=2) + "\n")
        os.replace(temporary, path)

    @classmethod
    def load(cls, path: Path) -> Deployment:
        """Reads an address book, naming the file when it is missing or malformed."""
        if not path.exists():
            raise ChainError(f"no deployment at {path}: run `crucible devnet up` or `crucible deploy`")
        try:
            data = json.loads(path.read_text())
        except ValueError as error:
            raise ConfigError(f"malformed deployment file {path}: {error}") from None
        if isinstance(data, dict) and "TaskMarket" in data and "TaskMarketLens" not in data:
            raise ConfigError(
                f"deployment file {path} has no TaskMarketLens: it predates the market's lens; deploy again "
                "(`crucible devnet up` does on the devnet, `crucible deploy` elsewhere)"
            )
        try:
            deployment = cls(**data)
        except TypeError as error:
            raise ConfigError(f"malformed deployment file {path}: {error}") from None
        for name in ("Token", "StakeManager", "TaskMarket", "TaskMarketLens"):
            checked_address(getattr(deployment, name), f"{name} address in {path}")
        return deployment


def default_deployment_path(chain_id: int) -> Path:
    """Returns `deployments/<chainId>.json`."""
    return DEPLOYMENTS_DIR / f"{chain_id}.json"


def deploy(
    chain: Chain,
    deployer: Signer,
    token: str | None = None,
    token_holders: tuple[str, ...] = (),
    unbonding_period_s: int = DEFAULT_UNBONDING_S,
) -> Deployment:
    """Deploys StakeManager, the market's libraries, TaskMarket (linked to them) and its lens (and a
    DevToken minted to `token_holders` when no `token` is given), binds them, and returns the address book."""
    require_prevrandao(chain)
    dev_token: str | None = None
    if token is None:
        holders = token_holders or (deployer.address,)
        dev_token, receipt = chain.deploy("DevToken", deployer, list(holders), [DEV_TOKEN_SUPPLY_EACH] * len(holders))
        token = dev_token
        first_block = receipt["blockNumber"]
    else:
        token = checked_address(token, "token address")
        if not chain.has_code(token):
            raise ChainError(f"no contract at token address {token} on chain {chain.chain_id}")
        first_block = None
    stakes, receipt = chain.deploy("StakeManager", deployer, token, unbonding_period_s)
    first_block = first_block if first_block is not None else receipt["blockNumber"]
    # The market's external libraries (disputes, parameters, seats, seeds, budgets: the market would not fit in
    # 24 KiB with them inside), each deployed once, linked into whatever calls it, leaves first.
    libraries = deploy_libraries(chain, deployer, "TaskMarket", {})
    market, _ = chain.deploy("TaskMarket", deployer, token, stakes, libraries=libraries)
    chain.transact(chain.contract("StakeManager", stakes).functions.bindMarket(market), deployer)
    lens, _ = chain.deploy("TaskMarketLens", deployer, market)
    return Deployment(
        chainId=chain.chain_id,
        DevToken=dev_token,
        Token=token,
        StakeManager=stakes,
        TaskMarket=market,
        TaskMarketLens=lens,
        deployBlock=first_block,
        unbondingPeriodSeconds=unbonding_period_s,
    )


def require_prevrandao(chain: Chain) -> None:
    """Refuses a chain whose blocks carry no prevrandao (a constant `mixHash`): the market's seeds would be
    known in advance there (docs/contracts.md, 'Where the seeds come from'). ConfigError naming it."""
    head = chain.block_number()
    if head < 1:
        return  # one block only: nothing to compare yet
    mixes = {chain.w3.eth.get_block(number)["mixHash"] for number in (head - 1, head)}
    if len(mixes) == 1:
        raise ConfigError(
            f"chain {chain.chain_id} gives two blocks the same prevrandao ({mixes.pop().hex()}): "
            "Crucible's check seeds need a chain whose blocks carry fresh randomness (post-merge Ethereum, "
            "an OP Stack L2, a devnet)"
        )


def deploy_libraries(chain: Chain, deployer: Signer, name: str, deployed: dict[str, str]) -> dict[str, str]:
    """Deploys every library `name` links (and the libraries they link, first) that `deployed` (name -> address)
    does not hold yet, adding each; returns `deployed`."""
    for library in artifact(name).links:
        if library not in deployed:
            deploy_libraries(chain, deployer, library, deployed)
            deployed[library] = chain.deploy(library, deployer, libraries=deployed)[0]
    return deployed


def is_live(chain: Chain, deployment: Deployment) -> bool:
    """Whether the address book's contracts exist on this chain."""
    return deployment.chainId == chain.chain_id and all(
        chain.has_code(address)
        for address in (deployment.Token, deployment.StakeManager, deployment.TaskMarket, deployment.TaskMarketLens)
    )
