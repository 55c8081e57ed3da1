"""A real Hugging Face model end to end without a chain: SmolLM2-135M-Instruct (chat template, tied
embeddings, 49,152 tokens) on a reasoning-gym dataset with LoRA updates. Honest work passes every
check; each cheat fails the check meant for it; a published checkpoint rebuilds model, tokenizer and
chat template from its manifest alone; the outer step folds the adapters into the next checkpoint.
Small on purpose: 2 prompts x 4 completions of at most 8 tokens (the big figures are in bench/).

Shown failing on a broken version: leaving `chat_template.jinja` out of `TOKENIZER_FILES` makes the
checkpoint's tokenizer build prompts without the template, and `test_a_published_checkpoint_...` fails
on the prompt ids; storing both tied names (`model.state_dict()` in `save_hf_model`) fails its
tensor-count assertion."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.models import smollm2_folder
from test_checks import check

from node.adversary import adversary_of
from node.work import produce_work
from protocol.artifacts.manifest import load_manifest
from protocol.artifacts.store import LocalStore
from protocol.ml.aggregation import publish_next_checkpoint
from protocol.ml.envs.spec import EnvSpec, parse_spec
from protocol.ml.model import LoadedModel, load_checkpoint, load_folder, publish
from protocol.ml.tokenizer import prompt_ids
from protocol.work.round import RoundContext

SPEC = b"""{"environment": "reasoning-gym/chain_sum",
  "params": {"answer": "last_number", "config": {"min_terms": 2, "max_terms": 2, "max_digits": 1}},
  "sampling": {"max_new_tokens": 8, "temperature": 0.7},
  "training": {"prompts_per_round": 2, "group_size": 4, "learning_rate": 0.001,
               "adapter": {"kind": "lora", "rank": 4, "alpha": 8}}}"""


@pytest.fixture(scope="module")
def smol() -> LoadedModel:
    return load_folder(smollm2_folder())


@pytest.fixture
def real_spec() -> EnvSpec:
    return parse_spec(SPEC, "test spec")


def test_honest_real_model_work_passes_every_check(
    smol: LoadedModel, real_spec: EnvSpec, context: RoundContext
) -> None:
    work = produce_work(smol, real_spec, context)
    sample = work.rollouts.samples[0]
    assert smol.tokenizer.decode(sample.prompt_ids).startswith("system\n")  # through the chat template
    assert all(name.endswith((".lora_A", ".lora_B")) for name in work.update)
    rewards = [sample.reward for sample in work.rollouts.samples]
    assert 0 < sum(rewards) < len(rewards), rewards  # some right, some wrong: the update learns something
    assert any(float(tensor.abs().sum()) > 0 for name, tensor in work.update.items() if name.endswith("lora_B"))
    verdict = check(work, smol, real_spec, context)
    assert verdict.valid, [r.as_json() for r in verdict.results if not r.passed]
    figures = {r.check: r.figures for r in verdict.results}
    assert figures["sampling"]["mismatches"] == 0 and figures["update"]["max_relative_error"] <= 0.05


@pytest.mark.parametrize(
    ("name", "caught_by"),
    [("forged-tokens", {"sampling"}), ("inflated-rewards", {"rewards"}), ("poisoned-update", {"update"})],
)
def test_each_cheat_fails_its_check_on_the_real_model(
    smol: LoadedModel, real_spec: EnvSpec, context: RoundContext, name: str, caught_by: set[str]
) -> None:
    verdict = check(produce_work(smol, real_spec, context, adversary=adversary_of(name)), smol, real_spec, context)
    assert verdict.failed_check in caught_by, verdict.results[-1].as_json()


def test_a_published_checkpoint_rebuilds_model_tokenizer_and_template(
    smol: LoadedModel, real_spec: EnvSpec, context: RoundContext, tmp_path: Path
) -> None:
    store = LocalStore(tmp_path / "store")
    cid = publish(smollm2_folder(), store)
    manifest = load_manifest(cid, store)
    files = manifest.model_config_data["crucible_tokenizer"]["files"]  # type: ignore[index]
    assert {"tokenizer.json", "chat_template.jinja"} <= set(files)
    names = manifest.tensor_names()
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names  # tied: stored once
    assert len(names) == len({id(p) for p in smol.model.parameters()})
    loaded = load_checkpoint(cid, store)
    problem = real_spec.env().problems(b"\x05" * 32, 1)[0]
    assert prompt_ids(loaded.tokenizer, problem) == prompt_ids(smol.tokenizer, problem)
    ids = torch.tensor([prompt_ids(smol.tokenizer, problem)])
    with torch.inference_mode():
        assert torch.equal(loaded.model(input_ids=ids).logits, smol.model(input_ids=ids).logits)
    # The outer step: the adapters' product lands in the adapted weights, nowhere else.
    work = produce_work(loaded, real_spec, context)
    next_cid = publish_next_checkpoint(loaded, [(1, work.update)], real_spec.training, store)
    after = load_checkpoint(next_cid, store)
    before_state, after_state = loaded.model.state_dict(), after.model.state_dict()
    changed = {name for name in before_state if not torch.equal(before_state[name], after_state[name])}
    assert changed and all(name.endswith(("q_proj.weight", "v_proj.weight")) for name in changed)
