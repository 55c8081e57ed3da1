"""Fails when a contract has less than the given headroom under the EIP-170 code size limit.

Usage: python3 scripts/headroom.py SIZES.json MIN_BYTES CONTRACT...  (SIZES.json from `forge build --sizes --json`)
Prints each contract's size and headroom; exits 1 naming the first one below MIN_BYTES.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    path, least, names = argv[0], int(argv[1]), argv[2:]
    with open(path, encoding="utf-8") as handle:
        sizes = json.load(handle)
    short = []
    for name in names:
        if name not in sizes:
            print(f"headroom: no contract {name} in {path}", file=sys.stderr)
            return 1
        size, margin = sizes[name]["runtime_size"], sizes[name]["runtime_margin"]
        print(f"{name}: {size:,} bytes, {margin:,} under the 24,576-byte limit")
        if margin < least:
            short.append(f"{name} has {margin:,} bytes of headroom, under the {least:,} the build requires")
    for line in short:
        print(f"headroom: {line}: move code out of it (docs/contracts.md)", file=sys.stderr)
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
