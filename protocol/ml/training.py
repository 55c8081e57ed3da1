"""Training: the GRPO local update every trainer runs (and a validator replays), and the warm-up.

The update is a pure function of (checkpoint weights, rollouts, hyper-parameters): AdamW steps over
minibatches of the round's sequences in file order, micro-batched in a fixed order, no dropout,
no random draws. Two runs agree up to float summation order (thread count, batch split).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from protocol.ml.adapters import adapter_tensors, attached
from protocol.ml.envs.base import Environment, Problem
from protocol.ml.envs.spec import TrainingSettings
from protocol.ml.model import create_model
from protocol.ml.seeds import label_seed
from protocol.ml.tokenizer import DEFAULT_ALPHABET, CharTokenizer, Tokenizer, prompt_ids

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class TrainingSequence:
    """One completion to learn from: its ids and its advantage."""

    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float


def answer_sequence(tokenizer: Tokenizer, problem: Problem) -> TrainingSequence:
    """A problem's right answer (and the end token) as a sequence to learn from: the warm-up's data."""
    return TrainingSequence(prompt_ids(tokenizer, problem), [*tokenizer.encode(problem.answer), tokenizer.eos_id], 1.0)


def group_advantages(rewards: list[float], group_size: int) -> list[float]:
    """Group-normalised advantages (reward minus its group's mean, over the group's std; 0 if uniform).
    Rewards come in groups of `group_size` consecutive completions of one prompt."""
    if len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    advantages: list[float] = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start : start + group_size]
        mean = sum(group) / group_size
        std = (sum((r - mean) ** 2 for r in group) / group_size) ** 0.5
        advantages.extend((r - mean) / (std + 1e-6) if std > 1e-9 else 0.0 for r in group)
    return advantages


def _batch(sequences: list[TrainingSequence], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded inputs [B, T], completion targets [B, T] and their mask [B, T] (aligned to the logits)."""
    import torch

    inputs = [s.prompt_ids + s.completion_ids[:-1] for s in sequences]
    width = max(len(ids) for ids in inputs)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.int64)
    targets = torch.zeros((len(sequences), width), dtype=torch.int64)
    mask = torch.zeros((len(sequences), width), dtype=torch.float32)
    for row, (sequence, values) in enumerate(zip(sequences, inputs, strict=True)):
        ids[row, : len(values)] = torch.tensor(values)
        start = len(sequence.prompt_ids) - 1  # the logits at this position scored the first completion token
        targets[row, start : start + len(sequence.completion_ids)] = torch.tensor(sequence.completion_ids)
        mask[row, start : start + len(sequence.completion_ids)] = 1.0
    return ids, targets, mask


def _token_logprobs(model: Any, ids: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """Log-probabilities [B, T] of the targets under the model, at the sampling temperature."""
    import torch

    # No attention mask: padding sits after the real tokens, which causal attention never lets them see.
    logits = model(input_ids=ids).logits.float() / temperature  # [B, T, V]
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None])[..., 0]


def weighted_sequences(sequences: list[TrainingSequence], settings: TrainingSettings) -> list[TrainingSequence]:
    """The sequences an update learns from: negative advantages scaled by `negative_weight`; when
    minibatching with no KL term, those left with no advantage are dropped (they carry no gradient and
    would only thin the minibatches). A single full batch keeps them, as schema-1 specs meant."""
    weighted = [
        replace(s, advantage=s.advantage * settings.negative_weight) if s.advantage < 0 else s for s in sequences
    ]
    if settings.kl_weight > 0 or not settings.minibatch_size:
        return weighted
    return [s for s in weighted if s.advantage != 0.0]


def grpo_update(
    model: Any,
    sequences: list[TrainingSequence],
    settings: TrainingSettings,
    temperature: float,
    pad_id: int,
    on_step: Callable[[int, float], None] | None = None,
    adapter_seed: bytes = b"",
) -> dict[str, torch.Tensor]:
    """Returns the update of a GRPO run from the model's weights W; the model is left with W.

    With `adapter.kind` full, the update is the pseudo-gradient Δ = W_local - W (float32, per parameter).
    With lora, it is the trained adapter (`<module>.lora_A|lora_B`, see protocol.ml.adapters), started
    from `adapter_seed`. The sequences (after `weighted_sequences`) are cut into minibatches of
    `minibatch_size` in file order; each of `inner_steps` passes takes one AdamW step per minibatch,
    with the PPO ratio taken against the weights the round started from. A minibatch is split into
    micro-batches of `micro_batch_size` for its forward passes, which changes float summation order only."""
    import torch

    learned = weighted_sequences(sequences, settings)
    if settings.adapter.kind == "lora":
        with attached(model, settings.adapter, adapter_seed) as parameters:
            if learned:
                _optimise(model, parameters, learned, settings, temperature, pad_id, on_step)
            return adapter_tensors(model)
    start = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    if not learned:
        return {name: torch.zeros_like(value, dtype=torch.float32) for name, value in start.items()}
    try:
        _optimise(model, list(model.parameters()), learned, settings, temperature, pad_id, on_step)
        return {name: (parameter.detach() - start[name]).float() for name, parameter in model.named_parameters()}
    finally:
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                parameter.copy_(start[name])


