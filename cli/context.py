"""What every command needs: the chain, the deployment and an account, from the global options."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import typer

from protocol.accounts import Signer, load_signer, resolve_address
from protocol.chain import devnet
from protocol.chain.client import Crucible
from protocol.chain.connection import Chain
from protocol.chain.deployment import Deployment, default_deployment_path, is_live
from protocol.errors import ChainError, ConfigError
from protocol.values import to_wei

# Every connection this process opened: what their transactions paid is said once the command ends.
OPENED: list[Chain] = []


def fee_lines() -> list[str]:
    """One line per connection that sent transactions: what they paid (L2 gas, and the L1 data fee on an OP
    Stack chain)."""
    return [chain.fees.line() for chain in OPENED if chain.fees.transactions]


@dataclass
class CliContext:
    """The global options, turned into connections on first use."""

    rpc: str | None
    deployment_path: Path | None
    _chain: Chain | None = None
    _crucible: Crucible | None = None

    def rpc_url(self) -> str:
        """The RPC URL: --rpc, else the running devnet's. Never a chain nobody named: whatever answers on
        the devnet's usual port may be someone else's."""
        if self.rpc:
            return self.rpc
        current = devnet.status()
        if not current.running:
            raise ConfigError(
                "no devnet is running and no --rpc was given: start one with `crucible devnet up`, "
                "or name the chain with --rpc URL"
            )
        return current.rpc_url

    def chain(self) -> Chain:
        """A connection to the chain."""
        if self._chain is None:
            self._chain = Chain(self.rpc_url())
            OPENED.append(self._chain)
        return self._chain

    def deployment_file(self) -> Path:
        """The address book: --deployment, else deployments/<chainId>.json."""
        return self.deployment_path or default_deployment_path(self.chain().chain_id)

    def crucible(self) -> Crucible:
        """The deployed contracts, checked to be on this chain."""
        if self._crucible is None:
            chain = self.chain()
            path = self.deployment_file()
            deployment = Deployment.load(path)
            if deployment.chainId != chain.chain_id:
                raise ChainError(
                    f"wrong chain: {path} is for chain id {deployment.chainId}, {chain.rpc_url} serves {chain.chain_id}"
                )
            if not is_live(chain, deployment):
                raise ChainError(
                    f"the contracts of {path} are not deployed at {chain.rpc_url}: run `crucible devnet up`"
                )
            self._crucible = Crucible(chain, deployment)
        return self._crucible

    def signer(self, account: str) -> Signer:
        """The account that signs."""
        return load_signer(account)

    def tokens(self, amount: str, what: str) -> int:
        """Whole tokens as base units, with the deployed token's decimals."""
        return to_wei(amount, self.crucible().decimals, what)


STORE_HELP = "A local store folder, relay URLs (comma-separated) or kubo:API_URL (default: the local store)."


def context(ctx: typer.Context) -> CliContext:
    """Returns the CLI context of the running command."""
    obj = ctx.find_root().obj
    if not isinstance(obj, CliContext):
        raise ConfigError("internal: the CLI context is missing")
    return obj


def address_of(account: str) -> str:
    """An account name or address as an address."""
    return resolve_address(account)


def confirm_or_abort(question: str, yes: bool) -> None:
    """Asks on stderr unless --yes; a no (or no input) aborts with nothing sent.

    click's confirm writes part of its prompt to stdout, which would break `--json` output.
    """
    if yes:
        return
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline() if sys.stdin is not None else ""
    if not answer.endswith("\n"):
        sys.stderr.write("\n")
    if answer.strip().lower() not in ("y", "yes"):
        raise ConfigError("not confirmed: nothing was sent (pass --yes to skip the question)")
