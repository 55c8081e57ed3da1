"""Seeds derived from chain values, and a counter-based stream of random integers drawn from one.

Everything random in a round is a function of these seeds, computed with keccak over ABI-encoded
values exactly as a contract would, so a validator or an auditor in any language gets the same.
"""

from __future__ import annotations

from eth_abi import encode
from eth_utils import keccak


def prompt_seed(task_id: int, round_index: int, node: str, work_seed: bytes) -> bytes:
    """Returns the seed of a node's prompts in a round: keccak(taskId, round, node, workSeed)."""
    return keccak(encode(["uint256", "uint256", "address", "bytes32"], [task_id, round_index, node, work_seed]))


def sample_seed(prompts_seed: bytes, prompt_index: int, sample_index: int) -> bytes:
    """Returns the sampling seed of one completion: keccak(promptSeed, promptIndex, sampleIndex)."""
    return keccak(encode(["bytes32", "uint256", "uint256"], [prompts_seed, prompt_index, sample_index]))


def label_seed(*labels: str) -> bytes:
    """Returns a seed named by strings (for example the held-out set of an environment)."""
    return keccak(encode(["string"] * len(labels), list(labels)))


class SeedStream:
    """Uniform integers from keccak(seed, counter): reproducible anywhere, no global RNG."""

    def __init__(self, seed: bytes) -> None:
        self.seed = seed
        self.counter = 0

    def below(self, bound: int) -> int:
        """Returns an integer in [0, bound), by rejection so that every value is equally likely."""
        if bound < 1:
            raise ValueError(f"bound must be positive, got {bound}")
        limit = (2**256 // bound) * bound
        while True:
            value = int.from_bytes(keccak(self.seed + self.counter.to_bytes(32, "big")), "big")
            self.counter += 1
            if value < limit:
                return value % bound

    def between(self, low: int, high: int) -> int:
        """Returns an integer in [low, high]."""
        return low + self.below(high - low + 1)
