"""Why a call or a transaction failed, in one line: the contracts' custom errors decoded (with a hint for the
common ones), out of gas told apart from a revert, and a mined failure explained at its true position in its
block (the node's trace of it, else a replay after its block)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hexbytes import HexBytes
from web3.exceptions import ContractLogicError, Web3RPCError
from web3.types import TxReceipt

from protocol.chain.contracts import decode_revert
from protocol.errors import ContractRevert, OutOfGas, TransactionError

if TYPE_CHECKING:
    from protocol.chain.connection import Chain


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
        "TokenTransferMismatch": "the token delivered another amount than was sent: fee-on-transfer tokens are refused",
    }
    hint = hints.get(name)
    return f"contract refused: {name}({shown})" + (f" - {hint}" if hint else "")


def decoded_revert(data: object) -> ContractRevert | None:
    """The contract's custom error in revert data (0x-hex, as calls and traces give it), or None."""
    raw = HexBytes(data) if isinstance(data, str) and data.startswith("0x") else b""
    decoded = decode_revert(raw) if len(raw) >= 4 else None
    if decoded is None:
        return None
    name, args = decoded
    return ContractRevert(name, args, describe_revert(name, args))


def _out_of_gas(tx_hash: HexBytes, receipt: TxReceipt, transaction: Any) -> str:
    return (
        f"transaction {tx_hash.to_0x_hex()} ran out of gas: it used {receipt['gasUsed']:,} of its limit of "
        f"{transaction['gas']:,}"
    )


def rpc_message(error: Web3RPCError) -> str:
    response = getattr(error, "rpc_response", None) or {}
    message = response.get("error", {}).get("message") if isinstance(response, dict) else None
    return str(message or error)


def failure_of(chain: Chain, receipt: TxReceipt) -> TransactionError:
    """Explains a mined transaction that failed, at its true position in its block: from the node's
    trace of that very transaction (Anvil, geth, reth and Erigon serve `debug_traceTransaction`), else
    by replaying its call on the state after its block, which holds the block's earlier transactions
    (a replay on the state before the block would miss whatever they changed, such as a rival's
    finalisation, and find nothing wrong). Gas used up to the limit is out of gas."""
    tx_hash = receipt["transactionHash"]
    transaction = chain.request(lambda: chain.w3.eth.get_transaction(tx_hash))
    traced = _trace(chain, tx_hash)
    if traced is not None and (reverted := decoded_revert(traced.get("output"))) is not None:
        return reverted
    error = str((traced or {}).get("error") or "")
    if "out of gas" in error.lower() or receipt["gasUsed"] >= transaction["gas"]:
        return OutOfGas(_out_of_gas(tx_hash, receipt, transaction))
    if traced is not None:
        return TransactionError(f"transaction {tx_hash.to_0x_hex()} failed: {error or 'no reason given'}")
    call: Any = {key: transaction[key] for key in ("from", "to", "value", "gas") if key in transaction}
    call["data"] = transaction["input"]
    try:
        chain.request(lambda: chain.w3.eth.call(call, block_identifier=receipt["blockNumber"]))
    except ContractLogicError as error:
        return revert_of(error)
    except Web3RPCError as error:
        return TransactionError(f"transaction {tx_hash.to_0x_hex()} failed: {rpc_message(error)}")
    return TransactionError(f"transaction {tx_hash.to_0x_hex()} failed; a replay after its block passes")


def _trace(chain: Chain, tx_hash: HexBytes) -> dict[str, Any] | None:
    """The call tracer's top frame of a mined transaction, or None where the node serves no traces."""
    response = chain.request(
        lambda: chain.w3.provider.make_request(
            "debug_traceTransaction",  # type: ignore[arg-type]
            [tx_hash.to_0x_hex(), {"tracer": "callTracer"}],
        )
    )
    result = response.get("result")
    return dict(result) if isinstance(result, dict) else None


def revert_of(error: ContractLogicError) -> TransactionError:
    """A refused call or estimate: the contract's custom error, decoded, or the node's message."""
    reverted = decoded_revert(error.data)
    return reverted or TransactionError(f"contract refused the call: {error.message or error}")
