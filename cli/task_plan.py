"""What a creator should know before paying, measured where it can be (`crucible task plan`, and the plan
`task create` shows before it asks):

- learnability: the initial model's sampled rewards on a sample of the task's training prompts, with the task's
  own sampling settings, and the share of groups whose rewards differ (GRPO learns from those alone), with a
  95 % interval;
- checking: validators staked against the positions a check needs, and the deterrence figure;
- time: one node's work for a few prompts and a validator's check of it, rehearsed on this machine and scaled
  to a round; the period and busy share the windows give, and the windows that keep trainers busiest
  without making them skip a slow round;
- cost: a round's gas by who sends it, at the chain's gas price.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from protocol.artifacts.backends import open_store
from protocol.chain.client import Crucible
from protocol.chain.costs import L1_GAS, RoundGas, round_gas
from protocol.chain.fees import eth
from protocol.chain.opstack import l1_fee_of_gas, read_l1_fee_params
from protocol.chain.params import MAX_STALENESS, PPM, TaskParams, least_windows
from protocol.chain.validator_set import prospective_set
from protocol.errors import CrucibleError, OwnFault
from protocol.ml.envs.spec import EnvSpec, parse_spec

SAMPLE_PROMPTS = 32  # prompts of the learnability sample (generation and scoring only)
REHEARSAL_PROMPTS = 2  # prompts of the timed rehearsal: generate, prove, score, update, then check it
# A submit window must hold a round's slowest work, not its typical one: the market opens the next round only
# once the window closed, and work that misses it loses the whole round. The work's spread is GRPO's own
# (training takes only the groups whose rewards differ) and the machine's: over six rounds of SmolLM2's demo task
# the slowest took 1.17 x their mean (docs/benchmarks.md, "Staleness 1 with the cheaper check"). LANDING_S is
# the time a finished round needs to be on chain: the opening seen a poll late, the submission's block.
WORK_SPREAD = 1.2
LANDING_S = 3
Z95 = 1.959964


def wilson(successes: int, trials: int) -> tuple[float, float]:
    """The Wilson score 95 % interval of a proportion (sound at 0 and at `trials`, unlike the normal one)."""
    if trials == 0:
        return 0.0, 1.0
    share = successes / trials
    denominator = 1 + Z95**2 / trials
    centre = (share + Z95**2 / (2 * trials)) / denominator
    spread = Z95 * math.sqrt(share * (1 - share) / trials + Z95**2 / (4 * trials**2)) / denominator
    return max(0.0, centre - spread), min(1.0, centre + spread)


@dataclass
class Plan:
    """The plan as JSON (`document`) and whether the sample found no signal to learn from."""

    document: dict[str, Any]
    unlearnable: bool = False
    concentrated: bool = False  # one validator address alone holds more than the declared colluding share
    lines: list[str] = field(default_factory=list)


def make_plan(
    crucible: Crucible,
    params: TaskParams,
    model_cid: str,
    env_cid: str,
    store_text: str | None,
    *,
    trainers: int,
    device: str,
    measure: bool = True,
    sample_prompts: int = SAMPLE_PROMPTS,
) -> Plan:
    """Measures and estimates the plan of a task not yet created. `measure` False (or a model or spec the store
    cannot serve) leaves learnability and work times out, saying why."""
    plan = Plan({"trainers": trainers})
    loaded, spec, why_not = None, None, "not measured: the availability check was skipped" if not measure else ""
    if measure:
        try:
            from protocol.ml.model import checked_device, load_model

            store = open_store(store_text)
            spec = parse_spec(store.get(env_cid), env_cid)
            loaded = load_model(model_cid, store, checked_device(device))
        except OwnFault:
            raise
        except CrucibleError as error:
            why_not = f"not measured: {error}"
    if loaded is not None and spec is not None:
        _learnability(plan, loaded, spec, sample_prompts)
        work = _rehearsal(plan, crucible, loaded, spec, model_cid, env_cid)
    else:
        plan.document["learnability"] = {"measured": False, "reason": why_not}
        plan.lines.append(f"learnability {why_not}")
        work = None
    seated = _checking(plan, crucible, params)
    _time(plan, params, trainers, seated, work, crucible.chain.block_interval_s())
    _cost(plan, crucible, params, trainers, seated)
    return plan


def _learnability(plan: Plan, loaded: Any, spec: EnvSpec, prompts: int) -> None:
    from protocol.ml.generation import generate
    from protocol.ml.seeds import label_seed
    from protocol.ml.tokenizer import completion_text, prompt_ids

    environment = spec.env()
    group = spec.training.group_size
    problems = environment.problems(label_seed("crucible-plan"), prompts)
    ids = [prompt_ids(loaded.tokenizer, problem) for problem in problems for _ in range(group)]
    seeds = [label_seed("crucible-plan-sample", str(index)) for index in range(len(ids))]
    outputs = generate(loaded.model, ids, seeds, spec.sampling, loaded.tokenizer.eos_id, loaded.tokenizer.pad_id)
    rewards = [
        environment.reward(problems[index // group], completion_text(loaded.tokenizer, out.completion_ids))
        for index, out in enumerate(outputs)
    ]
    groups = [rewards[start : start + group] for start in range(0, len(rewards), group)]
    mixed = sum(len(set(values)) > 1 for values in groups)
    low, high = wilson(mixed, len(groups))
    mean = sum(rewards) / len(rewards)
    plan.unlearnable = mixed == 0
    reading = "another answer reading (answer=last_number for a chat model's sentence)"
    suggestions = [
        f"more new tokens (now sampling.max_new_tokens={spec.sampling.max_new_tokens})",
        *([reading] if "answer" in spec.params else []),
        "an easier configuration of the environment",
        "the small-model preset (`crucible env spec NAME --preset small-model`)",
    ]
    plan.document["learnability"] = {
        "measured": True,
        "prompts": len(groups),
        "samples_per_prompt": group,
        "mean_reward": round(mean, 4),
        "mixed_groups": mixed,
        "mixed_share": round(mixed / len(groups), 4),
        "mixed_share_low": round(low, 4),
        "mixed_share_high": round(high, 4),
        "signal": not plan.unlearnable,
        "suggestions": suggestions if plan.unlearnable else [],
    }
    line = (
        f"learnability: the initial model's mean reward is {mean:.3f} on {len(groups)} prompts x {group} samples; "
        f"{mixed} of {len(groups)} groups have rewards that differ ({mixed / len(groups):.0%}, 95 % interval "
        f"{low:.0%} to {high:.0%})"
    )
    if plan.unlearnable:
        line += (
            ": no group carries a signal, so GRPO would learn nothing and the bounty would buy no learning. "
            "Try " + "; ".join(suggestions)
        )
    plan.lines.append(line)


@dataclass(frozen=True)
class _Work:
    """A round's work and one check of it on this machine, scaled from the rehearsal (seconds)."""

    generate_s: float
    prove_s: float
    train_s: float
    check_s: float | None

    @property
    def work_s(self) -> float:
        return self.generate_s + self.prove_s + self.train_s


