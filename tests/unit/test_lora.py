"""LoRA updates: started from the work seed, replayed exactly by a validator, leaving the round's model
as it was, and folded into the next checkpoint as (alpha / r) B A in a canonical order.

Shown failing on broken versions: initialising lora_A with peft's own draw (torch's global generator)
instead of the work seed's generator makes `test_a_lora_update_replays_exactly` fail whenever the
global generator has moved between the two runs (the test moves it); dropping `wrapped.unload()` in
`adapters.attached` fails `test_the_model_is_left_as_it_was`; scaling by alpha instead of alpha / r in
`weight_deltas` fails `test_the_outer_step_folds_the_adapters_product`."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from protocol.artifacts.manifest import own_tensors
from protocol.errors import ConfigError, VerificationError
from protocol.ml.adapters import check_targets, weight_deltas
from protocol.ml.aggregation import aggregate
from protocol.ml.envs.spec import EnvSpec
from protocol.ml.model import LoadedModel
from protocol.ml.training import TrainingSequence, grpo_update
from protocol.work.round import RoundContext


def _lora(spec: EnvSpec, **changes: object) -> EnvSpec:
    lora = spec.model_copy(deep=True)
    lora.training.adapter = lora.training.adapter.model_copy(update={"kind": "lora", **changes})
    lora.training.learning_rate = 1e-3
    return lora


def _sequences(tiny: LoadedModel) -> list[TrainingSequence]:
    encode = tiny.tokenizer.encode
    prompts = [[1, *encode("12+34=")], [1, *encode("5+5=")]]
    answers = [[*encode("46"), 2], [*encode("47"), 2], [*encode("10"), 2], [*encode("11"), 2]]
    return [TrainingSequence(prompts[i // 2], answers[i], 1.0 if i % 2 == 0 else -1.0) for i in range(4)]


def test_a_lora_update_replays_exactly(tiny: LoadedModel, spec: EnvSpec) -> None:
    lora = _lora(spec)
    first = grpo_update(tiny.model, _sequences(tiny), lora.training, 1.0, 0, adapter_seed=b"\x01" * 32)
    torch.rand(1000)  # the global generator moves: the adapter's start must not depend on it
    second = grpo_update(tiny.model, _sequences(tiny), lora.training, 1.0, 0, adapter_seed=b"\x01" * 32)
    other = grpo_update(tiny.model, _sequences(tiny), lora.training, 1.0, 0, adapter_seed=b"\x02" * 32)
    layers = tiny.model.config.num_hidden_layers
    assert sorted(first) == sorted(second) and len(first) == 2 * 2 * layers  # q_proj and v_proj, A and B
    assert all(name.endswith((".lora_A", ".lora_B")) and not name.startswith("base_model") for name in first)
    assert all(torch.equal(first[name], second[name]) for name in first)
    assert any(not torch.equal(first[name], other[name]) for name in first)
    b = first["model.layers.0.self_attn.q_proj.lora_B"]
    assert b.shape == (tiny.model.config.hidden_size, 8) and float(b.abs().sum()) > 0  # B left zero: trained


def test_every_node_of_a_round_starts_from_one_adapter(tiny: LoadedModel, spec: EnvSpec) -> None:
    """A round's nodes start from the same A, so the outer mean of their B·A averages them in one
    subspace; the next round starts elsewhere. Shown failing on a broken version: seeding the start by
    the node's prompt seed (as before) gives the two nodes different A."""
    cid = "bafkreibm6jg3ux5qumhcn2b3flc3tyu6dmlb4xa7u5bf44yegnrjhc4yeq"
    node = RoundContext(31337, "0x" + "00" * 20, 1, 4, "0x" + "11" * 20, b"\x05" * 32, cid, cid, 4)
    other_node, next_round = replace(node, node="0x" + "22" * 20), replace(node, round_index=5)
    assert node.adapter_seed() == other_node.adapter_seed() != next_round.adapter_seed()
    lora = _lora(spec)
    starts = [grpo_update(tiny.model, [], lora.training, 1.0, 0, adapter_seed=context.adapter_seed())
              for context in (node, other_node, next_round)]  # fmt: skip
    a_names = [name for name in starts[0] if name.endswith(".lora_A")]
    assert a_names and all(torch.equal(starts[0][name], starts[1][name]) for name in a_names)
    assert not any(torch.equal(starts[0][name], starts[2][name]) for name in a_names)


