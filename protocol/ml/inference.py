"""Forward passes shared by trainers, validators and auditors: the prefill that checks a completion.

For a completion c_0..c_{n-1} after a prompt p_0..p_{L-1}, token c_t was sampled from the hidden
state (the final norm's output, which feeds the LM head) at the position just before it: p_{L-1}
for c_0, c_{t-1} for c_t. One pass over prompt + c_0..c_{n-2} therefore recomputes exactly the n
hidden states and logits generation used; the last token's own hidden state never existed.
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


def prefill(
    model: Any, sequences: Sequence[tuple[list[int], list[int]]], pad_id: int, micro_batch: int = 16
) -> list[Prefill]:
    """Recomputes hidden states and logits of (prompt ids, completion ids) pairs, batch by batch."""
    import torch

    decoder, head = decoder_and_head(model)
    device = next(model.parameters()).device
    results: list[Prefill] = []
    for start in range(0, len(sequences), micro_batch):
        batch = sequences[start : start + micro_batch]
        inputs = [prompt + completion[:-1] for prompt, completion in batch]
        width = max(len(ids) for ids in inputs)
        # Right padding: causal attention never lets a real position see a pad after it.
        ids = torch.full((len(batch), width), pad_id, dtype=torch.int64)
        mask = torch.zeros((len(batch), width), dtype=torch.int64)
        for row, sequence in enumerate(inputs):
            ids[row, : len(sequence)] = torch.tensor(sequence)
            mask[row, : len(sequence)] = 1
        with torch.inference_mode():
            hidden = decoder(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state  # [B, T, H]
            for row, (prompt, completion) in enumerate(batch):
                span = hidden[row, len(prompt) - 1 : len(prompt) - 1 + len(completion)]  # [n, H]
                results.append(Prefill(activations=span, logits=head(span)))
    return results
