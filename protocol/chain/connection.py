"""A connection to an EVM chain that is safe for concurrent senders.

- Transport errors are retried with exponential backoff by the provider, then reported as
  RpcUnreachable; a node's answer that it lacks a block the head just moved past is asked again.
- View calls are encoded and decoded once per function (protocol/chain/views.py); a revert is
  decoded from the contracts' custom errors into a ContractRevert (protocol/chain/reverts.py).
- Transactions go through the connection's Sender (protocol/chain/sending.py): nonces per sender,
  gas and balance checked before sending, re-pricing, receipts to a confirmation depth, what a
  reorg dropped sent again.
- The chain's block interval, next base fee and L1 data fee, as the planners and senders need them.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from eth_abi.exceptions import DecodingError
from web3 import Web3
from web3.contract import Contract
from web3.contract.contract import ContractFunction
from web3.exceptions import (
    BadFunctionCallOutput,
    ContractLogicError,
    Web3RPCError,
)
from web3.providers.rpc.utils import ExceptionRetryConfiguration
from web3.types import TxReceipt

from protocol.accounts import Signer
from protocol.chain.contracts import artifact
from protocol.chain.fees import Fees
from protocol.chain.opstack import has_l1_fee
from protocol.chain.reverts import revert_of
from protocol.chain.sending import Sender
from protocol.chain.sessions import TRANSPORT_ERRORS, SessionPerThread
from protocol.chain.views import ViewCodec
from protocol.errors import (
    ChainError,
    ConfigError,
    RpcUnreachable,
)

INTERVAL_BLOCKS = 8  # blocks whose gaps estimate the block interval
INTERVAL_TTL_S = 30.0
# What nodes answer when asked about a block they do not have (yet, or any more after a reorg or a
# revert): Anvil, geth, Erigon/Nethermind. The head moves under the question; asking again answers it.
MISSING_BLOCK = ("BlockOutOfRange", "header not found", "unknown block")


def check_rpc_url(rpc_url: str) -> None:
    """An HTTP(S) URL with a host, or a ConfigError naming what is wrong with it."""
    parts = urlsplit(rpc_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"bad RPC URL {rpc_url!r}: give an http:// or https:// URL with a host, like http://127.0.0.1:8545"
        )


class Chain:
    """A web3 connection with a nonce-managed sender, retries and decoded reverts."""

    def __init__(
        self,
        rpc_url: str,
        expected_chain_id: int | None = None,
        confirmations: int = 0,
        receipt_timeout_s: float = 120.0,
        poll_interval_s: float = 0.05,
        retries: int = 5,
        backoff_s: float = 0.25,
    ) -> None:
        check_rpc_url(rpc_url)
        self.rpc_url = rpc_url
        self.confirmations = confirmations
        self.receipt_timeout_s = receipt_timeout_s
        self.poll_interval_s = poll_interval_s
        self.retries, self.backoff_s = retries, backoff_s
        retry = ExceptionRetryConfiguration(errors=TRANSPORT_ERRORS, retries=retries, backoff_factor=backoff_s)
        provider = Web3.HTTPProvider(
            rpc_url, {"timeout": 10}, session=SessionPerThread(rpc_url), exception_retry_configuration=retry
        )
        self.w3 = Web3(provider)
        # Middleware for what this class does itself: its transactions are signed here with their chain id,
        # fees and gas (no gas-price strategy), it names accounts by address (no ENS), and the chain id is
        # checked once below. web3's validation middleware asked the node for the chain id again on every
        # call, half the requests of a role's loop and half its CPU per call.
        for name in ("validation", "ens_name_to_address", "gas_price_strategy"):
            self.w3.middleware_onion.remove(name)
        self.chain_id = self.request(lambda: self.w3.eth.chain_id)
        if expected_chain_id is not None and self.chain_id != expected_chain_id:
            raise ChainError(f"wrong chain: {rpc_url} has chain id {self.chain_id}, expected {expected_chain_id}")
        self._interval: tuple[int, float] | None = None  # (seconds between blocks, measured until)
        self._client_version: str | None = None
        self._l1_fee: bool | None = None
        self.fees = Fees()  # what this connection's mined transactions paid
        self._views: dict[tuple[str, Any], ViewCodec] = {}  # by (address, function)
        self.sender = Sender(self)

    def request(self, call: Callable[[], Any]) -> Any:
        """Runs one request: transport errors (already retried by the provider) become RpcUnreachable;
        a missing-block answer is asked again, with backoff, `retries` times."""
        for attempt in range(self.retries + 1):
            try:
                return call()
            except TRANSPORT_ERRORS:
                raise RpcUnreachable(f"RPC endpoint {self.rpc_url} is unreachable") from None
            except Web3RPCError as error:
                if attempt == self.retries or not any(text in str(error) for text in MISSING_BLOCK):
                    raise
                time.sleep(self.backoff_s * 2**attempt)
        raise AssertionError("unreachable")

    def charges_l1_fee(self) -> bool:
        """Whether the chain charges an L1 data fee (an OP Stack chain), asked once."""
        if self._l1_fee is None:
            self._l1_fee = bool(self.request(lambda: has_l1_fee(self.w3)))
        return self._l1_fee

    def client_version(self) -> str:
        """The node's web3_clientVersion ("anvil/v1.7.1", "HardhatNetwork/3.18.0/…", "Geth/…"), asked once."""
        if self._client_version is None:
            self._client_version = str(self.request(lambda: self.w3.client_version))
        return self._client_version

    # ------------------------------------------------------------ contracts

    def contract(self, name: str, address: str) -> Contract:
        """Returns a contract object for `name` (a forge artifact) at `address`."""
        return self.w3.eth.contract(
            address=Web3.to_checksum_address(address), abi=artifact(name).abi, decode_tuples=True
        )

    def has_code(self, address: str) -> bool:
        """Whether a contract is deployed at `address`."""
        return len(self.request(lambda: self.w3.eth.get_code(Web3.to_checksum_address(address)))) > 0

    def deploy(
        self, name: str, signer: Signer, *constructor_args: Any, libraries: dict[str, str] | None = None
    ) -> tuple[str, TxReceipt]:
        """Deploys `name` from `signer`, linked to the deployed `libraries` (name -> address) it calls;
        returns its address and the receipt."""
        code = artifact(name).linked(libraries or {})
        factory = self.w3.eth.contract(abi=artifact(name).abi, bytecode=code)
        receipt = self.sender.send(signer, factory.constructor(*constructor_args), 0)
        return str(receipt["contractAddress"]), receipt

    def timestamp(self) -> int:
        """The latest block's timestamp."""
        return int(self.request(lambda: self.w3.eth.get_block("latest"))["timestamp"])

    def block_number(self) -> int:
        """The latest block's number."""
        return int(self.request(lambda: self.w3.eth.block_number))

    def now(self) -> int:
        """The time the next block will at least carry: the later of the wall clock and the latest block."""
        return max(int(time.time()), self.timestamp())

    def block_interval_s(self) -> int:
        """The chain's usual time between blocks: the median gap over its last blocks, at least 1 s,
        measured again every half minute. A median, so that a devnet's clock jump (one long gap) or a
        burst of blocks in one second does not count."""
        if self._interval is not None and time.monotonic() < self._interval[1]:
            return self._interval[0]
        head = self.request(lambda: self.w3.eth.block_number)
        numbers = range(max(0, head - INTERVAL_BLOCKS), head + 1)
        stamps = [int(self.request(lambda: self.w3.eth.get_block(n))["timestamp"]) for n in numbers]  # noqa: B023
        gaps = sorted(later - earlier for earlier, later in itertools.pairwise(stamps))
        interval = max(1, gaps[len(gaps) // 2] if gaps else 1)
        self._interval = (interval, time.monotonic() + INTERVAL_TTL_S)
        return interval

    def lands_by(self) -> int:
        """The latest timestamp a transaction sent now should expect its block to carry: the next block
        (an interval after the latest, never before the wall clock), or the one after it when the next
        is sealed before the transaction reaches it."""
        interval = self.block_interval_s()
        return max(int(time.time()), self.timestamp() + interval) + interval

    def call(self, function: ContractFunction, block: Any = "latest") -> Any:
        """Returns a view function's result (as web3 gives it: `protocol/chain/views.py`), reverts decoded."""
        key = (function.address, function.abi_element_identifier)
        codec = self._views.get(key)
        if codec is None:
            codec = self._views[key] = ViewCodec.of(dict(function.abi))
        request = {"to": function.address, "data": codec.calldata(function.args)}
        try:
            data = self.request(lambda: self.w3.eth.call(request, block_identifier=block))  # type: ignore[arg-type]
        except ContractLogicError as error:
            raise revert_of(error) from None
        try:
            return codec.result(data)
        except DecodingError as error:
            raise BadFunctionCallOutput(f"{function.abi_element_identifier} at {function.address}: {error}") from None

    def transact(
        self, function: ContractFunction, signer: Signer, value_wei: int = 0, gas: int | None = None
    ) -> TxReceipt:
        """Sends a contract call from `signer` (estimated, unless `gas` gives the limit), waits for its
        receipt and returns it."""
        return self.sender.send(signer, function, value_wei, gas)

    # ------------------------------------------------------------ fees

    def next_base_fee(self) -> int | None:
        """The base fee the next block will charge (None on a chain without EIP-1559): the last entry of
        `eth_feeHistory`, which nodes compute from the latest block (and Anvil's override of it)."""
        history = self.request(lambda: self.w3.eth.fee_history(1, "latest"))
        fees = history.get("baseFeePerGas") or []
        return int(fees[-1]) if fees and fees[-1] else None

    # ------------------------------------------------------------ events

    def events(
        self,
        contract: Contract,
        event_name: str,
        from_block: int = 0,
        to_block: int | str = "latest",
        argument_filters: dict[str, Any] | None = None,
    ) -> list[Any]:
        """Returns the decoded logs of one event in a block range."""
        event = contract.events[event_name]
        return list(
            self.request(
                lambda: event.get_logs(from_block=from_block, to_block=to_block, argument_filters=argument_filters)
            )
        )
