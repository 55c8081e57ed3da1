"""The local devnet: a background EVM node (Anvil, or Hardhat's) with its state, log and pid under the state
folder."""

from __future__ import annotations

import json
import platform
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from web3.types import TxReceipt

from protocol.accounts import Signer
from protocol.chain.client import Crucible
from protocol.chain.connection import Chain
from protocol.chain.hardhat import CHAIN_TYPES, start_hardhat
from protocol.chain.opstack import DEVNET_L1_FEE, l1_fee_storage
from protocol.config import REPO_ROOT, crucible_home, devnet_settings
from protocol.errors import ChainError, ConfigError
from protocol.processes import free_port, port_in_use, process_alive, stop_child, stop_process

_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
# The EVM clients a devnet runs on: Anvil (Foundry's, revm) and Hardhat's node (EDR).
CLIENTS = ("anvil", "hardhat")


def foundry_binary(tool: str) -> Path:
    """Returns the Foundry platform binary from node_modules (not the npm wrapper, which loses exit codes)."""
    arch = _ARCH.get(platform.machine().lower())
    path = REPO_ROOT / "node_modules" / "@foundry-rs" / f"{tool}-linux-{arch}" / "bin" / tool
    if arch is None or not path.exists():
        raise ChainError(f"{tool} is not installed at {path}: run `make setup`")
    return path


def wait_for_rpc(rpc_url: str, timeout_s: float = 20.0) -> None:
    """Waits until `rpc_url` answers eth_chainId."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            _rpc(rpc_url, "eth_chainId", [], timeout_s=1)
            return
        except (httpx.HTTPError, ValueError, ChainError):
            time.sleep(0.1)
    raise ChainError(f"the chain did not answer at {rpc_url} within {timeout_s:.0f} s")


def start_anvil(
    port: int, log_path: Path, state_path: Path | None = None, detach: bool = False, block_time_s: int = 0
) -> subprocess.Popen[bytes]:
    """Starts Anvil on 127.0.0.1:`port` with the devnet's chain id and mnemonic; waits until it answers.
    `block_time_s` > 0: a block every that many seconds, several senders' transactions in one block, as
    on a real chain (0: a block for each transaction)."""
    settings = devnet_settings()
    command = [
        str(foundry_binary("anvil")),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--chain-id",
        str(settings.chain_id),
        "--mnemonic",
        settings.mnemonic,
    ]
    resumed = state_path is not None and state_path.exists()
    if block_time_s and not resumed:
        command += ["--block-time", str(block_time_s)]
    if state_path is not None:
        command += ["--state", str(state_path), "--state-interval", "5"]
    if resumed:
        command += ["--no-mining"]  # until its clock is set right (`_keep_clock`)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=detach
        )
    _await_start(process, port, lambda: _keep_clock(f"http://127.0.0.1:{port}", block_time_s) if resumed else None)
    return process


def start_chain(
    client: str,
    port: int,
    log_path: Path,
    state_path: Path | None = None,
    detach: bool = False,
    block_time_s: int = 0,
    chain_type: str = "l1",
) -> subprocess.Popen[bytes]:
    """Starts the devnet's EVM node on 127.0.0.1:`port` with `client` (one of CLIENTS) and waits until it
    answers. Anvil keeps its state in `state_path`; Hardhat keeps none. `chain_type` "op": an OP Stack
    chain with L1 data fees (Hardhat only)."""
    check_client(client)
    check_chain_type(client, chain_type)
    if client == "anvil":
        return start_anvil(port, log_path, state_path, detach, block_time_s)
    process = start_hardhat(port, log_path, block_time_s, chain_type, detach)
    _await_start(process, port, lambda: _hardhat_ready(f"http://127.0.0.1:{port}", chain_type))
    return process


def _hardhat_ready(rpc_url: str, chain_type: str) -> None:
    """Hardhat's node logs every request it answers (a line per eth_call: gigabytes a day; transactions and
    errors are in the chain itself): turned off. An OP Stack chain gets non-zero L1 fee parameters."""
    _rpc(rpc_url, "hardhat_setLoggingEnabled", [False])
    if chain_type == "op":
        for word in l1_fee_storage(DEVNET_L1_FEE):
            _rpc(rpc_url, "hardhat_setStorageAt", word)


def check_client(client: str) -> None:
    """A ConfigError unless `client` is an EVM client the devnet runs on."""
    if client not in CLIENTS:
        raise ConfigError(f"--client must be one of {', '.join(CLIENTS)}, not {client!r}")


def check_chain_type(client: str, chain_type: str) -> None:
    """A ConfigError unless `client` runs chains of `chain_type` (CHAIN_TYPES; "op" on Hardhat only)."""
    if chain_type not in CHAIN_TYPES:
        raise ConfigError(f"--chain-type must be one of {', '.join(CHAIN_TYPES)}, not {chain_type!r}")
    if chain_type != "l1" and client != "hardhat":
        raise ConfigError(f"--chain-type {chain_type} runs on Hardhat only (--client hardhat)")


def _await_start(process: subprocess.Popen[bytes], port: int, then: Callable[[], object] | None = None) -> None:
    """Waits until the node just started answers on `port` (then runs `then`); kills it if it does not."""
    try:
        wait_for_rpc(f"http://127.0.0.1:{port}")
        if then is not None:
            then()
    except ChainError:
        process.kill()
        process.wait()
        raise


def _rpc(rpc_url: str, method: str, params: Sequence[object], timeout_s: float = 10) -> object:
    """One JSON-RPC call to a devnet before any Chain exists (its start-up)."""
    import httpx

    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}
    response = httpx.post(rpc_url, json=body, timeout=timeout_s)
    document = response.json()
    if "error" in document:
        raise ChainError(f"{method} failed: {document['error'].get('message', document['error'])}")
    return document["result"]


def _keep_clock(rpc_url: str, block_time_s: int = 0) -> None:
    """Anvil loads a saved state's blocks but not its clock offset: its next block would carry the wall
    clock, earlier than a warped chain's last block (time running backwards, deadlines un-passed). Anvil
    starts without mining; the next block is set just after the last one and mined (with whatever a
    client sent meanwhile), so Anvil's clock goes on from there; then it mines on every transaction, or
    every `block_time_s` seconds."""
    latest = _rpc(rpc_url, "eth_getBlockByNumber", ["latest", False])
    assert isinstance(latest, dict)
    last = int(str(latest["timestamp"]), 16)
    _rpc(rpc_url, "evm_setNextBlockTimestamp", [max(last + 1, int(time.time()))])
    _rpc(rpc_url, "evm_mine", [])
    if block_time_s:
        _rpc(rpc_url, "evm_setIntervalMining", [block_time_s])
    else:
        _rpc(rpc_url, "evm_setAutomine", [True])


@dataclass
class LocalChain:
    """An EVM node this process started (tests, the demo): Anvil or Hardhat's."""

    rpc_url: str
    port: int
    process: subprocess.Popen[bytes]
    client: str = "anvil"

    def stop(self) -> None:
        """Stops it and waits for it to exit."""
        stop_child(self.process)


