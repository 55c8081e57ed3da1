"""Environments, specs, seeds and the character tokenizer."""

from __future__ import annotations

import json

import pytest

from protocol.errors import ConfigError
from protocol.ml.envs.base import Problem
from protocol.ml.envs.registry import environment_of
from protocol.ml.envs.spec import default_spec, parse_spec
from protocol.ml.seeds import SeedStream, label_seed, prompt_seed, sample_seed
from protocol.ml.tokenizer import CharTokenizer, completion_text, prompt_ids

NODE = "0x" + "ab" * 20


def test_prompts_are_a_function_of_task_round_node_and_work_seed() -> None:
    environment = environment_of("arithmetic")
    seed = prompt_seed(1, 0, NODE, bytes(32))
    assert environment.problems(seed, 8) == environment.problems(seed, 8)
    others = [prompt_seed(2, 0, NODE, bytes(32)), prompt_seed(1, 1, NODE, bytes(32)),
              prompt_seed(1, 0, "0x" + "cd" * 20, bytes(32)), prompt_seed(1, 0, NODE, b"\x01" * 32)]  # fmt: skip
    for other in others:
        assert environment.problems(other, 8) != environment.problems(seed, 8)
    assert sample_seed(seed, 0, 1) != sample_seed(seed, 1, 0)


def test_seed_stream_is_uniform_enough_and_in_range() -> None:
    stream = SeedStream(label_seed("test"))
    values = [stream.below(10) for _ in range(5000)]
    assert set(values) == set(range(10))
    assert all(abs(values.count(v) - 500) < 100 for v in range(10))
    with pytest.raises(ValueError):
        stream.below(0)


def test_arithmetic_answers_and_exact_match_reward() -> None:
    environment = environment_of("arithmetic", {"min_digits": 2, "max_digits": 3, "operators": ["+", "-", "*"]})
    for problem in environment.problems(label_seed("a"), 200):
        left, operator, right = _split(problem.prompt)
        assert 10 <= left <= 999 and 10 <= right <= 999
        assert int(problem.answer) == eval(f"{left}{operator}{right}")
        assert environment.reward(problem, problem.answer) == 1.0
        assert environment.reward(problem, problem.answer + "1") == 0.0


def _split(prompt: str) -> tuple[int, str, int]:
    body = prompt.removesuffix("=")
    for index, character in enumerate(body[1:], start=1):
        if character in "+-*":
            return int(body[:index]), character, int(body[index + 1 :])
    raise AssertionError(prompt)


def test_sorting_gives_partial_credit_per_place() -> None:
    environment = environment_of("sorting")
    problem = next(p for p in environment.problems(label_seed("s"), 50) if len(p.answer) == 4)
    assert problem.answer == "".join(sorted(problem.prompt.removeprefix("sort:").removesuffix("=")))
    assert environment.reward(problem, problem.answer) == 1.0
    wrong_last = problem.answer[:3] + ("x" if problem.answer[3] != "x" else "y")
    assert environment.reward(problem, wrong_last) == 0.75
    assert environment.reward(problem, problem.answer + "0") == 0.0


def test_held_out_problems_never_appear_in_training() -> None:
    for name in ("arithmetic", "sorting"):
        environment = environment_of(name)
        held_out = {p.prompt for p in environment.held_out(100)}
        assert len(held_out) == 100
        training = {p.prompt for p in environment.problems(label_seed("t"), 3000)}
        # Broken version to check this test: return False from is_held_out → the sets overlap.
        assert not held_out & training


def test_spec_defaults_round_trip_and_bad_specs_are_named() -> None:
    spec = default_spec("sorting")
    assert parse_spec(spec.canonical_bytes(), "x") == spec
    assert spec.toploc.topk == 128 and spec.toploc.decode_batching_size == 32
    cases = [
        (b"not json", "is not JSON"),
        (b"[]", "must be a JSON object"),
        (json.dumps({"environment": "chess"}).encode(), "unknown environment 'chess'"),
        (json.dumps({"environment": "arithmetic", "params": {"max_digits": 0}}).encode(), "max_digits"),
        (json.dumps({"environment": "arithmetic", "params": {"min_digits": 3, "max_digits": 2}}).encode(), "above"),
        (json.dumps({"environment": "sorting", "sampling": {"temperature": 0}}).encode(), "sampling.temperature"),
        (json.dumps({"environment": "sorting", "training": {"group_size": 1}}).encode(), "training.group_size"),
        (json.dumps({"environment": "sorting", "training": {"prompts_per_round": 1000, "group_size": 100}}).encode(),
         "above the bound"),
        (json.dumps({"environment": "sorting", "schema_version": 7}).encode(), "pins protocol version 7"),
        (json.dumps({"environment": "sorting", "surprise": 1}).encode(), "surprise"),
    ]  # fmt: skip
    for data, fragment in cases:
        with pytest.raises(ConfigError, match=None) as caught:
            parse_spec(data, "spec.json")
        assert fragment in str(caught.value) and "\n" not in str(caught.value), (data, str(caught.value))


