"""Seeded sampling, TOPLOC proof alignment and the GRPO update, on a tiny model."""

from __future__ import annotations

import math

import pytest
import toploc
import torch

from protocol.ml.envs.spec import EnvSpec, SamplingSettings
from protocol.ml.generation import generate
from protocol.ml.inference import prefill, whole_prefill
from protocol.ml.model import LoadedModel, create_model
from protocol.ml.proofs import build_proofs, chunk_count, verify_proofs
from protocol.ml.sampling import _MASK32, _MULTIPLIER, _SALT, gumbel_noise, replay, sample, seed_words
from protocol.ml.seeds import label_seed, prompt_seed, sample_seed
from protocol.ml.tokenizer import prompt_ids
from protocol.ml.training import TrainingSequence, group_advantages, grpo_update

NODE = "0x" + "ab" * 20


def _prompts(tiny: LoadedModel, spec: EnvSpec, count: int) -> tuple[list[list[int]], list[bytes]]:
    seed = prompt_seed(1, 0, NODE, bytes(32))
    problems = spec.env().problems(seed, count)
    return [prompt_ids(tiny.tokenizer, p) for p in problems], [sample_seed(seed, i, 0) for i in range(count)]


def _python_noise(seed: bytes, position: int, token: int) -> float:
    """The same hash in plain Python integers: the tensor version must agree bit for bit."""

    def mix(x: int) -> int:
        x = (((x >> 16) ^ x) * _MULTIPLIER) & _MASK32
        x = (((x >> 16) ^ x) * _MULTIPLIER) & _MASK32
        return (x >> 16) ^ x

    low_word, high_word = seed_words([seed])
    at = mix(mix(mix(low_word) ^ high_word) ^ position)
    high = mix(at ^ token)
    low = mix(high ^ _SALT)
    uniform = (((high << 21) + (low >> 11)) + 0.5) / 2.0**53
    return -math.log(-math.log(uniform))


def test_gumbel_noise_matches_an_independent_integer_implementation() -> None:
    seeds = [label_seed("a"), label_seed("b")]
    noise = gumbel_noise(seeds, torch.tensor([0, 1000]), 300, torch.device("cpu"))
    for row, (seed, position) in enumerate(zip(seeds, (0, 1000), strict=True)):
        for token in (0, 1, 57, 299):
            assert noise[row, token].item() == _python_noise(seed, position, token)
    # A vocabulary of several tiles (2**16 elements of hash state each, 21,845 columns for 3 rows): the
    # columns either side of every tile's edge are hashed with their own token, not their tile's offset.
    seeds.append(label_seed("c"))
    noise = gumbel_noise(seeds, torch.tensor([0, 1000, 7]), 70_000, torch.device("cpu"))
    for row, (seed, position) in enumerate(zip(seeds, (0, 1000, 7), strict=True)):
        for token in (0, 21_844, 21_845, 43_690, 65_535, 69_999):
            assert noise[row, token].item() == _python_noise(seed, position, token)
    # Gumbel(0, 1) has mean Euler's constant.
    assert (
        abs(gumbel_noise([label_seed("c")], torch.tensor([3]), 50_000, torch.device("cpu")).mean().item() - 0.5772)
        < 0.02
    )


def test_same_seed_gives_the_same_tokens_at_any_batch_size(tiny: LoadedModel, spec: EnvSpec) -> None:
    prompts, seeds = _prompts(tiny, spec, 12)
    sampling = SamplingSettings(temperature=1.5, max_new_tokens=10)
    args = (sampling, tiny.tokenizer.eos_id, tiny.tokenizer.pad_id)
    first = [g.completion_ids for g in generate(tiny.model, prompts, seeds, *args, batch_size=12)]
    again = [g.completion_ids for g in generate(tiny.model, prompts, seeds, *args, batch_size=5)]
    assert first == again
    other = [g.completion_ids for g in generate(tiny.model, prompts, [label_seed(str(i)) for i in range(12)], *args)]
    assert other != first


def test_top_k_and_top_p_restrict_the_choice() -> None:
    logits = torch.tensor([[5.0, 4.0, 3.0, -1.0, -2.0]] * 400)
    seeds = [label_seed(str(i)) for i in range(400)]
    positions = torch.zeros(400, dtype=torch.int64)
    assert set(sample(logits, seeds, positions, SamplingSettings(top_k=2)).tolist()) == {0, 1}
    # top-p 0.5 keeps only the first token (it holds ~0.66 of the mass).
    assert set(sample(logits, seeds, positions, SamplingSettings(top_p=0.5)).tolist()) == {0}
    assert len(set(sample(logits, seeds, positions, SamplingSettings()).tolist())) >= 3