def start_private_chain(
    log_path: Path, block_time_s: int = 0, client: str = "anvil", chain_type: str = "l1"
) -> LocalChain:
    """Starts an EVM node (`client`) on a free port, for one test session or one demo (a block every
    `block_time_s` seconds when > 0, else one per transaction)."""
    port = free_port()
    process = start_chain(client, port, log_path, block_time_s=block_time_s, chain_type=chain_type)
    return LocalChain(f"http://127.0.0.1:{port}", port, process, client)


@dataclass(frozen=True)
class DevnetStatus:
    """What `crucible devnet status` reports."""

    running: bool
    rpc_url: str
    pid: int | None
    state_dir: str
    block_time_s: int | None = None  # seconds between blocks (0: a block per transaction); None: not running
    client: str | None = None  # the EVM client it runs ("anvil", "hardhat"); None: not running
    chain_type: str | None = None  # "l1", or "op" (an OP Stack chain with L1 data fees); None: not running


def devnet_dir() -> Path:
    """Returns the folder holding the devnet's state, log and pid."""
    return crucible_home() / "devnet"


def _pid_file() -> Path:
    return devnet_dir() / "anvil.pid"


def status() -> DevnetStatus:
    """Returns whether the background devnet runs."""
    settings = devnet_settings()
    pid: int | None = None
    if _pid_file().exists():
        pid = json.loads(_pid_file().read_text())["pid"]
    running = pid is not None and process_alive(pid)
    if not running:
        return DevnetStatus(running=False, rpc_url=settings.rpc_url, pid=None, state_dir=str(devnet_dir()))
    recorded = json.loads(_pid_file().read_text())
    return DevnetStatus(running=True, rpc_url=f"http://127.0.0.1:{recorded['port']}", pid=pid,
                        state_dir=str(devnet_dir()), block_time_s=int(recorded.get("block_time_s", 0)),
                        client=str(recorded.get("client", "anvil")),
                        chain_type=str(recorded.get("chain_type", "l1")))  # fmt: skip