def _rehearsal(plan: Plan, crucible: Crucible, loaded: Any, spec: EnvSpec, model_cid: str, env_cid: str) -> _Work:
    """One node's work for a few prompts, then a validator's check of it, timed and scaled to the round."""
    from node.work import produce_work
    from protocol.ml.seeds import label_seed
    from protocol.work.checks import Artifacts, Claim, verify_submission
    from protocol.work.round import RoundContext

    rehearsed = spec.model_copy(deep=True)
    rehearsed.training.prompts_per_round = min(REHEARSAL_PROMPTS, spec.training.prompts_per_round)
    scale = spec.training.prompts_per_round / rehearsed.training.prompts_per_round
    node = "0x" + label_seed("crucible-plan-node")[:20].hex()
    context = RoundContext(crucible.chain.chain_id, crucible.deployment.TaskMarket, crucible.task_count() + 1, 0,
                           node, label_seed("crucible-plan-work"), model_cid, env_cid, 0)  # fmt: skip
    work = produce_work(loaded, rehearsed, context)
    claim = Claim(context, "rehearsal", "rehearsal", work.rollouts.work_units,
                  context.commitment(work.rollouts.proofs_digest()))  # fmt: skip
    started = time.perf_counter()
    verdict = verify_submission(claim, rehearsed, loaded, Artifacts(work.rollouts.to_bytes, lambda: work.update))
    check_s = (time.perf_counter() - started) * scale if verdict.valid else None
    if not verdict.valid:
        plan.lines.append(f"time: the rehearsal's own check failed ({verdict.failed_check}): the check is not timed")
    return _Work(work.generate_s * scale, work.prove_s * scale, work.train_s * scale, check_s)


