"""Contract view calls with the ABI work done once per function, not once per call.

web3's `ContractFunction.call()` looks the function up in the contract's whole ABI on every call (hashing
every function's selector to validate it), normalises the arguments and the result through generic tree
walks, and builds a new named-tuple class for every struct it returns: about 3.8 ms of CPU a call here,
three times the request itself. A role process makes several such calls at every block, so that was most
of an idle node's or validator's CPU. `ViewCodec` keeps a function's selector, its argument and result
types and its struct classes, and gives what web3 gives: addresses checksummed, structs (and several
outputs) as named tuples with the ABI's names, arrays as lists, other values as eth_abi decodes them.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from eth_abi import decode, encode
from eth_utils import function_abi_to_4byte_selector, to_checksum_address

Shape = Callable[[Any], Any]


def _type_of(entry: dict[str, Any]) -> str:
    """An ABI entry's canonical type ("(uint256,address)[]" for an array of structs)."""
    kind = str(entry["type"])
    if kind.startswith("tuple"):
        return "(" + ",".join(_type_of(c) for c in entry["components"]) + ")" + kind[len("tuple") :]
    return kind


def _shape_of(entry: dict[str, Any]) -> Shape:
    """How to turn eth_abi's value of this entry into web3's."""
    kind = str(entry["type"])
    if kind.endswith("]"):
        inner = _shape_of({**entry, "type": kind[: kind.rindex("[")]})
        return lambda value: [inner(item) for item in value]
    if kind == "tuple":
        names = [str(c["name"]) for c in entry["components"]]
        parts = [_shape_of(c) for c in entry["components"]]
        struct = namedtuple("ABIDecodedNamedTuple", names, rename=True)  # type: ignore[misc]
        return lambda value: struct(*(part(item) for part, item in zip(parts, value, strict=True)))
    if kind == "address":
        return to_checksum_address
    return _same


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class ViewCodec:
    """One view function's calldata and result, from its ABI entry."""

    selector: bytes
    inputs: list[str]
    outputs: list[str]
    shapes: list[Shape]
    several: Any  # the named tuple of a function's outputs, when it has more than one

    @classmethod
    def of(cls, abi: dict[str, Any]) -> ViewCodec:
        outputs = list(abi.get("outputs", []))
        return cls(
            function_abi_to_4byte_selector(abi),  # type: ignore[arg-type]
            [_type_of(entry) for entry in abi.get("inputs", [])],
            [_type_of(entry) for entry in outputs],
            [_shape_of(entry) for entry in outputs],
            namedtuple("ABIDecodedNamedTuple", [str(e.get("name", "")) for e in outputs], rename=True),
        )

    def calldata(self, args: Sequence[Any]) -> bytes:
        return self.selector + encode(self.inputs, list(args))

    def result(self, data: bytes) -> Any:
        """The decoded result: the value itself when the function returns one, else a named tuple of them."""
        values = [shape(value) for shape, value in zip(self.shapes, decode(self.outputs, data), strict=True)]
        return values[0] if len(values) == 1 else self.several(*values)