def _optimise(
    model: Any,
    parameters: list[torch.nn.Parameter],
    learned: list[TrainingSequence],
    settings: TrainingSettings,
    temperature: float,
    pad_id: int,
    on_step: Callable[[int, float], None] | None,
) -> None:
    """The GRPO steps of `grpo_update` on `parameters` (the model's weights are changed in place)."""
    import torch

    device = next(model.parameters()).device
    size = settings.minibatch_size or len(learned)
    minibatches = []
    with torch.no_grad():
        for first in range(0, len(learned), size):
            part = learned[first : first + size]
            micro = []
            for at in range(0, len(part), settings.micro_batch_size):
                piece = part[at : at + settings.micro_batch_size]
                ids, targets, mask = (t.to(device) for t in _batch(piece, pad_id))
                reference = _token_logprobs(model, ids, targets, temperature)  # [B, T]: C_r's own, old = reference
                advantages = torch.tensor([s.advantage for s in piece], dtype=torch.float32, device=device)[:, None]
                micro.append((ids, targets, mask, reference, advantages))
            minibatches.append((micro, float(sum(float(m[2].sum()) for m in micro))))
    optimizer = torch.optim.AdamW(parameters, lr=settings.learning_rate, weight_decay=0.0)
    low, high = 1 - settings.clip_epsilon, 1 + settings.clip_epsilon
    for step, (micro, tokens) in enumerate(minibatches * settings.inner_steps):  # passes in order
        optimizer.zero_grad(set_to_none=True)
        step_loss = 0.0
        for ids, targets, mask, reference, advantages in micro:
            logprobs = _token_logprobs(model, ids, targets, temperature)
            ratio = torch.exp(logprobs - reference)
            policy = -torch.minimum(ratio * advantages, ratio.clamp(low, high) * advantages)
            log_gap = reference - logprobs
            kl = torch.exp(log_gap) - log_gap - 1  # k3 estimator of KL(current || reference)
            loss = ((policy + settings.kl_weight * kl) * mask).sum() / max(tokens, 1.0)
            loss.backward()
            step_loss += float(loss.detach())
        optimizer.step()
        if on_step is not None:
            on_step(step, step_loss)


def apply_update(model: Any, delta: dict[str, torch.Tensor], scale: float = 1.0) -> None:
    """Adds `scale * Δ` to the model's weights in place."""
    import torch

    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.add_(delta[name].to(parameter.device, parameter.dtype), alpha=scale)


def supervised_warmup(
    model: Any,
    tokenizer: Tokenizer,
    environment: Environment,
    steps: int,
    seed: int,
    batch_size: int = 64,
    learning_rate: float = 1e-3,
    on_step: Callable[[int, float], None] | None = None,
) -> float:
    """Teaches the model the answer format with cross-entropy on answers; returns the last loss.

    Problems come from a seed of their own (never the held-out set); the loss covers the answer and
    the end token only. A short run leaves the model partly right, so that RL has a signal."""
    import torch

    if steps == 0:
        return float("nan")
    device = next(model.parameters()).device
    problems = environment.problems(label_seed("crucible-warmup", str(seed)), steps * batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 20) * (1 - step / steps))
    model.train()
    loss_value = float("nan")
    for step in range(steps):
        part = problems[step * batch_size : (step + 1) * batch_size]
        sequences = [answer_sequence(tokenizer, p) for p in part]
        ids, targets, mask = (t.to(device) for t in _batch(sequences, tokenizer.pad_id))
        logits = model(input_ids=ids).logits.float()  # [B, T, V]
        losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # [B, T]
        loss = (losses * mask).sum() / mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        loss_value = float(loss.detach())
        if on_step is not None:
            on_step(step, loss_value)
    model.eval()
    return loss_value


def initial_model(
    environment: Environment,
    size: str,
    steps: int,
    seed: int,
    device: str = "cpu",
    on_step: Callable[[int, float], None] | None = None,
) -> tuple[Any, CharTokenizer, float]:
    """A fresh model of a named size (`model.SIZES`) with a character tokenizer covering the
    environment's alphabet, warmed up for `steps` (`on_step(step, loss)` after each); returns the
    model, its tokenizer and the last loss. `crucible model init` and the demo both make theirs here."""
    extra = "".join(sorted(set(environment.alphabet()) - set(DEFAULT_ALPHABET)))
    tokenizer = CharTokenizer(DEFAULT_ALPHABET + extra)
    model: Any = create_model(size, tokenizer, seed).to(device)
    loss = supervised_warmup(model, tokenizer, environment, steps, seed, on_step=on_step)
    return model, tokenizer, loss