def _checking(plan: Plan, crucible: Crucible, params: TaskParams) -> int:
    """Validators staked enough to join, against the positions of a check; returns the seats assumed."""
    validators = prospective_set(crucible, params.min_validator_stake_wei, params.colluding_share_ppm)
    eligible = len(validators.holders)
    needed = params.validators_per_check
    unverified = eligible < needed
    plan.document["checking"] = {
        "validators_staked": eligible,
        "validators_per_check": needed,
        "sample_rate": params.sample_rate_ppm / PPM,
        "every_round_unverified": unverified,
        "deterrence": params.deterrence if params.deterrence != float("inf") else None,
        "validator_set": validators.as_json(),
    }
    # Refused at creation once enough validators could seat a check that the set is the one the task would run
    # with; before then the task is unverified anyway, and shown so.
    plan.concentrated = validators.one_exceeds and not unverified
    if unverified:
        plan.lines.append(
            f"checking: WARNING: {eligible} validator(s) staked enough to join, and a check needs {needed}: unless "
            f"{needed - eligible} more stake and join, every round ends unverified (its work neither paid nor "
            "slashed, the bounty refunded)"
        )
    else:
        plan.lines.append(
            f"checking: {eligible} validators staked enough to join; a check needs {needed}, a submission is "
            f"checked with p = {params.sample_rate_ppm / PPM:g}"
        )
    plan.lines.append(validators.line("validator(s) staked enough to join, by the stake each could seat"))
    return max(eligible, needed)


def _period(submit: float, validate: float, challenge: float, staleness: int) -> float:
    """How often rounds open: the submit window, or the three windows shared by the rounds in flight."""
    return max(submit, (submit + validate + challenge) / (staleness + 1))


def _time(plan: Plan, params: TaskParams, trainers: int, seats: int, work: _Work | None, block_interval_s: int) -> None:
    windows = (params.submit_window_s, params.validate_window_s, params.challenge_window_s)
    staleness = params.max_staleness
    period = _period(*windows, staleness)
    wall = (params.rounds - 1) * period + sum(windows)
    least = least_windows(block_interval_s)
    document: dict[str, Any] = {
        "windows_s": dict(zip(("submit", "validate", "challenge"), windows, strict=True)),
        "block_interval_s": block_interval_s,
        "least_windows_s": {name.removesuffix("_window_s"): value for name, value in least.items()},
        "max_staleness": staleness,
        "round_period_s": round(period, 1),
        "task_wall_s": round(wall),
    }
    plan.document["time"] = document
    if work is None:
        document["measured"] = False
        plan.lines.append(
            f"time: a round opens every {period:.0f} s with these windows ({staleness} staleness); the task "
            f"takes about {_duration(wall)}; the work per round is not measured"
        )
        return
    checks_each = trainers * params.sample_rate_ppm / PPM * params.validators_per_check / seats
    busy = min(1.0, work.work_s / period)
    document |= {
        "measured": True,
        "work_s": round(work.work_s, 1),
        "generate_s": round(work.generate_s, 1),
        "prove_s": round(work.prove_s, 1),
        "train_s": round(work.train_s, 1),
        "check_s": round(work.check_s, 1) if work.check_s is not None else None,
        "checks_per_validator": round(checks_each, 2),
        "trainer_busy": round(busy, 3),
    }
    check_s = work.check_s or 0.0
    # The window holds a round WORK_SPREAD slower than the rehearsed one, and its landing; trainers are then busy
    # about W / submit of the time, and no more: a shorter window makes them skip the slow rounds.
    submit = max(least["submit_window_s"], math.ceil(WORK_SPREAD * work.work_s) + LANDING_S)
    # The checks come after the seed, whose blocks the least window holds; a dispute's committee re-runs the
    # check as the validators did.
    validate = least["validate_window_s"] + math.ceil(1.5 * checks_each * check_s)
    challenge = max(least["challenge_window_s"], validate)
    suggested = min(MAX_STALENESS, max(0, math.ceil((submit + validate + challenge) / submit) - 1))
    suggested_period = _period(submit, validate, challenge, suggested)
    document["suggested"] = {
        "submit_window_s": submit,
        "validate_window_s": validate,
        "challenge_window_s": challenge,
        "max_staleness": suggested,
        "round_period_s": round(suggested_period, 1),
        "trainer_busy": round(min(1.0, work.work_s / suggested_period), 3),
        "task_wall_s": round((params.rounds - 1) * suggested_period + submit + validate + challenge),
    }
    warnings = []
    if work.work_s > params.submit_window_s:
        warnings.append(f"the work ({work.work_s:.0f} s) does not fit the submit window: trainers will miss rounds")
    if checks_each * check_s > params.validate_window_s:
        warnings.append(f"a validator's checks ({checks_each * check_s:.0f} s) do not fit the validate window")
    check_text = f"a check {check_s:.0f} s, {checks_each:.1f} per validator a round" if work.check_s else "no check"
    plan.lines.append(
        f"time (measured here): a round's work {work.work_s:.0f} s (generate {work.generate_s:.0f}, prove "
        f"{work.prove_s:.0f}, update {work.train_s:.0f}), {check_text}; these windows open a round every "
        f"{period:.0f} s: trainers busy {busy:.0%}, the task about {_duration(wall)}"
        + "".join(f"; WARNING: {text}" for text in warnings)
    )
    busy_goal = document["suggested"]["trainer_busy"]
    limit = ""
    if submit == least["submit_window_s"]:
        limit = f", the most the shortest window this chain serves ({submit} s) allows"
    elif suggested_period > submit:
        limit = f", the most staleness {MAX_STALENESS} allows"
    plan.lines.append(
        f"time: use --submit-window {submit} --validate-window {validate} --challenge-window {challenge} "
        f"--max-staleness {suggested}: a round every {suggested_period:.0f} s, the task about "
        f"{_duration(document['suggested']['task_wall_s'])}, trainers about {busy_goal:.0%} busy{limit} (the "
        f"window also holds a round {WORK_SPREAD - 1:.0%} slower than this one; a shorter one makes trainers "
        "skip the slow rounds)"
    )


