"""Sending a transaction so that it lands once, for a Chain (protocol/chain/connection.py).

- One nonce sequence per sender, guarded by a lock and started from the `pending` count, so
  threads sharing a key never collide; a refused nonce resynchronises once.
- Transport errors are retried by the connection's provider (its allow-list includes
  eth_sendRawTransaction: resending the same signed bytes cannot send twice); a resend that
  finds its transaction already known is treated as sent.
- Gas is estimated with a margin, and the sender's balance checked against the most the transaction
  may cost before it is sent; a revert during estimation or in a mined transaction is decoded from
  the contracts' custom errors into a ContractRevert (protocol/chain/reverts.py).
- Receipts are awaited to a confirmation depth and checked to still be on the canonical chain; a
  transaction re-priced when the base fee rises past its cap; one the node forgot (a reorg dropped
  it) sent again from its signed bytes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eth_utils import keccak
from hexbytes import HexBytes
from web3 import Web3
from web3.exceptions import BlockNotFound, ContractLogicError, TransactionNotFound, Web3RPCError
from web3.types import TxReceipt

from protocol.accounts import Signer
from protocol.chain.fees import require_funds, unfunded
from protocol.chain.opstack import l1_fee
from protocol.chain.reverts import failure_of, revert_of, rpc_message
from protocol.chain.sessions import TRANSPORT_ERRORS
from protocol.errors import TransactionError

if TYPE_CHECKING:
    from protocol.chain.connection import Chain

GAS_MARGIN = 1.25
# Added to every estimate: a rival's transaction landing first in the same block can put this one on a
# dearer path than the one estimated (an attestation that becomes the rejecting one writes two more
# slots and emits; the proposal that completes agreement, the first committee vote that draws the seed).
GAS_HEADROOM = 60_000
REBROADCAST_AFTER_S = 3.0  # a transaction still unmined and unknown after this is sent again
KEEP_SENT = 256  # signed transactions kept per sender, to re-send what a reorg dropped


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


class Sender:
    """The sending side of one Chain: nonces, fees, broadcasts and receipts, for any number of threads."""

    def __init__(self, chain: Chain) -> None:
        self.chain, self.w3 = chain, chain.w3
        self._nonce_lock = threading.Lock()
        self._next_nonce: dict[str, int] = {}
        # The signed bytes of each sender's recent transactions by nonce: what a reorg drops is sent again.
        self._sent: dict[str, dict[int, bytes]] = {}
        self.repriced = 0  # transactions sent again at a higher fee, for reports and tests

    def send(self, signer: Signer, call: Any, value_wei: int, gas: int | None = None) -> TxReceipt:
        """Estimates (unless `gas` is given), signs, sends and waits for `call` (a contract function or
        constructor)."""
        base: dict[str, Any] = {"from": signer.address, "chainId": self.chain.chain_id, "value": value_wei}
        if gas is None:
            try:
                estimated = self.chain.request(lambda: call.estimate_gas(base))
            except ContractLogicError as error:
                raise unfunded(signer, str(error.message or error)) or revert_of(error) from None
            except Web3RPCError as error:
                message = rpc_message(error)
                raise unfunded(signer, message) or TransactionError(
                    f"transaction refused by {self.chain.rpc_url}: {message}"
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
        l1 = self.chain.request(lambda: l1_fee(self.w3, raw)) if self.chain.charges_l1_fee() else 0
        balance = int(self.chain.request(lambda: self.w3.eth.get_balance(Web3.to_checksum_address(signer.address))))
        require_funds(signer, transaction, l1, balance)

    def _gas_limit(self, estimated: int) -> int:
        """The estimate with room for the dearer path another sender's transaction can put this one on
        when it lands first in the same block (the attestation that rejects, the proposal that agrees,
        the vote that draws the committee), within the block's gas limit."""
        limit = int(estimated * GAS_MARGIN) + GAS_HEADROOM
        block_limit = int(self.chain.request(lambda: self.w3.eth.get_block("latest"))["gasLimit"])
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
        pending = self.chain.request(
            lambda: self.w3.eth.get_transaction_count(Web3.to_checksum_address(address), "pending")
        )
        return max(pending, self._next_nonce.get(address, 0))

    def _broadcast(
        self, raw: bytes, address: str, transaction: dict[str, Any], signer: Signer
    ) -> tuple[HexBytes, bytes]:
        """Sends signed bytes; returns the hash and the bytes that were sent (re-signed after a nonce clash)."""
        tx_hash = HexBytes(keccak(raw))
        try:
            self.chain.request(lambda: self.w3.eth.send_raw_transaction(raw))
        except Web3RPCError as error:
            message = str(error).lower()
            if "already known" in message or self._known(tx_hash):
                return tx_hash, raw
            if "nonce" in message:
                # Another process used this key: start again from the chain's count, once.
                self._next_nonce.pop(address, None)
                transaction["nonce"] = self._nonce_for(address)
                raw = signer.sign_transaction(transaction)
                self.chain.request(lambda: self.w3.eth.send_raw_transaction(raw))
                return HexBytes(keccak(raw)), raw
            raise TransactionError(f"transaction refused by {self.chain.rpc_url}: {rpc_message(error)}") from None
        return tx_hash, raw

    def _fill_gap(self, sender: str, nonce: int) -> None:
        count = self.chain.request(
            lambda: self.w3.eth.get_transaction_count(Web3.to_checksum_address(sender), "pending")
        )
        sent = self._sent.get(sender, {})
        for missing in range(count, nonce):
            if missing in sent:
                self._resend(sent[missing])

    def _resend(self, raw: bytes) -> None:
        try:
            self.chain.request(lambda: self.w3.eth.send_raw_transaction(raw))
        except Web3RPCError as error:
            # "nonce too low": its nonce was used since (by this very transaction, mined meanwhile, or
            # another one): the receipt look-up decides. "underpriced": a re-priced version replaced it.
            message = str(error).lower()
            # "base fee": the fee cap fell behind the chain's; the next block's look re-prices it.
            if not any(
                text in message for text in ("nonce", "already known", "underpriced", "replacement", "base fee")
            ):
                raise TransactionError(f"transaction refused by {self.chain.rpc_url}: {rpc_message(error)}") from None

    def _known(self, tx_hash: HexBytes) -> bool:
        try:
            self.w3.eth.get_transaction(tx_hash)
            return True
        except (TransactionNotFound, *TRANSPORT_ERRORS):
            return False

    def _fees(self) -> dict[str, int]:
        base_fee = self.chain.next_base_fee()
        if base_fee is None:
            return {"gasPrice": self.chain.request(lambda: self.w3.eth.gas_price)}
        priority = self.chain.request(lambda: self.w3.eth.max_priority_fee)
        return {"maxFeePerGas": 2 * base_fee + priority, "maxPriorityFeePerGas": priority}

    def _reprice(self, outgoing: _Outgoing) -> None:
        """Sends the same transaction again, same nonce, at fees that the next block accepts, when the base
        fee has risen above what it offers (as Optimism's transaction manager does). Each fee rises by at
        least an eighth, above the tenth that nodes ask of a replacement."""
        transaction = outgoing.transaction
        if "maxFeePerGas" in transaction:
            base_fee = self.chain.next_base_fee()
            if base_fee is None or transaction["maxFeePerGas"] >= base_fee:
                return
            priority = max(
                _bumped(transaction["maxPriorityFeePerGas"]),
                self.chain.request(lambda: self.w3.eth.max_priority_fee),
            )
            fees = {"maxFeePerGas": max(_bumped(transaction["maxFeePerGas"]), 2 * base_fee + priority),
                    "maxPriorityFeePerGas": priority}  # fmt: skip
        else:
            price = self.chain.request(lambda: self.w3.eth.gas_price)
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
                return self.chain.request(lambda: self.w3.eth.get_transaction_receipt(tx_hash))  # noqa: B023
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
        deadline = time.monotonic() + self.chain.receipt_timeout_s
        next_look = time.monotonic() + REBROADCAST_AFTER_S
        last_block = self.chain.request(lambda: self.w3.eth.block_number)
        nonce = outgoing.transaction["nonce"]
        while True:
            receipt = self._receipt(outgoing.hashes)
            if receipt is not None:
                if self.deep_enough(receipt, deadline):
                    break
                time.sleep(self.chain.poll_interval_s)  # a reorg replaced its block: look for its new receipt
                continue
            now = time.monotonic()
            if now >= deadline:
                raise TransactionError(
                    f"transaction {outgoing.hashes[-1].to_0x_hex()} not mined in {self.chain.receipt_timeout_s:.0f} s"
                )
            head = self.chain.request(lambda: self.w3.eth.block_number)
            if head != last_block:  # a block went by without it
                last_block = head
                self._reprice(outgoing)
            if now >= next_look:
                next_look = now + REBROADCAST_AFTER_S
                if not self._known(outgoing.hashes[-1]):
                    self._resend(outgoing.raw)
                self._fill_gap(outgoing.signer.address, nonce)
            time.sleep(self.chain.poll_interval_s)
        self.chain.fees.add(receipt)
        if receipt["status"] != 1:
            raise failure_of(self.chain, receipt)
        return receipt

    def deep_enough(self, receipt: TxReceipt, deadline: float) -> bool:
        """Whether the receipt's block is `confirmations` deep on the canonical chain (waiting for that);
        False when a reorg replaced that block or shortened the chain below it (a devnet's evm_revert
        does both): the caller then looks for the transaction's new receipt, or sends it again."""
        while (
            depth := self.chain.request(lambda: self.w3.eth.block_number) - receipt["blockNumber"]
        ) < self.chain.confirmations:
            if depth < 0:
                return False
            if time.monotonic() > deadline:
                raise TransactionError(f"transaction {receipt['transactionHash'].to_0x_hex()} not confirmed in time")
            time.sleep(self.chain.poll_interval_s)
        try:
            block = self.chain.request(lambda: self.w3.eth.get_block(receipt["blockNumber"]))
        except BlockNotFound:
            return False  # a reorg shortened the chain below the receipt's block: as replaced, below
        # A reorg replaced the block: wait for the transaction's new receipt, if any.
        return bool(block["hash"] == receipt["blockHash"])