def test_honest_proofs_verify_over_a_separate_prefill_aligned_exactly(tiny: LoadedModel, spec: EnvSpec) -> None:
    spec.toploc.decode_batching_size = 4
    prompts, seeds = _prompts(tiny, spec, 8)
    sampling = SamplingSettings(max_new_tokens=12)
    generated = generate(tiny.model, prompts, seeds, sampling, tiny.tokenizer.eos_id, tiny.tokenizer.pad_id)
    passes = prefill(tiny.model, [(p, g.completion_ids) for p, g in zip(prompts, generated, strict=True)], 0)
    for g, recomputed, seed in zip(generated, passes, seeds, strict=True):
        proofs = build_proofs(g.activations, spec.toploc)
        assert len(proofs) == chunk_count(len(g.completion_ids), spec.toploc)
        # The same bytes as toploc's own one-tensor-per-position call.
        rows = list(g.activations.to(torch.bfloat16))
        assert proofs == toploc.build_proofs_bytes(
            rows, spec.toploc.decode_batching_size, spec.toploc.topk, skip_prefill=True
        )
        figures = verify_proofs(recomputed.activations, proofs, spec.toploc)
        assert all(f.exp_mismatches == 0 and f.passes(spec.toploc) for f in figures)
        assert replay(recomputed.logits, seed, g.completion_ids, sampling).mismatches == []
    # Off by one position (the trap: the prefill's last position instead of the one before each token).
    # A broken prefill that sliced [L, L+n) instead of [L-1, L-1+n) would fail the assertions above.
    longest = max(range(8), key=lambda i: len(generated[i].completion_ids))
    g, recomputed = generated[longest], passes[longest]
    shifted = torch.cat([recomputed.activations[1:], recomputed.activations[-1:]])
    assert not all(
        f.passes(spec.toploc) for f in verify_proofs(shifted, build_proofs(g.activations, spec.toploc), spec.toploc)
    )