def test_char_tokenizer_round_trip_and_unknown_characters() -> None:
    tokenizer = CharTokenizer()
    ids = prompt_ids(tokenizer, Problem("12+34=", "46"))
    assert ids[0] == tokenizer.bos_id and tokenizer.decode(ids) == "12+34="
    assert completion_text(tokenizer, [*tokenizer.encode("46"), tokenizer.eos_id, *tokenizer.encode("9")]) == "46"
    assert CharTokenizer(**{"alphabet": tokenizer.config()["alphabet"]}).encode("a b") == tokenizer.encode("a b")
    with pytest.raises(ConfigError, match="not in the tokenizer's alphabet"):
        tokenizer.encode("12#")
    with pytest.raises(ConfigError):
        CharTokenizer("aa")


def test_a_version_one_spec_keeps_the_update_it_named() -> None:
    """A task created before schema 2 named its env spec by CID; its validators must replay the update
    its trainers ran (one full batch, negatives at full weight). Broken version that fails: dropping
    `EnvSpec._earlier_versions_meaning` (the new defaults, 64 and 0.0, would apply to the old task)."""
    current = default_spec("arithmetic")
    assert current.schema_version == 6 and current.training.minibatch_size == 64
    document = json.loads(current.canonical_bytes())
    document["schema_version"] = 1
    for name in ("minibatch_size", "negative_weight", "aggregation"):
        del document["training"][name]
    old = parse_spec(json.dumps(document).encode(), "old.json")
    assert (old.training.minibatch_size, old.training.negative_weight) == (0, 1.0)
    assert old.training.prompts_per_round == current.training.prompts_per_round  # what it named stays
    named = parse_spec(json.dumps(document | {"training": document["training"] | {"minibatch_size": 8}}).encode(), "x")
    assert named.training.minibatch_size == 8


@pytest.mark.parametrize(
    ("version", "meant"), [(1, "mean"), (2, "mean"), (3, "mean"), (4, "mean"), (5, "clipped_mean")]
)
def test_a_spec_before_version_six_keeps_the_outer_step_it_meant(version: int, meant: str) -> None:
    """Checkpoints of tasks created before schema 5 were the plain mean of their updates, and of schema 5 the
    clipped mean at twice the median norm where the spec named no rule; their auditors must recompute the same
    bytes. Broken version that fails: dropping EARLIER_AGGREGATION from `EnvSpec._earlier_versions_meaning` (the
    new default, trimmed_mean, would apply to the old task)."""
    current = default_spec("arithmetic")
    assert current.training.aggregation.rule == "trimmed_mean"
    document = json.loads(current.canonical_bytes())
    del document["training"]["aggregation"]
    old = parse_spec(json.dumps(document | {"schema_version": version}).encode(), "old.json")
    assert old.training.aggregation.rule == meant
    if version == 5:
        assert old.training.aggregation.clip_multiple == 2.0
    assert parse_spec(json.dumps(document).encode(), "new.json").training.aggregation.rule == "trimmed_mean"
    kept = document["training"] | {"aggregation": {"clip_multiple": 3.0}}
    named = parse_spec(json.dumps(document | {"schema_version": version, "training": kept}).encode(), "named.json")
    assert (named.training.aggregation.rule, named.training.aggregation.clip_multiple) == (meant, 3.0)
    # Its canonical form (what `task create` stores) reads back the same.
    assert parse_spec(old.canonical_bytes(), "again.json") == old


@pytest.mark.parametrize(
    ("setting", "key"),
    [("rule", "median"), ("clip_multiple", 0.5), ("clip_multiple", 101), ("trim", 0), ("trim", 9)],
)
def test_an_aggregation_setting_out_of_range_is_named(setting: str, key: object) -> None:
    document = json.loads(default_spec("arithmetic").canonical_bytes())
    document["training"]["aggregation"][setting] = key
    with pytest.raises(ConfigError, match=f"training.aggregation.{setting}"):
        parse_spec(json.dumps(document).encode(), "bad.json")