def up(
    port: int | None = None, block_time_s: int | None = None, client: str = "anvil", chain_type: str = "l1"
) -> DevnetStatus:
    """Starts the background devnet on `client` unless one runs, mining a block every `block_time_s` seconds
    (default: anvil.env's; 0: a block per transaction). Anvil's state persists in the state folder;
    Hardhat's node keeps none (each start is a fresh chain). A running devnet on another client is a
    ConfigError (stop it first)."""
    check_client(client)
    check_chain_type(client, chain_type)
    current = status()
    if current.running:
        if (current.client, current.chain_type) != (client, chain_type):
            raise ConfigError(
                f"the devnet runs on {current.client} ({current.chain_type}): `crucible devnet down` first to start "
                f"{client} ({chain_type})"
            )
        return current
    settings = devnet_settings()
    port = port or settings.port
    block_time_s = settings.block_time_s if block_time_s is None else block_time_s
    if block_time_s < 0:
        raise ConfigError(f"--block-time must be 0 (a block per transaction) or more seconds, not {block_time_s}")
    if port_in_use(port):
        raise ChainError(f"port {port} is taken by another process: stop it or pass --port")
    directory = devnet_dir()
    process = start_chain(client, port, directory / f"{client}.log", directory / "state.json", detach=True,
                          block_time_s=block_time_s, chain_type=chain_type)  # fmt: skip
    _pid_file().write_text(
        json.dumps(
            {"pid": process.pid, "port": port, "block_time_s": block_time_s, "client": client, "chain_type": chain_type}
        )
    )
    return status()


def down() -> bool:
    """Stops the background devnet (Anvil saves its state on the way out); returns whether one ran."""
    current = status()
    if not current.running or current.pid is None:
        _pid_file().unlink(missing_ok=True)
        return False
    stop_process(current.pid)
    _pid_file().unlink(missing_ok=True)
    return True


def advance_time(chain: Chain, seconds: int) -> int:
    """Moves a devnet's clock on by `seconds` and mines a block there (Anvil's evm_increaseTime);
    returns the new block's timestamp. ConfigError for a chain that is not the devnet's."""

    if chain.chain_id != devnet_settings().chain_id:
        raise ConfigError(
            f"chain {chain.chain_id} is not the devnet ({devnet_settings().chain_id}): its clock is its own"
        )
    if seconds <= 0:
        raise ConfigError(f"SECONDS must be more than 0, not {seconds}: the clock moves forward only")
    chain.w3.provider.make_request("evm_increaseTime", [seconds])  # type: ignore[arg-type]
    chain.w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]
    return chain.timestamp()


def warp_to(chain: Chain, timestamp: int) -> None:
    """Moves a devnet's clock to `timestamp` (if it is in the future) and mines a block there."""

    now = chain.w3.eth.get_block("latest")["timestamp"]
    if timestamp > now:
        chain.w3.provider.make_request("evm_setNextBlockTimestamp", [timestamp])  # type: ignore[arg-type]
    chain.w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]


def fix_check_seed(crucible: Crucible, signer: Signer, task_id: int) -> list[TxReceipt]:
    """Requests the current round's check seed and fixes it (`finish_check_seed`); returns both receipts."""
    return [crucible.fix_check_seed(signer, task_id), finish_check_seed(crucible, signer, task_id)]


def finish_check_seed(crucible: Crucible, signer: Signer, task_id: int) -> TxReceipt:
    """Fixes the current round's requested check seed: mines past the block the request named (a devnet
    need not wait for its interval, and an automining one would wait for ever), then fixes it."""
    round_state = crucible.round(task_id, crucible.task(task_id).current_round)
    while crucible.chain.block_number() <= round_state.seed_block:
        crucible.chain.w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]
    return crucible.fix_check_seed(signer, task_id)