@pytest.mark.parametrize("micro_batch", [16, 3])
def test_a_prompt_computed_once_gives_each_completion_what_a_whole_pass_gives(
    tiny: LoadedModel, spec: EnvSpec, micro_batch: int
) -> None:
    """Groups of completions sharing a prompt (prompts of different lengths, completions of 1 to 12 tokens,
    groups split across passes when micro_batch is 3, rows out of group order) get the hidden states and
    logits of one whole pass per row, and their proofs verify. A prefill that gave each completion another
    group's prompt cache, or dropped the prompt's last position, fails here (both tried)."""
    prompts, seeds = _prompts(tiny, spec, 4)
    assert len({len(p) for p in prompts}) > 1
    rows = [(prompt, seed + bytes([copy])) for copy in range(4) for prompt, seed in zip(prompts, seeds, strict=True)]
    sampling = SamplingSettings(temperature=1.5, max_new_tokens=12)
    generated = generate(
        tiny.model, [p for p, _ in rows], [s for _, s in rows], sampling, tiny.tokenizer.eos_id, tiny.tokenizer.pad_id
    )
    sequences = [(p, g.completion_ids) for (p, _), g in zip(rows, generated, strict=True)]
    sequences.append((prompts[0], [tiny.tokenizer.eos_id]))  # a one-token completion: the prompt's state alone
    digits = tiny.tokenizer.encode("31415926535897")
    sequences += [(prompts[i % 4], digits[: 2 + 3 * i]) for i in range(5)]  # longer ones, any tokens will do
    assert len({len(c) for _, c in sequences}) > 4
    shared = prefill(tiny.model, sequences, 0, micro_batch)
    whole = whole_prefill(tiny.model, sequences, 0)
    for (_, completion), ours, reference in zip(sequences, shared, whole, strict=True):
        assert ours.activations.shape == reference.activations.shape == (len(completion), tiny.model.config.hidden_size)
        torch.testing.assert_close(ours.activations, reference.activations, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(ours.logits, reference.logits, atol=1e-4, rtol=1e-4)
    for g, ours in zip(generated, shared[: len(generated)], strict=True):
        figures = verify_proofs(ours.activations, build_proofs(g.activations, spec.toploc), spec.toploc)
        assert all(f.exp_mismatches == 0 and f.passes(spec.toploc) for f in figures)


def test_proofs_of_another_model_fail_and_forged_tokens_fail_replay(tiny: LoadedModel, spec: EnvSpec) -> None:
    prompts, seeds = _prompts(tiny, spec, 6)
    sampling = SamplingSettings(max_new_tokens=12)
    other = create_model("tiny", tiny.tokenizer, seed=99)
    theirs = generate(other, prompts, seeds, sampling, tiny.tokenizer.eos_id, tiny.tokenizer.pad_id)
    passes = prefill(tiny.model, [(p, g.completion_ids) for p, g in zip(prompts, theirs, strict=True)], 0)
    for g, recomputed in zip(theirs, passes, strict=True):
        figures = verify_proofs(recomputed.activations, build_proofs(g.activations, spec.toploc), spec.toploc)
        assert not all(f.passes(spec.toploc) for f in figures)
    # Edited tokens: proofs from a real prefill pass would verify, but the seed's sampling disagrees.
    forged = [tiny.tokenizer.encode("7")[0]] * 5 + [tiny.tokenizer.eos_id]
    recomputed = prefill(tiny.model, [(prompts[0], forged)], 0)[0]
    result = replay(recomputed.logits, seeds[0], forged, sampling)
    assert len(result.mismatches) >= 3 and result.largest_margin > 0.5


def test_group_advantages_are_normalised_per_group() -> None:
    advantages = group_advantages([1, 0, 0, 1, 0.5, 0.5, 0.5, 0.5], 4)
    assert advantages[4:] == [0.0] * 4
    assert abs(sum(advantages[:4])) < 1e-9 and abs(advantages[0] - 1.0) < 1e-3
    with pytest.raises(ValueError):
        group_advantages([1, 0, 1], 2)


def test_update_is_deterministic_and_leaves_the_model_unchanged(tiny: LoadedModel, spec: EnvSpec) -> None:
    prompts, _ = _prompts(tiny, spec, 4)
    eos = tiny.tokenizer.eos_id
    answers = [[*tiny.tokenizer.encode(text), eos] for text in ("12", "7", "100", "3")]
    sequences = [
        TrainingSequence(p, a, adv) for p, a, adv in zip(prompts, answers, (1.0, -1.0, 0.5, -0.5), strict=True)
    ]
    before = {name: p.detach().clone() for name, p in tiny.model.named_parameters()}
    first = grpo_update(tiny.model, sequences, spec.training, 1.0, 0)
    second = grpo_update(tiny.model, sequences, spec.training, 1.0, 0)
    spec.training.micro_batch_size = 1
    split = grpo_update(tiny.model, sequences, spec.training, 1.0, 0)
    assert all(torch.equal(p, before[name]) for name, p in tiny.model.named_parameters())
    total = sum(float(d.abs().sum()) for d in first.values())
    assert total > 0
    for name in first:
        assert torch.equal(first[name], second[name])
        # Another batch split only reorders float sums: the relative L2 error stays within the spec's tolerance.
        error = float((first[name] - split[name]).norm()) / max(float(first[name].norm()), 1e-12)
        assert error <= spec.verification.update_tolerance, (name, error)


def _four_sequences(tiny: LoadedModel, spec: EnvSpec, advantages: tuple[float, ...]) -> list[TrainingSequence]:
    prompts, _ = _prompts(tiny, spec, len(advantages))
    eos = tiny.tokenizer.eos_id
    answers = [[*tiny.tokenizer.encode(text), eos] for text in ("12", "7", "100", "3")]
    return [TrainingSequence(p, a, adv) for p, a, adv in zip(prompts, answers, advantages, strict=True)]


def test_negative_weight_scales_what_below_mean_completions_teach(tiny: LoadedModel, spec: EnvSpec) -> None:
    # Broken version that fails: grpo_update ignoring negative_weight (learning from -1.0 at weight 0).
    only_negative = _four_sequences(tiny, spec, (-1.0, -0.5, 0.0, -2.0))
    spec.training.negative_weight = 0.0
    steps: list[int] = []
    nothing = grpo_update(tiny.model, only_negative, spec.training, 1.0, 0, lambda step, loss: steps.append(step))
    assert steps == [] and all(float(d.abs().sum()) == 0.0 for d in nothing.values())
    spec.training.negative_weight = 1.0
    full = grpo_update(tiny.model, only_negative, spec.training, 1.0, 0)
    assert sum(float(d.abs().sum()) for d in full.values()) > 0


def test_minibatches_take_one_step_each_and_change_the_update(tiny: LoadedModel, spec: EnvSpec) -> None:
    # Broken version that fails: minibatch_size ignored (one full-batch step per pass).
    sequences = _four_sequences(tiny, spec, (1.0, 0.5, 2.0, 0.25))
    spec.training.inner_steps = 2

    def run(minibatch: int) -> tuple[list[int], dict[str, torch.Tensor]]:
        spec.training.minibatch_size = minibatch
        steps: list[int] = []
        return steps, grpo_update(tiny.model, sequences, spec.training, 1.0, 0, lambda step, loss: steps.append(step))

    whole_steps, whole = run(0)
    same_steps, same = run(4)
    split_steps, split = run(3)
    assert len(whole_steps) == len(same_steps) == 2  # 2 passes x 1 minibatch
    assert len(split_steps) == 4  # 2 passes x 2 minibatches (3 + 1 sequences)
    assert all(torch.equal(whole[name], same[name]) for name in whole)
    moved = sum(float((whole[name] - split[name]).norm()) for name in whole)
    assert moved > 0
