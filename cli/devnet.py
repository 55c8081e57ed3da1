"""`crucible devnet up|down|status|advance` and `crucible deploy`."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import typer

from cli.context import confirm_or_abort, context
from cli.output import emit_json, key_value_table, stderr, stdout
from protocol.accounts import load_signer
from protocol.artifacts.ipfs_node import devnet_ipfs_down, devnet_ipfs_status, devnet_ipfs_up
from protocol.chain import devnet
from protocol.chain.connection import Chain
from protocol.chain.deployment import DEFAULT_UNBONDING_S, DEVNET_UNBONDING_S, Deployment, deploy, is_live
from protocol.chain.fees import eth
from protocol.chain.opstack import L1FeeParams, l1_fee_of_gas, read_l1_fee_params, require_l1_fee, set_l1_fee_params
from protocol.config import devnet_settings
from protocol.errors import ConfigError
from protocol.values import format_tokens

app = typer.Typer(no_args_is_help=True, help="Start, stop and inspect the local devnet (Anvil or Hardhat).")

JSON = typer.Option(False, "--json", help="Print one JSON document on stdout.")


def _ensure_deployed(chain: Chain, path: Path) -> tuple[Deployment, bool]:
    if path.exists():
        try:
            existing: Deployment | None = Deployment.load(path)
        except ConfigError:
            existing = None  # the devnet's own address book, from an older build: deploy afresh
        if existing is not None and is_live(chain, existing):
            return existing, False
    settings = devnet_settings()
    deployer = load_signer("dev0")
    deployment = deploy(chain, deployer, token_holders=settings.dev_addresses, unbonding_period_s=DEVNET_UNBONDING_S)
    deployment.save(path)
    return deployment, True


@app.command()
def up(
    ctx: typer.Context,
    port: int = typer.Option(None, "--port", help="Port for the devnet's node (default: anvil.env's)."),
    block_time: int = typer.Option(
        None, "--block-time", help="Seconds between blocks (default: anvil.env's, 1); 0: a block per transaction."
    ),
    ipfs: bool = typer.Option(
        False, "--ipfs", help="Also start an IPFS daemon (js-ipfs, offline) for `--store kubo:URL`; prints its URL."
    ),
    client: str = typer.Option(
        "anvil", "--client", help="The EVM client: anvil (keeps its state) or hardhat (Hardhat's EDR; starts empty)."
    ),
    chain_type: str = typer.Option(
        "l1", "--chain-type", help="l1, or op: an OP Stack chain whose sends pay an L1 data fee (hardhat only)."
    ),
    json_output: bool = JSON,
) -> None:
    """Start the devnet's node in the background, deploy the contracts, fund dev0-dev9 and write the address
    book."""
    cli = context(ctx)
    current = devnet.up(port, block_time, client, chain_type)
    daemon = devnet_ipfs_up() if ipfs else devnet_ipfs_status()
    cli.rpc = current.rpc_url
    chain = cli.chain()
    deployment, deployed = _ensure_deployed(chain, cli.deployment_file())
    addresses = {
        "DevToken": deployment.DevToken,
        "StakeManager": deployment.StakeManager,
        "TaskMarket": deployment.TaskMarket,
        "TaskMarketLens": deployment.TaskMarketLens,
    }
    l1 = read_l1_fee_params(chain.w3) if chain.charges_l1_fee() else None
    if json_output:
        emit_json(
            {
                "rpc_url": current.rpc_url,
                "chain_id": chain.chain_id,
                "pid": current.pid,
                "state_dir": current.state_dir,
                "block_time_s": current.block_time_s,
                "client": current.client,
                "chain_type": current.chain_type,
                "l1_fee_params": None if l1 is None else l1.as_json(),
                "deployment": str(cli.deployment_file()),
                "deployed": deployed,
                "addresses": addresses,
                "ipfs_api": daemon.api_url,
            }
        )
        return
    crucible = cli.crucible()
    rows = [
        ("RPC", current.rpc_url),
        ("client", f"{current.client} ({current.chain_type})"),
        ("chain id", chain.chain_id),
        ("pid", current.pid),
        ("state", current.state_dir),
        ("blocks", _blocks(current.block_time_s)),
    ]
    rows += [(name, address) for name, address in addresses.items()]
    if l1 is not None:
        rows.append(("L1 data fee", f"{l1.describe()} (`crucible devnet l1-fee` to change)"))
    if daemon.running:
        rows.append(("IPFS API", f"{daemon.api_url} (use --store kubo:{daemon.api_url})"))
    rows.append(("address book", f"{cli.deployment_file()} ({'written' if deployed else 'already deployed'})"))
    rows.append(
        (
            "dev0-dev9",
            format_tokens(crucible.balance_of(devnet_settings().dev_addresses[0]), crucible.decimals, crucible.symbol)
            + " (dev0 now; each dev account got 1,000,000 at deployment)",
        )
    )
    stdout.print(key_value_table("Devnet up", rows))


@app.command()
def down(json_output: bool = JSON) -> None:
    """Stop the background devnet (and the IPFS daemon, if one runs); their state stays for the next `up`."""
    stopped, ipfs_stopped = devnet.down(), devnet_ipfs_down()
    if json_output:
        emit_json({"stopped": stopped, "ipfs_stopped": ipfs_stopped})
        return
    stdout.print("devnet stopped" if stopped else "devnet was not running")
    if ipfs_stopped:
        stdout.print("IPFS daemon stopped")


@app.command()
def status(json_output: bool = JSON) -> None:
    """Say whether the background devnet (and an IPFS daemon beside it) runs."""
    current, daemon = devnet.status(), devnet_ipfs_status()
    if json_output:
        emit_json({**asdict(current), "ipfs": asdict(daemon)})
        return
    if current.running:
        stdout.print(f"devnet running at {current.rpc_url} ({current.client}, {current.chain_type}; pid {current.pid}, "
                     f"{_blocks(current.block_time_s)}, "
                     f"state in {current.state_dir})")  # fmt: skip
    else:
        stdout.print("devnet not running")
    if daemon.running:
        stdout.print(f"IPFS daemon running at {daemon.api_url} (pid {daemon.pid}; --store kubo:{daemon.api_url})")


def _blocks(block_time_s: int | None) -> str:
    return "a block per transaction" if not block_time_s else f"a block every {block_time_s} s"


@app.command()
def advance(
    ctx: typer.Context,
    seconds: int = typer.Argument(..., help="How far to move the devnet's clock on, in seconds."),
    json_output: bool = JSON,
) -> None:
    """Move the devnet's clock on (to end a window now) and mine a block there; devnet only."""
    chain = context(ctx).chain()
    before = chain.timestamp()
    after = devnet.advance_time(chain, seconds)
    block = chain.w3.eth.block_number
    if json_output:
        emit_json({"advanced_s": seconds, "timestamp_before": before, "timestamp": after, "block": block})
    else:
        stdout.print(f"devnet clock moved on {seconds:,} s: block {block} at {after} (was {before})")


