"""What a connection's transactions cost in the chain's coin: the ledger of fees paid, the check that a sender
can pay before anything is sent, and the refusals a node gives for want of funds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.accounts import Signer
from protocol.chain.opstack import receipt_l1_fee
from protocol.errors import InsufficientFunds


def eth(wei: int) -> str:
    """An amount of the chain's coin for people, fees included (six significant figures)."""
    return f"{wei / 10**18:.6g} ETH"


@dataclass
class Fees:
    """What a connection's mined transactions paid, in wei: L2 gas (gas used times its price) and, on an OP
    Stack chain, the L1 data fee its receipts give."""

    transactions: int = 0
    l2_wei: int = 0
    l1_wei: int = 0

    @property
    def total_wei(self) -> int:
        return self.l2_wei + self.l1_wei

    def add(self, receipt: Any) -> None:
        """Counts one mined transaction's receipt."""
        self.transactions += 1
        self.l2_wei += int(receipt["gasUsed"]) * int(receipt.get("effectiveGasPrice", 0))
        self.l1_wei += receipt_l1_fee(receipt)

    def line(self) -> str:
        """One line for people: `fees: 2 transactions, 0.00042 ETH (L2 gas 0.0004 ETH, L1 data fee 2e-05 ETH)`."""
        counted = f"{self.transactions} transaction{'s' if self.transactions != 1 else ''}"
        parts = f"L2 gas {eth(self.l2_wei)}" + (f", L1 data fee {eth(self.l1_wei)}" if self.l1_wei else "")
        return f"fees: {counted}, {eth(self.total_wei)} ({parts})"

    def as_json(self) -> dict[str, Any]:
        return {"transactions": self.transactions, "l2_fee_wei": str(self.l2_wei), "l1_fee_wei": str(self.l1_wei),
                "total_wei": str(self.total_wei)}  # fmt: skip


def _most_cost(transaction: dict[str, Any], l1_fee_wei: int) -> tuple[int, int]:
    """(L2 gas at most, everything at most) a signed transaction may cost its sender: its gas limit at its fee
    cap; that plus the L1 data fee (0 off an OP Stack chain) and its value."""
    price = int(transaction.get("maxFeePerGas", transaction.get("gasPrice", 0)))
    l2 = int(transaction["gas"]) * price
    return l2, l2 + l1_fee_wei + int(transaction.get("value", 0))


def require_funds(signer: Signer, transaction: dict[str, Any], l1_fee_wei: int, balance_wei: int) -> None:
    """InsufficientFunds, before anything is sent, unless `balance_wei` covers the most `transaction` may cost.
    Nodes check the same before they take a transaction (op-geth with the L1 fee)."""
    l2, needed = _most_cost(transaction, l1_fee_wei)
    if balance_wei >= needed:
        return
    fee = f"gas {eth(l2)}" + (f" + L1 data fee {eth(l1_fee_wei)}" if l1_fee_wei else "")
    value = f" + value {eth(int(transaction['value']))}" if transaction.get("value") else ""
    raise InsufficientFunds(
        f"{signer.name} ({signer.address}) holds {eth(balance_wei)}; this transaction may cost up to "
        f"{eth(needed)} ({fee}{value}): fund it first (nothing sent)"
    )


def unfunded(signer: Signer, message: str) -> InsufficientFunds | None:
    """InsufficientFunds where a node's refusal of an estimate says the sender cannot pay (Anvil and geth:
    "insufficient funds"; Hardhat: "doesn't have enough funds", its upfront cost with the L1 fee)."""
    if "insufficient funds" not in message.lower() and "enough funds" not in message.lower():
        return None
    return InsufficientFunds(
        f"{signer.name} ({signer.address}) cannot pay for this transaction: {message} (nothing sent)"
    )