def _cost(plan: Plan, crucible: Crucible, params: TaskParams, trainers: int, seats: int) -> None:
    """What a round costs its participants: its gas at the chain's price, and on an OP Stack chain the L1
    data fee of its transactions at the L1 parameters the chain's oracle holds now."""
    sample_rate, per_check = params.sample_rate_ppm / PPM, params.validators_per_check
    gas = round_gas(trainers, seats, sample_rate, per_check)
    chain = crucible.chain
    price = int(chain.w3.eth.gas_price)
    l1 = RoundGas(0, 0)
    fee_params = read_l1_fee_params(chain.w3) if chain.charges_l1_fee() else None
    if fee_params is not None:
        l1_gas = round_gas(trainers, seats, sample_rate, per_check, per_call=L1_GAS)
        l1 = RoundGas(l1_fee_of_gas(l1_gas.trainers, fee_params), l1_fee_of_gas(l1_gas.validators, fee_params))
    trainers_wei, validators_wei = gas.trainers * price + l1.trainers, gas.validators * price + l1.validators
    round_wei = trainers_wei + validators_wei
    plan.document["cost"] = {
        "gas_per_round": gas.total,
        "trainers_gas_per_round": gas.trainers,
        "validators_gas_per_round": gas.validators,
        "gas_price_wei": str(price),
        "l2_fee_per_round_wei": str(gas.total * price),
        "l1_data_fee": "charged by this chain" if fee_params is not None else "none on this chain",
        "l1_fee_params": None if fee_params is None else fee_params.as_json(),
        "l1_data_fee_per_round_wei": str(l1.total),
        "trainers_cost_per_round_wei": str(trainers_wei),
        "validators_cost_per_round_wei": str(validators_wei),
        "round_cost_wei": str(round_wei),
        "task_cost_wei": str(round_wei * params.rounds),
    }
    l1_text = f" + L1 data fee {eth(l1.total)}" if fee_params is not None else ""
    plan.lines.append(
        f"cost: {gas.total:,} gas a round ({trainers} trainers {gas.trainers:,}, validators {gas.validators:,}) at "
        f"{price / 1e9:.3g} gwei: {eth(gas.total * price)}{l1_text} = {eth(round_wei)} a round for its participants "
        f"(trainers {eth(trainers_wei)}, validators {eth(validators_wei)}), {eth(round_wei * params.rounds)} for "
        "the task"
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