def deploy_command(
    ctx: typer.Context,
    account: str = typer.Option(..., "--account", help="Deployer: devN, env, a keystore name or address."),
    token: str = typer.Option(None, "--token", help="An existing ERC-20 to use (default: deploy a DevToken)."),
    unbonding: int = typer.Option(DEFAULT_UNBONDING_S, "--unbonding", help="Unbonding period in seconds."),
    out: Path = typer.Option(None, "--out", help="Address book to write (default: deployments/<chainId>.json)."),
    yes: bool = typer.Option(False, "--yes", help="Do not ask before sending."),
    json_output: bool = JSON,
) -> None:
    """Deploy the contracts to any EVM chain (--rpc) and write its address book."""
    cli = context(ctx)
    chain = cli.chain()
    signer = cli.signer(account)
    path = out or cli.deployment_file()
    confirm_or_abort(f"Deploy Crucible to chain {chain.chain_id} at {chain.rpc_url} from {signer.address}?", yes)
    stderr.print(f"deploying to chain {chain.chain_id} ...")
    deployment = deploy(chain, signer, token=token, unbonding_period_s=unbonding)
    deployment.save(path)
    if json_output:
        emit_json({"chain_id": chain.chain_id, "deployment": str(path), "addresses": deployment})
    else:
        stdout.print(
            key_value_table(
                f"Deployed to chain {chain.chain_id}",
                [
                    ("Token", deployment.Token),
                    ("StakeManager", deployment.StakeManager),
                    ("TaskMarket", deployment.TaskMarket),
                    ("TaskMarketLens", deployment.TaskMarketLens),
                    ("address book", path),
                ],
            )
        )


@app.command("l1-fee")
def l1_fee(
    ctx: typer.Context,
    l1_base_fee_gwei: float = typer.Option(None, "--l1-base-fee-gwei", help="Set the L1 base fee (devnet only)."),
    blob_base_fee_gwei: float = typer.Option(None, "--blob-base-fee-gwei", help="Set the blob base fee (devnet only)."),
    base_fee_scalar: int = typer.Option(None, "--base-fee-scalar", help="Set the base fee scalar (devnet only)."),
    blob_base_fee_scalar: int = typer.Option(
        None, "--blob-base-fee-scalar", help="Set the blob base fee scalar (devnet only)."
    ),
    json_output: bool = JSON,
) -> None:
    """Show an OP Stack chain's L1 data fee parameters (what every transaction pays for its bytes on L1);
    on the devnet's `op` chain, set them. A chain without the OP Stack's oracle is refused."""
    chain = context(ctx).chain()
    require_l1_fee(chain.w3, chain.rpc_url)
    current = read_l1_fee_params(chain.w3)
    given = (l1_base_fee_gwei, blob_base_fee_gwei, base_fee_scalar, blob_base_fee_scalar)
    if any(value is not None for value in given):
        if chain.chain_id != devnet_settings().chain_id:
            raise ConfigError(f"chain {chain.chain_id} is not the devnet: its L1 fee parameters are its sequencer's")
        if any(value is not None and value < 0 for value in given):
            raise ConfigError("L1 fee parameters are 0 or more")
        current = L1FeeParams(
            current.l1_base_fee_wei if l1_base_fee_gwei is None else int(l1_base_fee_gwei * 10**9),
            current.blob_base_fee_wei if blob_base_fee_gwei is None else int(blob_base_fee_gwei * 10**9),
            current.base_fee_scalar if base_fee_scalar is None else base_fee_scalar,
            current.blob_base_fee_scalar if blob_base_fee_scalar is None else blob_base_fee_scalar,
        )
        set_l1_fee_params(chain.w3, current)
        current = read_l1_fee_params(chain.w3)
    # What a 1,600-L1-gas transaction (100 compressed bytes, the least an OP Stack chain charges for) pays.
    smallest = l1_fee_of_gas(1_600, current)
    if json_output:
        emit_json(current.as_json() | {"smallest_transaction_l1_fee_wei": str(smallest)})
        return
    stdout.print(f"{current.describe(scalars=True)}: the smallest transaction pays {eth(smallest)} of L1 data fee")
