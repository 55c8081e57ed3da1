"""An OP Stack chain's L1 data fee: every transaction pays, beside its L2 gas, for its bytes posted to L1.

The GasPriceOracle predeploy prices a transaction's bytes (`getL1Fee`) from the L1 fee parameters the
L1Block predeploy holds (Ecotone/Fjord: the L1 base fee, the blob base fee and their two scalars); receipts
carry what was charged (`l1Fee`). Where the oracle has no code there is no L1 fee.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eth_abi import decode, encode
from eth_utils import function_signature_to_4byte_selector

from protocol.errors import ChainError, ConfigError

GAS_PRICE_ORACLE = "0x420000000000000000000000000000000000000F"
L1_BLOCK = "0x4200000000000000000000000000000000000015"
_GET_L1_FEE = function_signature_to_4byte_selector("getL1Fee(bytes)")
# The L1Block predeploy's storage (Ecotone layout): slot 1 the L1 base fee; slot 3 packs, from the low
# end, sequenceNumber (uint64), blobBaseFeeScalar (uint32), baseFeeScalar (uint32); slot 7 the blob base fee.
_BASE_FEE_SLOT, _SCALARS_SLOT, _BLOB_BASE_FEE_SLOT = 1, 3, 7


@dataclass(frozen=True)
class L1FeeParams:
    """The L1 fee parameters an OP Stack chain's sequencer writes into L1Block each L1 block."""

    l1_base_fee_wei: int
    blob_base_fee_wei: int
    base_fee_scalar: int
    blob_base_fee_scalar: int

    def describe(self, scalars: bool = False) -> str:
        """`L1 base fee 10 gwei (scalar 5,227), blob base fee 1 gwei (scalar 1,014,213)`, scalars if asked."""
        base = f" (scalar {self.base_fee_scalar:,})" if scalars else ""
        blob = f" (scalar {self.blob_base_fee_scalar:,})" if scalars else ""
        return (f"L1 base fee {self.l1_base_fee_wei / 1e9:.6g} gwei{base}, "
                f"blob base fee {self.blob_base_fee_wei / 1e9:.6g} gwei{blob}")  # fmt: skip

    def as_json(self) -> dict[str, Any]:
        return {"l1_base_fee_wei": str(self.l1_base_fee_wei), "blob_base_fee_wei": str(self.blob_base_fee_wei),
                "base_fee_scalar": self.base_fee_scalar, "blob_base_fee_scalar": self.blob_base_fee_scalar}  # fmt: skip


# What a devnet's OP Stack chain starts with (Hardhat's starts at 0, no fee at all): OP Mainnet's Ecotone scalars,
# an L1 base fee of 10 gwei and a blob base fee of 1 gwei (a busy L1: both are often far lower).
DEVNET_L1_FEE = L1FeeParams(
    l1_base_fee_wei=10 * 10**9, blob_base_fee_wei=10**9, base_fee_scalar=5_227, blob_base_fee_scalar=1_014_213
)


def read_l1_fee_params(w3: Any) -> L1FeeParams:
    """The L1 fee parameters the chain's oracle prices with now."""

    def value(signature: str) -> int:
        result = w3.eth.call(
            {"to": GAS_PRICE_ORACLE, "data": "0x" + function_signature_to_4byte_selector(signature).hex()}
        )
        return int(decode(["uint256"], bytes(result))[0])

    return L1FeeParams(value("l1BaseFee()"), value("blobBaseFee()"), value("baseFeeScalar()"),
                       value("blobBaseFeeScalar()"))  # fmt: skip


def l1_fee_of_gas(l1_gas: int, params: L1FeeParams) -> int:
    """The L1 data fee, in wei, of `l1_gas` L1 data gas (16 a compressed byte) at `params`: the Ecotone and
    Fjord pricing, `l1_gas * (16 * baseFeeScalar * l1BaseFee + blobBaseFeeScalar * blobBaseFee) / (16 * 10**6)`."""
    scaled = (
        16 * params.base_fee_scalar * params.l1_base_fee_wei + params.blob_base_fee_scalar * params.blob_base_fee_wei
    )
    return l1_gas * scaled // (16 * 10**6)


def has_l1_fee(w3: Any) -> bool:
    """Whether the chain charges an L1 data fee (the GasPriceOracle predeploy has code)."""
    return len(w3.eth.get_code(GAS_PRICE_ORACLE)) > 0


def l1_fee(w3: Any, signed: bytes) -> int:
    """The L1 data fee the oracle charges for a signed transaction's bytes, in wei (what the receipt's
    `l1Fee` will say, given the same L1 parameters when it is mined)."""
    data = _GET_L1_FEE + encode(["bytes"], [signed])
    result = w3.eth.call({"to": GAS_PRICE_ORACLE, "data": "0x" + data.hex()})
    return int(decode(["uint256"], bytes(result))[0])


def require_l1_fee(w3: Any, rpc_url: str) -> None:
    """A ConfigError unless the chain has the OP Stack's GasPriceOracle (for what asks for L1 fees)."""
    if not has_l1_fee(w3):
        raise ConfigError(
            f"{rpc_url} has no OP Stack GasPriceOracle at {GAS_PRICE_ORACLE}: it charges no L1 data fee "
            "(on the devnet: `crucible devnet up --client hardhat --chain-type op`)"
        )


def l1_fee_storage(params: L1FeeParams) -> list[list[str]]:
    """The `hardhat_setStorageAt` parameters (address, slot, 32-byte word) that write `params` into L1Block."""
    scalars = (params.base_fee_scalar << 96) | (params.blob_base_fee_scalar << 64)
    words = ((_BASE_FEE_SLOT, params.l1_base_fee_wei), (_SCALARS_SLOT, scalars),
             (_BLOB_BASE_FEE_SLOT, params.blob_base_fee_wei))  # fmt: skip
    return [[L1_BLOCK, hex(slot), "0x" + f"{value:064x}"] for slot, value in words]


def set_l1_fee_params(w3: Any, params: L1FeeParams) -> None:
    """Writes L1 fee parameters into a devnet's L1Block predeploy (Hardhat's `op` chain starts them at 0)."""
    for word in l1_fee_storage(params):
        response = w3.provider.make_request("hardhat_setStorageAt", word)
        if "error" in response:
            raise ChainError(f"could not set the L1 fee parameters: {response['error'].get('message')}")


def receipt_field(receipt: Any, name: str) -> int:
    """A receipt's OP Stack field (`l1Fee`, `l1GasUsed`), 0 where it has none: a number or a hex string."""
    value = receipt.get(name) if hasattr(receipt, "get") else None
    if value is None:
        return 0
    return int(value, 16) if isinstance(value, str) else int(value)


def receipt_l1_fee(receipt: Any) -> int:
    """The L1 data fee a receipt says was charged (0 where it says none)."""
    return receipt_field(receipt, "l1Fee")
