"""Batched generation with a KV cache: seeded sampling, hidden states kept for TOPLOC.

Prompts are left-padded so every row's next token sits in the last column; positions count only
real tokens, so a padded row computes what it would alone (up to float summation order).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from protocol.ml.envs.spec import SamplingSettings
from protocol.ml.inference import decoder_and_head, padded
from protocol.ml.sampling import sample

if TYPE_CHECKING:
    import torch


@dataclass
class Generated:
    """One completion: its token ids (the end token included when sampled) and hidden states [n, H]."""

    completion_ids: list[int]
    activations: torch.Tensor


def generate(
    model: Any,
    prompts: list[list[int]],
    seeds: list[bytes],
    sampling: SamplingSettings,
    eos_id: int,
    pad_id: int,
    batch_size: int = 64,
    on_batch: Callable[[int], None] | None = None,
    greedy: bool = False,
) -> list[Generated]:
    """Samples one completion per (prompt ids, seed), `batch_size` rows at a time (`greedy`: the most
    likely token instead, for evaluation; seeds are then ignored)."""
    results: list[Generated] = []
    for start in range(0, len(prompts), batch_size):
        rows = slice(start, start + batch_size)
        results.extend(_generate_batch(model, prompts[rows], seeds[rows], sampling, eos_id, pad_id, greedy))
        if on_batch is not None:
            on_batch(len(prompts[rows]))
    return results


def _generate_batch(
    model: Any,
    prompts: list[list[int]],
    seeds: list[bytes],
    sampling: SamplingSettings,
    eos_id: int,
    pad_id: int,
    greedy: bool,
) -> list[Generated]:
    import torch
    from transformers import DynamicCache

    decoder, head = decoder_and_head(model)
    device = next(model.parameters()).device
    batch = len(prompts)
    ids, mask = padded(prompts, pad_id, device, left=True)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, W]
    cache = DynamicCache()
    hidden_steps: list[torch.Tensor] = []  # each [B, H]
    token_steps: list[torch.Tensor] = []  # each [B]
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    lengths = torch.zeros(batch, dtype=torch.int64, device=device)
    with torch.inference_mode():
        out = decoder(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True)
        hidden = out.last_hidden_state[:, -1]  # [B, H]
        next_position = positions[:, -1] + 1  # [B]
        for step in range(sampling.max_new_tokens):
            logits = head(hidden)  # [B, V]
            if greedy:
                tokens = logits.argmax(dim=-1)
            else:
                tokens = sample(logits, seeds, torch.full((batch,), step, dtype=torch.int64), sampling)  # [B]
            tokens = torch.where(finished, torch.full_like(tokens, pad_id), tokens)
            hidden_steps.append(hidden)
            token_steps.append(tokens)
            lengths += (~finished).to(torch.int64)
            finished |= tokens == eos_id
            if step == sampling.max_new_tokens - 1 or bool(finished.all()):
                break
            mask = torch.cat([mask, torch.ones((batch, 1), dtype=mask.dtype, device=device)], dim=1)
            out = decoder(
                input_ids=tokens[:, None],
                attention_mask=mask,
                position_ids=next_position[:, None],
                cache=cache,
                use_cache=True,
            )
            hidden = out.last_hidden_state[:, 0]
            next_position = next_position + 1
    all_hidden = torch.stack(hidden_steps, dim=1).float().cpu()  # [B, steps, H]
    all_tokens = torch.stack(token_steps, dim=1).cpu()  # [B, steps]
    return [
        Generated(completion_ids=all_tokens[row, :n].tolist(), activations=all_hidden[row, :n].clone())
        for row, n in enumerate(lengths.cpu().tolist())
    ]
