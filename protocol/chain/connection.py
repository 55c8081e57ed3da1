"""A connection to an EVM chain that is safe for concurrent senders.

- One nonce sequence per sender, guarded by a lock and started from the `pending` count, so
  threads sharing a key never collide; a refused nonce resynchronises once.
- Transport errors are retried with exponential backoff by the provider (its allow-list includes
  eth_sendRawTransaction: resending the same signed bytes cannot send twice); a resend that
  finds its transaction already known is treated as sent.
- Gas is estimated with a margin; a revert during estimation or in a mined transaction is decoded
  from the contracts' custom errors into a ContractRevert (protocol/chain/reverts.py).
- Receipts are awaited to a confirmation depth and checked to still be on the canonical chain; a
  transaction the node forgot (a reorg dropped it) is sent again from its signed bytes.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests
from eth_abi.exceptions import DecodingError
from eth_utils import keccak
from hexbytes import HexBytes
from web3 import Web3
from web3.contract import Contract
from web3.contract.contract import ContractFunction
from web3.exceptions import (
    BadFunctionCallOutput,
    BlockNotFound,
    ContractLogicError,
    TransactionNotFound,
    Web3RPCError,
)
from web3.providers.rpc.utils import ExceptionRetryConfiguration
from web3.types import TxReceipt

from protocol.accounts import Signer
from protocol.chain.contracts import artifact
from protocol.chain.fees import Fees, require_funds, unfunded
from protocol.chain.opstack import has_l1_fee, l1_fee
from protocol.chain.reverts import failure_of, revert_of, rpc_message
from protocol.chain.sessions import SessionPerThread
from protocol.chain.views import ViewCodec
from protocol.errors import (
    ChainError,
    ConfigError,
    RpcUnreachable,
    TransactionError,
)

GAS_MARGIN = 1.25
# Added to every estimate: a rival's transaction landing first in the same block can put this one on a
# dearer path than the one estimated (an attestation that becomes the rejecting one writes two more
# slots and emits; the proposal that completes agreement, the first committee vote that draws the seed).
GAS_HEADROOM = 60_000
REBROADCAST_AFTER_S = 3.0  # a transaction still unmined and unknown after this is sent again
KEEP_SENT = 256  # signed transactions kept per sender, to re-send what a reorg dropped
INTERVAL_BLOCKS = 8  # blocks whose gaps estimate the block interval
INTERVAL_TTL_S = 30.0
TRANSPORT_ERRORS = (requests.ConnectionError, requests.Timeout, requests.HTTPError)
# What nodes answer when asked about a block they do not have (yet, or any more after a reorg or a
# revert): Anvil, geth, Erigon/Nethermind. The head moves under the question; asking again answers it.
MISSING_BLOCK = ("BlockOutOfRange", "header not found", "unknown block")


def _bumped(fee: int) -> int:
    return fee + max(fee // 8, 1)


@dataclass
class _Outgoing:
    """A sent transaction: the latest version's fields and signed bytes, and the hash of every version
    sent for its nonce (a re-priced one replaces the one before; whichever is mined counts)."""

    signer: Signer
    transaction: dict[str, Any]
    hashes: list[HexBytes]
    raw: bytes


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
        self.chain_id = self._rpc(lambda: self.w3.eth.chain_id)
        if expected_chain_id is not None and self.chain_id != expected_chain_id:
            raise ChainError(f"wrong chain: {rpc_url} has chain id {self.chain_id}, expected {expected_chain_id}")
        self._nonce_lock = threading.Lock()
        self._next_nonce: dict[str, int] = {}
        # The signed bytes of each sender's recent transactions by nonce: what a reorg drops is sent again.
        self._sent: dict[str, dict[int, bytes]] = {}
        self.repriced = 0  # transactions sent again at a higher fee, for reports and tests
        self._interval: tuple[int, float] | None = None  # (seconds between blocks, measured until)
        self._client_version: str | None = None
        self._l1_fee: bool | None = None
        self.fees = Fees()  # what this connection's mined transactions paid
        self._views: dict[tuple[str, Any], ViewCodec] = {}  # by (address, function)

    def _rpc(self, call: Callable[[], Any]) -> Any:
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
            self._l1_fee = bool(self._rpc(lambda: has_l1_fee(self.w3)))
        return self._l1_fee

    def client_version(self) -> str:
        """The node's web3_clientVersion ("anvil/v1.7.1", "HardhatNetwork/3.18.0/…", "Geth/…"), asked once."""
        if self._client_version is None:
            self._client_version = str(self._rpc(lambda: self.w3.client_version))
        return self._client_version

    # ------------------------------------------------------------ contracts

    def contract(self, name: str, address: str) -> Contract:
        """Returns a contract object for `name` (a forge artifact) at `address`."""
        return self.w3.eth.contract(
            address=Web3.to_checksum_address(address), abi=artifact(name).abi, decode_tuples=True
        )

    def has_code(self, address: str) -> bool:
        """Whether a contract is deployed at `address`."""
        return len(self._rpc(lambda: self.w3.eth.get_code(Web3.to_checksum_address(address)))) > 0

    def deploy(
        self, name: str, signer: Signer, *constructor_args: Any, libraries: dict[str, str] | None = None
    ) -> tuple[str, TxReceipt]:
        """Deploys `name` from `signer`, linked to the deployed `libraries` (name -> address) it calls;
        returns its address and the receipt."""
        code = artifact(name).linked(libraries or {})
        factory = self.w3.eth.contract(abi=artifact(name).abi, bytecode=code)
        receipt = self._send(signer, factory.constructor(*constructor_args), 0)
        return str(receipt["contractAddress"]), receipt

    def timestamp(self) -> int:
        """The latest block's timestamp."""
        return int(self._rpc(lambda: self.w3.eth.get_block("latest"))["timestamp"])

    def block_number(self) -> int:
        """The latest block's number."""
        return int(self._rpc(lambda: self.w3.eth.block_number))

    def now(self) -> int:
        """The time the next block will at least carry: the later of the wall clock and the latest block."""
        return max(int(time.time()), self.timestamp())

    def block_interval_s(self) -> int:
        """The chain's usual time between blocks: the median gap over its last blocks, at least 1 s,
        measured again every half minute. A median, so that a devnet's clock jump (one long gap) or a
        burst of blocks in one second does not count."""
        if self._interval is not None and time.monotonic() < self._interval[1]:
            return self._interval[0]
        head = self._rpc(lambda: self.w3.eth.block_number)
        numbers = range(max(0, head - INTERVAL_BLOCKS), head + 1)
        stamps = [int(self._rpc(lambda: self.w3.eth.get_block(n))["timestamp"]) for n in numbers]  # noqa: B023
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
            data = self._rpc(lambda: self.w3.eth.call(request, block_identifier=block))  # type: ignore[arg-type]
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
        return self._send(signer, function, value_wei, gas)

    # ------------------------------------------------------------ sending

    def _send(self, signer: Signer, call: Any, value_wei: int, gas: int | None = None) -> TxReceipt:
        """Estimates (unless `gas` is given), signs, sends and waits for `call` (a contract function or
        constructor)."""
        base: dict[str, Any] = {"from": signer.address, "chainId": self.chain_id, "value": value_wei}
        if gas is None:
            try:
                estimated = self._rpc(lambda: call.estimate_gas(base))
            except ContractLogicError as error:
                raise unfunded(signer, str(error.message or error)) or revert_of(error) from None
            except Web3RPCError as error:
                message = rpc_message(error)
                raise unfunded(signer, message) or TransactionError(
                    f"transaction refused by {self.rpc_url}: {message}"
                ) from None
            gas = self._gas_limit(estimated)
        transaction = call.build_transaction({**base, "gas": gas, **self._fees()})
        with self._nonce_lock:
            transaction["nonce"] = self._nonce_for(signer.address)
            raw = signer.sign_transaction(transaction)
            self._budget(signer, transaction, raw)
            tx_hash, raw = self._broadcast(raw, signer.address, transaction, signer)
            self._remember(signer.address, transaction["nonce"], raw)
            self._next_nonce[signer.address] = transaction["nonce"] + 1
        return self._await(_Outgoing(signer, transaction, [tx_hash], raw))

    def _budget(self, signer: Signer, transaction: dict[str, Any], raw: bytes) -> None:
        """InsufficientFunds, before anything is sent, unless the sender holds the most the transaction may
        cost, the L1 data fee of an OP Stack chain included (priced by the chain's oracle on the signed
        bytes: an upper bound of what the receipt charges)."""
        l1 = self._rpc(lambda: l1_fee(self.w3, raw)) if self.charges_l1_fee() else 0
        balance = int(self._rpc(lambda: self.w3.eth.get_balance(Web3.to_checksum_address(signer.address))))
        require_funds(signer, transaction, l1, balance)

    def _gas_limit(self, estimated: int) -> int:
        """The estimate with room for the dearer path another sender's transaction can put this one on
        when it lands first in the same block (the attestation that rejects, the proposal that agrees,
        the vote that draws the committee), within the block's gas limit."""
        limit = int(estimated * GAS_MARGIN) + GAS_HEADROOM
        block_limit = int(self._rpc(lambda: self.w3.eth.get_block("latest"))["gasLimit"])
        return max(estimated, min(limit, block_limit))

    def _remember(self, sender: str, nonce: int, raw: bytes) -> None:
        sent = self._sent.setdefault(sender, {})
        sent[nonce] = raw
        for old in [n for n in sent if n < nonce - KEEP_SENT]:
            del sent[old]

    def forget_nonce(self, address: str) -> None:
        """Drops the cached next nonce of `address`: after a reorg dropped its transactions the chain's
        count is behind the cache, and a nonce from the cache would leave a gap that never mines."""
        with self._nonce_lock:
            self._next_nonce.pop(address, None)

    def _nonce_for(self, address: str) -> int:
        pending = self._rpc(lambda: self.w3.eth.get_transaction_count(Web3.to_checksum_address(address), "pending"))
        return max(pending, self._next_nonce.get(address, 0))

    def _broadcast(
        self, raw: bytes, address: str, transaction: dict[str, Any], signer: Signer
    ) -> tuple[HexBytes, bytes]:
        """Sends signed bytes; returns the hash and the bytes that were sent (re-signed after a nonce clash)."""
        tx_hash = HexBytes(keccak(raw))
        try:
            self._rpc(lambda: self.w3.eth.send_raw_transaction(raw))
        except Web3RPCError as error:
            message = str(error).lower()
            if "already known" in message or self._known(tx_hash):
                return tx_hash, raw
            if "nonce" in message:
                # Another process used this key: start again from the chain's count, once.
                self._next_nonce.pop(address, None)
                transaction["nonce"] = self._nonce_for(address)
                raw = signer.sign_transaction(transaction)
                self._rpc(lambda: self.w3.eth.send_raw_transaction(raw))
                return HexBytes(keccak(raw)), raw
            raise TransactionError(f"transaction refused by {self.rpc_url}: {rpc_message(error)}") from None
        return tx_hash, raw

    def _fill_gap(self, sender: str, nonce: int) -> None:
        count = self._rpc(lambda: self.w3.eth.get_transaction_count(Web3.to_checksum_address(sender), "pending"))
        sent = self._sent.get(sender, {})
        for missing in range(count, nonce):
            if missing in sent:
                self._resend(sent[missing])

    def _resend(self, raw: bytes) -> None:
        try:
            self._rpc(lambda: self.w3.eth.send_raw_transaction(raw))
        except Web3RPCError as error:
            # "nonce too low": its nonce was used since (by this very transaction, mined meanwhile, or
            # another one): the receipt look-up decides. "underpriced": a re-priced version replaced it.
            message = str(error).lower()
            # "base fee": the fee cap fell behind the chain's; the next block's look re-prices it.
            if not any(
                text in message for text in ("nonce", "already known", "underpriced", "replacement", "base fee")
            ):
                raise TransactionError(f"transaction refused by {self.rpc_url}: {rpc_message(error)}") from None

    def _known(self, tx_hash: HexBytes) -> bool:
        try:
            self.w3.eth.get_transaction(tx_hash)
            return True
        except (TransactionNotFound, *TRANSPORT_ERRORS):
            return False

    def next_base_fee(self) -> int | None:
        """The base fee the next block will charge (None on a chain without EIP-1559): the last entry of
        `eth_feeHistory`, which nodes compute from the latest block (and Anvil's override of it)."""
        history = self._rpc(lambda: self.w3.eth.fee_history(1, "latest"))
        fees = history.get("baseFeePerGas") or []
        return int(fees[-1]) if fees and fees[-1] else None

    def _fees(self) -> dict[str, int]:
        base_fee = self.next_base_fee()
        if base_fee is None:
            return {"gasPrice": self._rpc(lambda: self.w3.eth.gas_price)}
        priority = self._rpc(lambda: self.w3.eth.max_priority_fee)
        return {"maxFeePerGas": 2 * base_fee + priority, "maxPriorityFeePerGas": priority}

    def _reprice(self, outgoing: _Outgoing) -> None:
        """Sends the same transaction again, same nonce, at fees that the next block accepts, when the base
        fee has risen above what it offers (as Optimism's transaction manager does). Each fee rises by at
        least an eighth, above the tenth that nodes ask of a replacement."""
        transaction = outgoing.transaction
        if "maxFeePerGas" in transaction:
            base_fee = self.next_base_fee()
            if base_fee is None or transaction["maxFeePerGas"] >= base_fee:
                return
            priority = max(
                _bumped(transaction["maxPriorityFeePerGas"]), self._rpc(lambda: self.w3.eth.max_priority_fee)
            )
            fees = {"maxFeePerGas": max(_bumped(transaction["maxFeePerGas"]), 2 * base_fee + priority),
                    "maxPriorityFeePerGas": priority}  # fmt: skip
        else:
            price = self._rpc(lambda: self.w3.eth.gas_price)
            if transaction["gasPrice"] >= price:
                return
            fees = {"gasPrice": max(_bumped(transaction["gasPrice"]), price)}
        repriced = {**transaction, **fees}
        raw = outgoing.signer.sign_transaction(repriced)
        self._resend(raw)
        outgoing.transaction, outgoing.raw = repriced, raw
        outgoing.hashes.append(HexBytes(keccak(raw)))
        with self._nonce_lock:
            self._remember(outgoing.signer.address, transaction["nonce"], raw)
        self.repriced += 1

    def _receipt(self, hashes: list[HexBytes]) -> TxReceipt | None:
        """The receipt of whichever version of a transaction was mined, if any."""
        for tx_hash in hashes:
            try:
                return self._rpc(lambda: self.w3.eth.get_transaction_receipt(tx_hash))  # noqa: B023
            except TransactionNotFound:
                continue
        return None

    def _await(self, outgoing: _Outgoing) -> TxReceipt:
        """Waits for a receipt `confirmations` blocks deep on the canonical chain; decodes a revert.

        Each block that passes without it: re-priced when the base fee rose above its fee cap. Every few
        seconds unmined: a transaction the node no longer knows (a reorg dropped the block that held it)
        is sent again from its signed bytes, the same nonce, so never twice; when the sender's count on
        chain is below its nonce, a reorg dropped earlier transactions of this sender (already reported
        mined): they are sent again from their signed bytes, which unblocks this one."""
        deadline = time.monotonic() + self.receipt_timeout_s
        next_look = time.monotonic() + REBROADCAST_AFTER_S
        last_block = self._rpc(lambda: self.w3.eth.block_number)
        nonce = outgoing.transaction["nonce"]
        while True:
            receipt = self._receipt(outgoing.hashes)
            if receipt is not None:
                if self._deep_enough(receipt, deadline):
                    break
                time.sleep(self.poll_interval_s)  # a reorg replaced its block: look for its new receipt
                continue
            now = time.monotonic()
            if now >= deadline:
                raise TransactionError(
                    f"transaction {outgoing.hashes[-1].to_0x_hex()} not mined in {self.receipt_timeout_s:.0f} s"
                )
            head = self._rpc(lambda: self.w3.eth.block_number)
            if head != last_block:  # a block went by without it
                last_block = head
                self._reprice(outgoing)
            if now >= next_look:
                next_look = now + REBROADCAST_AFTER_S
                if not self._known(outgoing.hashes[-1]):
                    self._resend(outgoing.raw)
                self._fill_gap(outgoing.signer.address, nonce)
            time.sleep(self.poll_interval_s)
        self.fees.add(receipt)
        if receipt["status"] != 1:
            raise failure_of(self, receipt)
        return receipt

    def _deep_enough(self, receipt: TxReceipt, deadline: float) -> bool:
        """Whether the receipt's block is `confirmations` deep on the canonical chain (waiting for that);
        False when a reorg replaced that block or shortened the chain below it (a devnet's evm_revert
        does both): the caller then looks for the transaction's new receipt, or sends it again."""
        while (depth := self._rpc(lambda: self.w3.eth.block_number) - receipt["blockNumber"]) < self.confirmations:
            if depth < 0:
                return False
            if time.monotonic() > deadline:
                raise TransactionError(f"transaction {receipt['transactionHash'].to_0x_hex()} not confirmed in time")
            time.sleep(self.poll_interval_s)
        try:
            block = self._rpc(lambda: self.w3.eth.get_block(receipt["blockNumber"]))
        except BlockNotFound:
            return False  # a reorg shortened the chain below the receipt's block: as replaced, below
        # A reorg replaced the block: wait for the transaction's new receipt, if any.
        return bool(block["hash"] == receipt["blockHash"])

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
            self._rpc(
                lambda: event.get_logs(from_block=from_block, to_block=to_block, argument_filters=argument_filters)
            )
        )