def vote_all(
    crucible: Crucible, ballots: list[tuple[int, Signer, bool, str]]
) -> tuple[list[TxReceipt], list[TxReceipt]]:
    """Each ballot's (submission, voter, verdict, evidence CID) whole vote, the submissions all of one round: every
    commitment now (the commit phase), the devnet's clock moved to the round's reveal phase, then every reveal.
    Returns the commitments' receipts and the reveals'. The salts are derived from the submission and the voter: a
    devnet's votes, not a secret."""
    rounds = sorted({(sid >> 192, (sid >> 160) & 0xFFFFFFFF) for sid, _, _, _ in ballots})
    reveal_from = max(crucible.deadlines(*task_round).votes_revealed_from for task_round in rounds)
    return _commit_then_reveal(crucible, ballots, "vote", crucible.commit_attestation, reveal_from, crucible.attest)


def vote_dispute_all(
    crucible: Crucible, submission: int, ballots: list[tuple[Signer, bool, str]]
) -> tuple[list[TxReceipt], list[TxReceipt]]:
    """Each ballot's (member, verdict, evidence CID) whole vote on the dispute on `submission`, as `vote_all` does
    attestations: every commitment now, the devnet's clock moved to the dispute's reveal phase, every reveal."""
    return _commit_then_reveal(
        crucible,
        [(submission, signer, valid, evidence) for signer, valid, evidence in ballots],
        "dispute vote",
        crucible.commit_dispute_vote,
        crucible.dispute_votes_revealed_from(submission),
        crucible.vote_dispute,
    )


def _commit_then_reveal(
    crucible: Crucible,
    ballots: list[tuple[int, Signer, bool, str]],
    kind: str,
    commit: Callable[[Signer, int, bool, str, bytes], TxReceipt],
    reveal_from: int,
    reveal: Callable[[Signer, int, bool, str, bytes], TxReceipt],
) -> tuple[list[TxReceipt], list[TxReceipt]]:
    """Every ballot's commitment (`commit`), the clock moved to `reveal_from`, every reveal (`reveal`); the salts
    derived from the `kind` of vote, the submission and the voter."""
    from eth_utils import keccak

    salts = [keccak(text=f"devnet {kind} {sid} {signer.address}") for sid, signer, _, _ in ballots]
    votes = [
        (signer, sid, valid, evidence, salt)
        for (sid, signer, valid, evidence), salt in zip(ballots, salts, strict=True)
    ]
    commits = [commit(*vote) for vote in votes]
    warp_to(crucible.chain, reveal_from)
    return commits, [reveal(*vote) for vote in votes]


def finish_dispute_seed(crucible: Crucible, signer: Signer, submission: int) -> TxReceipt:
    """Fixes an open dispute's committee seed: mines past the block the dispute named, as `finish_check_seed`
    does for a round, then fixes it (the committee is empty until then)."""
    seed_block = crucible.dispute_state(submission).seed_block
    while crucible.chain.block_number() <= seed_block:
        crucible.chain.w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]
    receipt = crucible.fix_dispute_seed(signer, submission)
    if receipt is None:
        raise ConfigError(f"dispute on submission {hex(submission)} is closed or its seed is already fixed")
    return receipt


def funded_account(
    crucible: Crucible, funder: Signer, seed: str, tokens_wei: int, name: str | None = None
) -> tuple[Signer, str]:
    """A devnet account whose key is keccak(`seed`) (a rerun finds the same one), given ether with
    the devnet's setBalance and `tokens_wei` tokens from `funder`; returns its Signer (called `name`) and key."""
    from eth_account import Account
    from eth_utils import keccak

    key = "0x" + keccak(text=seed).hex()
    account = Account.from_key(key)
    set_balance(crucible.chain, account.address, 10**20)
    crucible.transfer(funder, account.address, tokens_wei)
    return Signer(account.address, name or seed, account), key


def dev_method(chain: Chain, name: str) -> str:
    """The devnet method `name` in the node's own namespace: `anvil_…` on Anvil, `hardhat_…` on Hardhat
    (told by web3_clientVersion, asked once per connection)."""
    return ("hardhat_" if chain.client_version().lower().startswith("hardhat") else "anvil_") + name


def set_balance(chain: Chain, address: str, wei: int) -> None:
    """Sets an account's ether on a devnet (Anvil's or Hardhat's setBalance); ChainError where the node
    refuses (not a devnet)."""
    method = dev_method(chain, "setBalance")
    response = chain.w3.provider.make_request(method, [address, hex(wei)])  # type: ignore[arg-type]
    if "error" in response:
        raise ChainError(f"{method} failed at {chain.rpc_url}: {response['error'].get('message', response['error'])}")
