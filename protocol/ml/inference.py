"""Forward passes shared by trainers, validators and auditors: the prefill that checks a completion.

For a completion c_0..c_{n-1} after a prompt p_0..p_{L-1}, token c_t was sampled from the hidden
state (the final norm's output, which feeds the LM head) at the position just before it: p_{L-1}
for c_0, c_{t-1} for c_t. A pass over prompt + c_0..c_{n-2} therefore recomputes exactly the n
hidden states and logits generation used; the last token's own hidden state never existed.

A round's completions come in groups that share one prompt. `prefill` computes each distinct prompt
once, keeps its keys and values, and runs every completion of it on that cache, as generation did:
with 8 completions of a 100-token prompt and a dozen new tokens, about a fifth of the positions of
one whole pass per completion (`whole_prefill`, kept as the reference the tests compare against).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass
class Prefill:
    """What one pass recomputes for a completion: hidden states [n, H] and logits [n, V]."""

    activations: torch.Tensor
    logits: torch.Tensor


def decoder_and_head(model: Any) -> tuple[Any, Any]:
    """The model's decoder stack (ending in its final norm) and its LM head."""
    return model.get_decoder(), model.get_output_embeddings()


def padded(rows: Sequence[list[int]], pad_id: int, device: Any, left: bool = False) -> tuple[Any, Any]:
    """Token ids [B, W] and their attention mask, `rows` padded to the longest: on the right (causal attention
    never lets a real position see a pad after it), or on the left (every row ends in the last column)."""
    import torch

    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.int64)
    mask = torch.zeros((len(rows), width), dtype=torch.int64)
    for index, row in enumerate(rows):
        where = slice(width - len(row), width) if left else slice(0, len(row))
        ids[index, where] = torch.tensor(row, dtype=torch.int64)
        mask[index, where] = 1
    return ids.to(device), mask.to(device)


def prefill(
    model: Any, sequences: Sequence[tuple[list[int], list[int]]], pad_id: int, micro_batch: int = 16
) -> list[Prefill]:
    """Recomputes hidden states and logits of (prompt ids, completion ids) pairs: each distinct prompt
    once, then its completions on its cached keys and values, up to `micro_batch` completions a pass."""
    import torch

    decoder, head = decoder_and_head(model)
    device = next(model.parameters()).device
    results: dict[int, Prefill] = {}
    for chunk in _chunks(sequences, micro_batch):
        # Left padding, positions counting real tokens only: every prompt ends in the last column.
        ids, mask = padded([sequences[rows[0]][0] for rows in chunk], pad_id, device, left=True)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        rows = [row for unit_rows in chunk for row in unit_rows]
        units = [unit for unit, unit_rows in enumerate(chunk) for _ in unit_rows]
        owner = torch.tensor(units, device=device)
        tails = [sequences[row][1][:-1] for row in rows]  # what follows the prompt's last position
        with torch.inference_mode():
            from transformers import DynamicCache

            cache = DynamicCache()
            out = decoder(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True)
            last = out.last_hidden_state[:, -1]  # [U, H]: the state each completion's first token came from
            tail_width = max(len(tail) for tail in tails)
            hidden = None
            if tail_width:
                cache.batch_select_indices(owner)  # one copy of the prompt's keys and values per completion
                tail_ids, tail_mask = padded(tails, pad_id, device)
                steps = torch.arange(tail_width, device=device)
                out = decoder(
                    input_ids=tail_ids,
                    attention_mask=torch.cat([mask[owner], tail_mask], dim=1),
                    position_ids=positions[owner, -1:] + 1 + steps,
                    cache=cache,
                    use_cache=True,
                )
                hidden = out.last_hidden_state  # [R, T, H]
            for index, row in enumerate(rows):
                count = len(sequences[row][1])
                first = last[units[index] : units[index] + 1]
                span = first[:count] if hidden is None else torch.cat([first, hidden[index, : count - 1]])[:count]
                results[row] = Prefill(activations=span, logits=head(span))
    return [results[row] for row in range(len(sequences))]


def _chunks(sequences: Sequence[tuple[list[int], list[int]]], micro_batch: int) -> list[list[list[int]]]:
    """Rows grouped by prompt (a group longer than `micro_batch` in pieces), packed into passes of at
    most `micro_batch` completions each (a piece is never split)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for row, (prompt, _) in enumerate(sequences):
        groups.setdefault(tuple(prompt), []).append(row)
    pieces = [
        rows[start : start + micro_batch] for rows in groups.values() for start in range(0, len(rows), micro_batch)
    ]
    chunks: list[list[list[int]]] = []
    for piece in pieces:
        if chunks and sum(len(rows) for rows in chunks[-1]) + len(piece) <= micro_batch:
            chunks[-1].append(piece)
        else:
            chunks.append([piece])
    return chunks


def whole_prefill(
    model: Any, sequences: Sequence[tuple[list[int], list[int]]], pad_id: int, micro_batch: int = 16
) -> list[Prefill]:
    """The reference: one whole pass over prompt + completion per row, the prompt recomputed each time."""
    import torch

    decoder, head = decoder_and_head(model)
    device = next(model.parameters()).device
    results: list[Prefill] = []
    for start in range(0, len(sequences), micro_batch):
        batch = sequences[start : start + micro_batch]
        ids, mask = padded([prompt + completion[:-1] for prompt, completion in batch], pad_id, device)
        with torch.inference_mode():
            hidden = decoder(input_ids=ids, attention_mask=mask).last_hidden_state  # [B, T, H]
            for row, (prompt, completion) in enumerate(batch):
                span = hidden[row, len(prompt) - 1 : len(prompt) - 1 + len(completion)]  # [n, H]
                results.append(Prefill(activations=span, logits=head(span)))
    return results
