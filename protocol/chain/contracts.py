"""The contracts' ABIs and bytecode, read from forge's build output, and their custom errors."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from eth_abi import decode as abi_decode
from eth_utils import keccak

from protocol.config import CONTRACTS_OUT
from protocol.errors import ChainError

CONTRACT_NAMES = ("DevToken", "StakeManager", "TaskMarket", "TaskMarketLens")


@dataclass(frozen=True)
class ContractArtifact:
    """What web3 needs to deploy and call one contract."""

    name: str
    abi: list[dict[str, Any]]
    bytecode: str
    # Library name -> byte offsets in `bytecode` where its address goes (solc's link references).
    links: dict[str, tuple[int, ...]]

    def linked(self, libraries: dict[str, str]) -> str:
        """The bytecode with each library's deployed address written at its link references."""
        missing = set(self.links) - set(libraries)
        if missing:
            raise ChainError(f"{self.name} needs the address of library {', '.join(sorted(missing))} to deploy")
        code = bytearray.fromhex(self.bytecode.removeprefix("0x"))
        for library, offsets in self.links.items():
            address = bytes.fromhex(libraries[library].removeprefix("0x"))
            for offset in offsets:
                code[offset : offset + 20] = address
        return "0x" + code.hex()


@cache
def artifact(name: str) -> ContractArtifact:
    """Returns the forge artifact of `name`, built by `make build`."""
    path = CONTRACTS_OUT / f"{name}.sol" / f"{name}.json"
    if not path.exists():
        raise ChainError(f"contract artifact {path} is missing: run `make build`")
    data = json.loads(path.read_text())
    bytecode = data["bytecode"]
    links = {
        library: tuple(reference["start"] for reference in references)
        for by_library in bytecode.get("linkReferences", {}).values()
        for library, references in by_library.items()
    }
    # A placeholder (`__$…$__`) is not hex: blank it until `linked` writes the address.
    code = bytecode["object"]
    for offsets in links.values():
        for offset in offsets:
            at = 2 + 2 * offset if code.startswith("0x") else 2 * offset
            code = code[:at] + "00" * 20 + code[at + 40 :]
    return ContractArtifact(name=name, abi=data["abi"], bytecode=code, links=links)


@dataclass(frozen=True)
class ErrorSpec:
    name: str
    input_names: tuple[str, ...]
    input_types: tuple[str, ...]


def _canonical_type(entry: dict[str, Any]) -> str:
    if entry["type"].startswith("tuple"):
        inner = ",".join(_canonical_type(component) for component in entry["components"])
        return f"({inner}){entry['type'][5:]}"
    return str(entry["type"])


@cache
def error_specs() -> dict[bytes, ErrorSpec]:
    """Returns every custom error of the project's contracts (and OpenZeppelin's) by selector."""
    specs: dict[bytes, ErrorSpec] = {}
    for name in CONTRACT_NAMES:
        for entry in artifact(name).abi:
            if entry["type"] != "error":
                continue
            types = tuple(_canonical_type(item) for item in entry["inputs"])
            selector = keccak(text=f"{entry['name']}({','.join(types)})")[:4]
            specs[selector] = ErrorSpec(entry["name"], tuple(item["name"] for item in entry["inputs"]), types)
    return specs


def decode_revert(data: bytes) -> tuple[str, dict[str, Any]] | None:
    """Returns (error name, arguments by name) for revert data of a known custom error."""
    spec = error_specs().get(bytes(data[:4]))
    if spec is None:
        if data[:4] == keccak(text="Error(string)")[:4]:
            return "Error", {"message": abi_decode(["string"], data[4:])[0]}
        return None
    values = abi_decode(list(spec.input_types), bytes(data[4:]))
    return spec.name, dict(zip(spec.input_names, values, strict=True))
