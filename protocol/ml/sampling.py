"""Seeded sampling that anyone can replay from logits alone, on any device.

Each token is `argmax(filtered(logits / temperature) + gumbel)` where the Gumbel noise of token v
at completion position t comes from a counter-based hash of (sequence seed, t, v). The hash uses
only 64-bit integer operations whose products stay below 2**63 (no overflow, so CPU and GPU agree
bit for bit), and the noise and scores are float64. Given the logits of a prefill pass, a validator
recomputes every token; differences in float summation order can flip only near ties, and the
replay reports the score margin of each mismatch so that near ties can be told from forgeries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from protocol.ml.envs.spec import SamplingSettings

if TYPE_CHECKING:
    import torch

_MASK32 = 0xFFFFFFFF
_MULTIPLIER = 0x45D9F3B  # < 2**27: a 32-bit value times it stays below 2**59
_SALT = 0x68E31DA4


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (values in [0, 2**32) held in int64)."""
    return _mix32_(x.clone())


def _mix32_(x: torch.Tensor) -> torch.Tensor:
    """`_mix32` in place, on `x` itself (no temporaries)."""
    for _ in range(2):
        x ^= x >> 16
        x *= _MULTIPLIER
        x &= _MASK32
    x ^= x >> 16
    return x


def seed_words(seeds: list[bytes]) -> tuple[int, ...]:
    """The two 32-bit words of each 32-byte seed that key its noise, flattened."""
    return tuple(int.from_bytes(seed[i : i + 4], "big") for seed in seeds for i in (0, 4))


# Elements of int64 hash state a tile works on (512 KiB): small enough to stay in a core's cache. The whole
# [B, V] at once streamed a dozen 100-MB temporaries through memory and took 7x as long, for the same bits.
_TILE = 1 << 16


def gumbel_noise(seeds: list[bytes], positions: torch.Tensor, vocab_size: int, device: torch.device) -> torch.Tensor:
    """Returns Gumbel noise [batch, vocab] (float64) for each sequence's seed at its position."""
    import torch

    words = torch.tensor(seed_words(seeds), dtype=torch.int64, device=device).view(-1, 2)  # [B, 2]
    key = _mix32(_mix32(words[:, 0]) ^ words[:, 1])  # [B]
    at = _mix32(key ^ (positions.to(device=device, dtype=torch.int64) & _MASK32))  # [B]
    tokens = torch.arange(vocab_size, dtype=torch.int64, device=device)  # [V]
    noise = torch.empty((len(seeds), vocab_size), dtype=torch.float64, device=device)
    width = max(1, _TILE // max(1, len(seeds)))
    for first in range(0, vocab_size, width):
        high = _mix32_(at[:, None] ^ tokens[None, first : first + width])  # [B, w]
        low = _mix32_(high ^ _SALT)
        bits53 = high.bitwise_left_shift_(21).add_(low.bitwise_right_shift_(11))  # < 2**53: exact in float64
        uniform = noise[:, first : first + width].copy_(bits53).add_(0.5).div_(2.0**53)  # in (0, 1)
        uniform.log_().neg_().log_().neg_()  # -log(-log(u))
    return noise


def filtered_scores(logits: torch.Tensor, settings: SamplingSettings) -> torch.Tensor:
    """Returns logits/temperature (float64) with tokens outside top-k and top-p set to -inf. [B, V]."""
    import torch

    scores = logits.to(torch.float64) / settings.temperature
    vocab = scores.shape[-1]
    if settings.top_k and settings.top_k < vocab:
        kth = torch.topk(scores, settings.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if settings.top_p < 1.0:
        ordered, order = torch.sort(scores, dim=-1, descending=True)
        probabilities = torch.softmax(ordered, dim=-1)
        before = torch.cumsum(probabilities, dim=-1) - probabilities  # mass of the tokens ranked above
        drop_sorted = before > settings.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores


def sample(
    logits: torch.Tensor, seeds: list[bytes], positions: torch.Tensor, settings: SamplingSettings
) -> torch.Tensor:
    """Returns the seeded sample of each row of `logits` [B, V] at its completion position: tokens [B]."""
    noise = gumbel_noise(seeds, positions, logits.shape[-1], logits.device)
    return (filtered_scores(logits, settings) + noise).argmax(dim=-1)


@dataclass
class SamplingReplay:
    """How a completion compares with the tokens its seed gives under some logits."""

    tokens: int
    mismatches: list[int] = field(default_factory=list)  # completion positions that disagree
    margins: list[float] = field(default_factory=list)  # replay winner's score minus the claimed token's

    @property
    def largest_margin(self) -> float:
        """The widest disagreement (0 when none): a near tie is small, a forged token large or infinite."""
        return max(self.margins, default=0.0)


def replay(logits: torch.Tensor, seed: bytes, tokens: list[int], settings: SamplingSettings) -> SamplingReplay:
    """Replays one completion's sampling from its logits [n, V] (row t scored token t)."""
    return replay_many([logits], [seed], [tokens], settings)[0]


def replay_many(
    logits: list[torch.Tensor],
    seeds: list[bytes],
    tokens: list[list[int]],
    settings: SamplingSettings,
    rows_per_pass: int = 256,
) -> list[SamplingReplay]:
    """Replays many completions: each logits [n_i, V] with its seed and its n_i claimed tokens. Rows
    are scored `rows_per_pass` at a time (float64 scores and noise over a 49,152-token vocabulary are
    400 KB a row), which changes nothing but memory: each row is scored on its own."""
    import torch

    for rows, claimed in zip(logits, tokens, strict=True):
        if rows.shape[0] != len(claimed):
            raise ValueError(f"{rows.shape[0]} rows of logits for {len(claimed)} tokens")
    results = [SamplingReplay(tokens=len(claimed)) for claimed in tokens]
    if not logits:
        return results
    stacked = torch.cat(logits)  # [sum n_i, V]
    row_seeds = [seed for seed, claimed in zip(seeds, tokens, strict=True) for _ in claimed]
    positions = torch.cat([torch.arange(len(claimed), dtype=torch.int64) for claimed in tokens])
    claimed_all = torch.tensor([t for claimed in tokens for t in claimed], dtype=torch.int64, device=stacked.device)
    owner = [index for index, claimed in enumerate(tokens) for _ in claimed]
    offsets = torch.cumsum(torch.tensor([0] + [len(c) for c in tokens]), 0).tolist()
    for first in range(0, stacked.shape[0], rows_per_pass):
        part = slice(first, first + rows_per_pass)
        perturbed = filtered_scores(stacked[part], settings) + gumbel_noise(
            row_seeds[part], positions[part], stacked.shape[-1], stacked.device
        )
        winners = perturbed.argmax(dim=-1)
        claimed_part = claimed_all[part]
        for local in torch.nonzero(winners != claimed_part).flatten().tolist():
            row = first + local
            margin = float(perturbed[local, winners[local]] - perturbed[local, claimed_part[local]])
            result = results[owner[row]]
            result.mismatches.append(row - offsets[owner[row]])
            result.margins.append(margin)
    return results
