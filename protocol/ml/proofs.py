"""TOPLOC proofs of a completion's hidden states, built and verified with Prime Intellect's `toploc`.

A completion of n tokens has n hidden states (see protocol.ml.inference); they are proven in chunks
of `decode_batching_size` positions with `skip_prefill=True`: the prompt is derived from chain
seeds, so what needs proving is the states that chose each generated token. Activations are
rounded to bfloat16 before proving and verifying, the precision TOPLOC's figures are defined in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from eth_utils import keccak

from protocol.errors import VerificationError
from protocol.ml.envs.spec import ToplocSettings

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class ChunkFigures:
    """TOPLOC's measurements of one chunk."""

    exp_mismatches: int
    mantissa_err_mean: float
    mantissa_err_median: float

    def passes(self, settings: ToplocSettings) -> bool:
        """Whether the chunk is within the thresholds."""
        return (
            self.exp_mismatches <= settings.max_exp_mismatches
            and self.mantissa_err_mean <= settings.max_mantissa_err_mean
            and self.mantissa_err_median <= settings.max_mantissa_err_median
        )


# A proof is toploc's ProofPoly bytes: a big-endian 16-bit modulus, then `topk` 16-bit coefficients.
# toploc picks the modulus in (2**15, 65497]; a zero one makes its C++ verifier divide by zero and
# kill the process (SIGFPE), so proof bytes are checked before toploc ever sees them.
_MODULUS_RANGE = (2**15 + 1, 65497)


def proof_problem(proof: bytes, settings: ToplocSettings) -> str | None:
    """Why `proof` is not a well-formed proof for these settings (None when it is)."""
    if len(proof) != 2 + 2 * settings.topk:
        return f"a proof of {len(proof)} bytes, not {2 + 2 * settings.topk}"
    modulus = int.from_bytes(proof[:2], "big")
    if not _MODULUS_RANGE[0] <= modulus <= _MODULUS_RANGE[1]:
        return f"a proof modulus of {modulus}, outside {_MODULUS_RANGE[0]}..{_MODULUS_RANGE[1]}"
    return None


def chunk_count(tokens: int, settings: ToplocSettings) -> int:
    """Proofs a completion of `tokens` tokens carries."""
    return -(-tokens // settings.decode_batching_size)


def _checked(activations: torch.Tensor, settings: ToplocSettings) -> torch.Tensor:
    import torch

    if activations.dim() != 2 or activations.shape[0] == 0:
        raise VerificationError(f"activations must be [tokens, hidden], got {list(activations.shape)}")
    if activations.shape[1] < settings.topk:
        raise VerificationError(f"hidden size {activations.shape[1]} is below TOPLOC's top-k {settings.topk}")
    return activations.detach().to(torch.bfloat16).contiguous()


def build_proofs(activations: torch.Tensor, settings: ToplocSettings) -> list[bytes]:
    """Returns the proofs of a completion's hidden states [n, H], one per chunk."""
    import toploc

    rows = _checked(activations, settings)
    # Handing toploc whole chunks (one flat tensor per chunk, batching 1) gives the same proofs as
    # one tensor per position with batching `decode_batching_size`, without its per-row concatenation.
    size = settings.decode_batching_size
    chunks = [rows[start : start + size].reshape(-1) for start in range(0, rows.shape[0], size)]
    proofs = list(toploc.build_proofs_bytes(chunks, 1, settings.topk, skip_prefill=True))
    # toploc logs an error and returns null proofs when building fails: never send those.
    for proof in proofs:
        problem = proof_problem(proof, settings)
        if problem:
            raise VerificationError(f"toploc built {problem}")
    return proofs


def verify_proofs(activations: torch.Tensor, proofs: list[bytes], settings: ToplocSettings) -> list[ChunkFigures]:
    """Returns TOPLOC's figures for each chunk of recomputed hidden states [n, H] against the proofs."""
    import toploc

    rows = _checked(activations, settings).cpu()
    if len(proofs) != chunk_count(rows.shape[0], settings):
        raise VerificationError(f"{len(proofs)} proofs for {chunk_count(rows.shape[0], settings)} chunks")
    for proof in proofs:
        problem = proof_problem(proof, settings)
        if problem:
            raise VerificationError(problem)
    results = toploc.verify_proofs_bytes(rows, proofs, settings.decode_batching_size, settings.topk, skip_prefill=True)
    return [ChunkFigures(r.exp_mismatches, float(r.mant_err_mean), float(r.mant_err_median)) for r in results]


def proofs_digest(proofs_per_sample: list[list[bytes]]) -> bytes:
    """The digest `submitWork` commits to: keccak over each sample's proof count and length-prefixed proofs."""
    parts = [
        len(proofs).to_bytes(4, "big") + b"".join(len(p).to_bytes(4, "big") + p for p in proofs)
        for proofs in proofs_per_sample
    ]
    return keccak(len(proofs_per_sample).to_bytes(4, "big") + b"".join(parts))
