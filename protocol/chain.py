"""A connection to an EVM chain that is safe for concurrent senders.

- One nonce sequence per sender, guarded by a lock and started from the `pending` count, so
  threads sharing a key never collide; a refused nonce resynchronises once.
- Transport errors are retried with exponential backoff by the provider (its allow-list includes
  eth_sendRawTransaction: resending the same signed bytes cannot send twice); a resend that
  finds its transaction already known is treated as sent.
- Gas is estimated with a margin; a revert during estimation or in a mined transaction is decoded
  from the contracts' custom errors into a ContractRevert.
- Receipts are awaited to a confirmation depth and checked to still be on the canonical chain; a
  transaction the node forgot (a reorg dropped it) is sent again from its signed bytes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import requests
from eth_utils import keccak
from hexbytes import HexBytes
from web3 import Web3
from web3.contract import Contract
from web3.contract.contract import ContractFunction
from web3.exceptions import ContractLogicError, TimeExhausted, TransactionNotFound, Web3RPCError
from web3.providers.rpc.utils import ExceptionRetryConfiguration
from web3.types import TxReceipt

from protocol.accounts import Signer
from protocol.contracts import artifact, decode_revert
from protocol.errors import ChainError, ContractRevert, RpcUnreachable, TransactionError

GAS_MARGIN = 1.25
REBROADCAST_AFTER_S = 3.0  # a transaction still unmined and unknown after this is sent again
KEEP_SENT = 256  # signed transactions kept per sender, to re-send what a reorg dropped
TRANSPORT_ERRORS = (requests.ConnectionError, requests.Timeout, requests.HTTPError)
# What nodes answer when asked about a block they do not have (yet, or any more after a reorg or a
# revert): Anvil, geth, Erigon/Nethermind. The head moves under the question; asking again answers it.
MISSING_BLOCK = ("BlockOutOfRange", "header not found", "unknown block")


def describe_revert(name: str, args: dict[str, Any]) -> str:
    """Returns one readable line for a decoded custom error."""
    shown = ", ".join(f"{key}={value}" for key, value in args.items())
    hints = {
        "ERC20InsufficientBalance": "token balance too low",
        "ERC20InsufficientAllowance": "token allowance too low",
        "MarketDeterrenceTooLow": "the deterrence check p*S >= (1-p)*R refuses these parameters",
        "MarketUnknownTask": "no such task",
        "MarketOutsideWindow": "not in the round's window for this call",
        "StakeInsufficientFree": "not enough unlocked stake",
        "StakeNotReleasable": "nothing to withdraw yet",
        "StakeRoleMismatch": "the account is staked for another role",
    }
    hint = hints.get(name)
    return f"contract refused: {name}({shown})" + (f" - {hint}" if hint else "")


def _rpc_message(error: Web3RPCError) -> str:
    response = getattr(error, "rpc_response", None) or {}
    message = response.get("error", {}).get("message") if isinstance(response, dict) else None
    return str(message or error)


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
        self.rpc_url = rpc_url
        self.confirmations = confirmations
        self.receipt_timeout_s = receipt_timeout_s
        self.poll_interval_s = poll_interval_s
        self.retries, self.backoff_s = retries, backoff_s
        retry = ExceptionRetryConfiguration(errors=TRANSPORT_ERRORS, retries=retries, backoff_factor=backoff_s)
        provider = Web3.HTTPProvider(rpc_url, request_kwargs={"timeout": 10}, exception_retry_configuration=retry)
        self.w3 = Web3(provider)
        self.chain_id = self._rpc(lambda: self.w3.eth.chain_id)
        if expected_chain_id is not None and self.chain_id != expected_chain_id:
            raise ChainError(f"wrong chain: {rpc_url} has chain id {self.chain_id}, expected {expected_chain_id}")
        self._nonce_lock = threading.Lock()
        self._next_nonce: dict[str, int] = {}
        # The signed bytes of each sender's recent transactions by nonce: what a reorg drops is sent again.
        self._sent: dict[str, dict[int, bytes]] = {}

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

    # ------------------------------------------------------------ contracts

    def contract(self, name: str, address: str) -> Contract:
        """Returns a contract object for `name` (a forge artifact) at `address`."""
        return self.w3.eth.contract(
            address=Web3.to_checksum_address(address), abi=artifact(name).abi, decode_tuples=True
        )

    def has_code(self, address: str) -> bool:
        """Whether a contract is deployed at `address`."""
        return len(self._rpc(lambda: self.w3.eth.get_code(Web3.to_checksum_address(address)))) > 0

    def deploy(self, name: str, signer: Signer, *constructor_args: Any) -> tuple[str, TxReceipt]:
        """Deploys `name` from `signer`; returns its address and the receipt."""
        factory = self.w3.eth.contract(abi=artifact(name).abi, bytecode=artifact(name).bytecode)
        receipt = self._send(signer, factory.constructor(*constructor_args), 0)
        return str(receipt["contractAddress"]), receipt

    def timestamp(self) -> int:
        """The latest block's timestamp."""
        return int(self._rpc(lambda: self.w3.eth.get_block("latest"))["timestamp"])

    def now(self) -> int:
        """The time the next block will at least carry: the later of the wall clock and the latest block."""
        return max(int(time.time()), self.timestamp())

    def call(self, function: ContractFunction, block: Any = "latest") -> Any:
        """Returns a view function's result, with reverts decoded."""
        try:
            return self._rpc(lambda: function.call(block_identifier=block))
        except ContractLogicError as error:
            raise self._revert(error) from None

    def transact(self, function: ContractFunction, signer: Signer, value_wei: int = 0) -> TxReceipt:
        """Sends a contract call from `signer`, waits for its receipt and returns it."""
        return self._send(signer, function, value_wei)

    # ------------------------------------------------------------ sending

    def _send(self, signer: Signer, call: Any, value_wei: int) -> TxReceipt:
        """Estimates, signs, sends and waits for `call` (a contract function or constructor)."""
        base: dict[str, Any] = {"from": signer.address, "chainId": self.chain_id, "value": value_wei}
        try:
            estimated = self._rpc(lambda: call.estimate_gas(base))
        except ContractLogicError as error:
            raise self._revert(error) from None
        except Web3RPCError as error:
            raise TransactionError(f"transaction refused by {self.rpc_url}: {_rpc_message(error)}") from None
        transaction = call.build_transaction({**base, "gas": int(estimated * GAS_MARGIN), **self._fees()})
        with self._nonce_lock:
            transaction["nonce"] = self._nonce_for(signer.address)
            raw = signer.sign_transaction(transaction)
            tx_hash, raw = self._broadcast(raw, signer.address, transaction, signer)
            self._next_nonce[signer.address] = transaction["nonce"] + 1
            sent = self._sent.setdefault(signer.address, {})
            sent[transaction["nonce"]] = raw
            for old in [n for n in sent if n < transaction["nonce"] - KEEP_SENT]:
                del sent[old]
        return self.wait(tx_hash, raw, signer.address, transaction["nonce"])

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
            raise TransactionError(f"transaction refused by {self.rpc_url}: {_rpc_message(error)}") from None
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
            # another one): the receipt look-up decides.
            if "nonce" not in str(error).lower() and "already known" not in str(error).lower():
                raise TransactionError(f"transaction refused by {self.rpc_url}: {_rpc_message(error)}") from None

    def _known(self, tx_hash: HexBytes) -> bool:
        try:
            self.w3.eth.get_transaction(tx_hash)
            return True
        except (TransactionNotFound, *TRANSPORT_ERRORS):
            return False

    def _fees(self) -> dict[str, int]:
        latest = self._rpc(lambda: self.w3.eth.get_block("latest"))
        base_fee = latest.get("baseFeePerGas")
        if base_fee is None:
            return {"gasPrice": self._rpc(lambda: self.w3.eth.gas_price)}
        priority = self._rpc(lambda: self.w3.eth.max_priority_fee)
        return {"maxFeePerGas": 2 * base_fee + priority, "maxPriorityFeePerGas": priority}

    def wait(
        self, tx_hash: HexBytes, raw: bytes | None = None, sender: str | None = None, nonce: int | None = None
    ) -> TxReceipt:
        """Waits for a receipt `confirmations` blocks deep on the canonical chain; decodes a revert.

        A transaction the node no longer knows (a reorg dropped the block that held it, and with it the
        transaction) is sent again from its signed bytes `raw`: the same nonce, so never twice. When the
        sender's count on chain is below `nonce`, a reorg dropped earlier transactions of this sender
        (already reported mined): they are sent again from their signed bytes, which unblocks this one."""
        deadline = time.monotonic() + self.receipt_timeout_s
        while True:
            try:
                receipt = self._rpc(
                    lambda: self.w3.eth.wait_for_transaction_receipt(
                        tx_hash,
                        timeout=max(0.1, min(REBROADCAST_AFTER_S, deadline - time.monotonic())),
                        poll_latency=self.poll_interval_s,
                    )
                )
            except TimeExhausted:
                if time.monotonic() >= deadline:
                    raise TransactionError(
                        f"transaction {tx_hash.to_0x_hex()} not mined in {self.receipt_timeout_s:.0f} s"
                    ) from None
                if raw is not None and not self._known(tx_hash):
                    self._resend(raw)
                if sender is not None and nonce is not None:
                    self._fill_gap(sender, nonce)
                continue
            if self._deep_enough(receipt, deadline):
                break
        if receipt["status"] != 1:
            raise self._failed(receipt)
        return receipt

    def _deep_enough(self, receipt: TxReceipt, deadline: float) -> bool:
        while self._rpc(lambda: self.w3.eth.block_number) - receipt["blockNumber"] < self.confirmations:
            if time.monotonic() > deadline:
                raise TransactionError(f"transaction {receipt['transactionHash'].to_0x_hex()} not confirmed in time")
            time.sleep(self.poll_interval_s)
        block = self._rpc(lambda: self.w3.eth.get_block(receipt["blockNumber"]))
        # A reorg replaced the block: wait for the transaction's new receipt, if any.
        return bool(block["hash"] == receipt["blockHash"])

    def _failed(self, receipt: TxReceipt) -> TransactionError:
        transaction = self.w3.eth.get_transaction(receipt["transactionHash"])
        call: Any = {key: transaction[key] for key in ("from", "to", "value") if key in transaction}
        call["data"] = transaction["input"]
        try:
            self.w3.eth.call(call, block_identifier=receipt["blockNumber"] - 1)
        except ContractLogicError as error:
            return self._revert(error)
        return TransactionError(f"transaction {receipt['transactionHash'].to_0x_hex()} failed")

    def _revert(self, error: ContractLogicError) -> TransactionError:
        data = error.data
        raw = HexBytes(data) if isinstance(data, str) and data.startswith("0x") else b""
        decoded = decode_revert(raw) if raw else None
        if decoded is None:
            return TransactionError(f"contract refused the call: {error.message or error}")
        name, args = decoded
        return ContractRevert(name, args, describe_revert(name, args))

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