def test_the_model_is_left_as_it_was(tiny: LoadedModel, spec: EnvSpec) -> None:
    before = {name: tensor.clone() for name, tensor in own_tensors(tiny.model).items()}
    modules = [name for name, _ in tiny.model.named_modules()]
    grpo_update(tiny.model, _sequences(tiny), _lora(spec).training, 1.0, 0, adapter_seed=b"\x01" * 32)
    assert [name for name, _ in tiny.model.named_modules()] == modules
    assert all(torch.equal(before[name], tensor) for name, tensor in own_tensors(tiny.model).items())
    assert all(parameter.requires_grad for parameter in tiny.model.parameters())


def test_lora_bytes_are_a_small_share_of_a_full_update(tiny: LoadedModel, spec: EnvSpec) -> None:
    lora = grpo_update(tiny.model, _sequences(tiny), _lora(spec).training, 1.0, 0, adapter_seed=b"\x01" * 32)
    full = grpo_update(tiny.model, _sequences(tiny), spec.training, 1.0, 0)
    lora_bytes = sum(t.numel() * t.element_size() for t in lora.values())
    full_bytes = sum(t.numel() * t.element_size() for t in full.values())
    assert lora_bytes < 0.1 * full_bytes, (lora_bytes, full_bytes)


def test_the_outer_step_folds_the_adapters_product(tiny: LoadedModel, spec: EnvSpec) -> None:
    lora = _lora(spec, rank=4, alpha=8)
    first = grpo_update(tiny.model, _sequences(tiny), lora.training, 1.0, 0, adapter_seed=b"\x01" * 32)
    second = grpo_update(tiny.model, _sequences(tiny)[:2], lora.training, 1.0, 0, adapter_seed=b"\x02" * 32)
    checkpoint = own_tensors(tiny.model)
    folded = aggregate(checkpoint, [(7, second), (3, first)], lora.training).state
    in_order = aggregate(checkpoint, [(3, first), (7, second)], lora.training).state
    assert all(torch.equal(folded[name], in_order[name]) for name in checkpoint)  # by submission id
    name = "model.layers.1.self_attn.v_proj"
    expected = checkpoint[f"{name}.weight"] + 0.5 * sum(
        2.0 * (update[f"{name}.lora_B"] @ update[f"{name}.lora_A"]) for update in (first, second)
    )
    assert torch.allclose(folded[f"{name}.weight"], expected, atol=1e-6)
    untouched = "model.layers.1.self_attn.k_proj.weight"
    assert torch.equal(folded[untouched], checkpoint[untouched])
    with pytest.raises(VerificationError, match="not a matching lora_A, lora_B pair"):
        weight_deltas({f"{name}.lora_A": first[f"{name}.lora_A"]}, lora.training.adapter)


def test_targets_the_model_lacks_are_refused(tiny: LoadedModel, spec: EnvSpec) -> None:
    wrong = _lora(spec, target_modules=["q_proj", "c_attn"])
    with pytest.raises(ConfigError, match="LoRA target module 'c_attn' is not in the model"):
        check_targets(tiny.model.config.to_dict(), wrong.training.adapter)
    with pytest.raises(ConfigError, match="c_attn"):
        grpo_update(tiny.model, _sequences(tiny), wrong.training, 1.0, 0, adapter_seed=b"\x01" * 32)
    check_targets(tiny.model.config.to_dict(), _lora(spec).training.adapter)  # q_proj, v_proj: present


def test_a_poisoner_steers_a_lora_update_through_its_b_factor(
    tiny: LoadedModel, spec: EnvSpec, context: RoundContext
) -> None:
    """Reversing both LoRA factors would leave B A as it was (and scaling both squares the factor): the update
    poisoners change `lora_B` only, so the folded change is what they say. Broken version: apply the change to
    every tensor in `node.adversary._steered` and the poisoned change is +400 x the honest one, not -20 x."""
    from node.adversary import POISON_SCALE, adversary_of

    lora = _lora(spec, rank=4, alpha=8)
    update = grpo_update(tiny.model, _sequences(tiny), lora.training, 1.0, 0, adapter_seed=b"\x01" * 32)
    honest = weight_deltas(update, lora.training.adapter)
    poisoner = adversary_of("poisoned-update")
    assert poisoner is not None
    poisoned = weight_deltas(poisoner.corrupt_update(update, context), lora.training.adapter)
    assert any(float(value.abs().sum()) > 0 for value in honest.values())
    for name, value in honest.items():
        assert torch.allclose(poisoned[name], -POISON_SCALE * value, rtol=1e-5, atol=1e-9)
