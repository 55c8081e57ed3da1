"""Validators as real processes on a real Anvil, against real trainer processes.

The detection matrix: every `--adversary` strategy of the trainer node, with sampling forced on, is
rejected by the check meant for it, slashed, left out of the aggregate and unpaid, and the
validators who caught it get the finder's share; a lazy validator is outvoted and slashed; the honest
node is accepted and paid. Then disputes: an honest node wrongly rejected by a lying validator
disputes and wins; a cheater's dispute loses its bond.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.devnet import (
    TOKEN,
    create_small_task,
    credits,
    fix_check_seed_where,
    fix_dispute_seed_where,
    funded_account,
    reveal_dispute_votes,
    reveal_votes,
    warp,
)

from protocol.accounts import Signer
from protocol.artifacts.manifest import load_state_dict
from protocol.artifacts.store import LocalStore
from protocol.chain.assignment import (
    aggregator_positions,
    assigned_positions,
    committee_positions,
    holders,
    is_sampled,
)
from protocol.chain.client import Crucible, Role
from protocol.chain.deployment import Deployment
from protocol.chain.ids import submission_id, submission_text
from protocol.chain.params import demo_task_params
from protocol.chain.seeds import dispute_seed
from protocol.ml.aggregation import publish_next_checkpoint
from protocol.ml.envs.spec import default_spec
from protocol.ml.model import load_checkpoint
from protocol.work.evidence import parse_evidence

pytestmark = [pytest.mark.integration, pytest.mark.slow]
# The check that must reject each trainer adversary (low-precision: whichever of the two sees it first).
EXPECTED_CHECK = {
    "wrong-model": {"toploc"},
    "low-precision": {"toploc", "sampling"},
    "forged-tokens": {"sampling"},
    "cherry-pick": {"sampling"},
    "copied": {"format"},
    "inflated-rewards": {"rewards"},
    "replay": {"format"},
    "garbage-update": {"update"},
    "withheld": {"availability"},
}


def test_every_trainer_adversary_is_caught_slashed_and_left_out(
    model_cid_factory: Callable[[Path], str],
    crucible_home: Path,
    crucible: Crucible,
    deployment: Deployment,
    dev: list[Signer],
    roles: Any,
) -> None:
    task = create_small_task(crucible, crucible_home, model_cid_factory(crucible_home), dev[0], 4, rounds=2)
    task_id, params, spec, store, model_cid = task.task_id, task.params, task.spec, task.store, task.model_cid

    trainers = {name: funded_account(crucible, dev[0], name) for name in ["honest", *EXPECTED_CHECK]}
    for signer, _ in trainers.values():
        crucible.stake(signer, 1200 * TOKEN, Role.TRAINER)
    validators = {name: funded_account(crucible, dev[0], name) for name in ["v1", "v2", "v3", "lazy"]}
    # Seats weigh stake: the honest validators lock 2,000 each, the lazy one the minimum (100), so it holds
    # about 1.6 % of every position (a majority of a check of 3 with chance ~0.08 %; round 0's seed is
    # picked below so that it holds none).
    seat = {"v1": 2000 * TOKEN, "v2": 2000 * TOKEN, "v3": 2000 * TOKEN, "lazy": params.min_validator_stake_wei}
    for name, (signer, _) in validators.items():
        crucible.stake(signer, max(seat[name], 200 * TOKEN), Role.VALIDATOR)
        crucible.join_task(signer, task_id, seat[name])
    address = {name: signer.address for name, (signer, _) in {**trainers, **validators}.items()}
    name_of = {value: key for key, value in address.items()}

    def node(name: str, rounds: int) -> Any:
        adversary = [] if name == "honest" else ["--adversary", name]
        return roles.start("node", "--task", str(task_id), "--account", "env", "--rounds", str(rounds), *adversary,
                           key=trainers[name][1])  # fmt: skip

    # The honest node first, so that `copied` copies honest work.
    node("honest", 2)
    roles.wait_for("the honest submission", lambda: len(crucible.submissions(task_id, 0)) == 1)
    for name in EXPECTED_CHECK:
        node(name, 2 if name == "replay" else 1)
    roles.wait_for("ten submissions in round 0", lambda: len(crucible.submissions(task_id, 0)) == 10, 600)

    cheats0 = [submission_id(task_id, 0, address[n]) for n in EXPECTED_CHECK if n != "replay"]

    def lazy_checks_a_cheat(view: Crucible) -> bool:
        """The lazy validator checks some cheat, and never holds more than one position of a check."""
        checks = [
            view.assigned_validators(submission_id(task_id, 0, e["trainer"])) for e in view.submissions(task_id, 0)
        ]
        return any(address["lazy"] in view.assigned_validators(s) for s in cheats0) and all(
            holders.count(address["lazy"]) <= 1 for holders in checks
        )

    crucible = fix_check_seed_where(crucible.chain.rpc_url, deployment, dev[9], task_id, lazy_checks_a_cheat)
    # The validators find their duties with protocol/chain/assignment.py: the same draws as the market's views.
    state = crucible.round(task_id, 0)
    members = crucible.members_of(task_id)[: state.validator_count]
    for event in crucible.submissions(task_id, 0):
        sid = submission_id(task_id, 0, event["trainer"])
        drawn = assigned_positions(state.check_seed, sid, state.seat_stake, params.validators_per_check)
        assert is_sampled(state.check_seed, sid, params.sample_rate_ppm) == crucible.is_sampled(sid)
        assert holders(members, drawn) == crucible.assigned_validators(sid)
    drawn = aggregator_positions(state.check_seed, state.seat_stake, params.validators_per_check)
    assert holders(members, drawn) == crucible.aggregators(task_id, 0)
    for name, (_, key) in validators.items():
        adversary = ["--adversary", "lazy"] if name == "lazy" else []
        roles.start("validator", "--task", str(task_id), "--account", "env", "--rounds", "2", *adversary, key=key)

    def attestations(round_index: int, mask: str) -> int:
        """Positions committed to (`mask` "committed_mask") or revealed ("voted_mask"): one vote covers every
        position its validator holds."""
        ids = [submission_id(task_id, round_index, e["trainer"]) for e in crucible.submissions(task_id, round_index)]
        return sum(getattr(crucible.submission(s), mask).bit_count() for s in ids)

    def finish_round(round_index: int, submissions: int) -> None:
        checks = submissions * params.validators_per_check
        roles.wait_for(f"{checks} commitments in round {round_index}",
                       lambda: attestations(round_index, "committed_mask") == checks, 600)  # fmt: skip
        deadlines = crucible.deadlines(task_id, round_index)
        assert attestations(round_index, "voted_mask") == 0, "a verdict showed before the reveal phase"
        warp(crucible, deadlines.votes_revealed_from)
        roles.wait_for(f"{checks} reveals in round {round_index}",
                       lambda: attestations(round_index, "voted_mask") == checks, 600)  # fmt: skip
        # Each validator committed in the commit phase and revealed in the reveal phase, on its own.
        ids = [submission_id(task_id, round_index, e["trainer"]) for e in crucible.submissions(task_id, round_index)]
        for name, revealed_later in (("AttestationCommitted", False), ("Attested", True)):
            for sid in ids:
                for event in crucible.events("TaskMarket", name, submissionId=sid):
                    at = crucible.chain.w3.eth.get_block(event["blockNumber"])["timestamp"]
                    assert (at >= deadlines.votes_revealed_from) == revealed_later, (name, at, deadlines)
        warp(crucible, deadlines.validate)
        roles.wait_for(f"an agreed checkpoint for round {round_index}", lambda: crucible.events(
            "TaskMarket", "CheckpointAgreed", taskId=task_id, round=round_index), 300)  # fmt: skip
        warp(crucible, deadlines.challenge)
        roles.wait_for(f"round {round_index} final", lambda: crucible.round(task_id, round_index).finalised, 120)

    finish_round(0, 10)
    roles.wait_for("round 1's two submissions", lambda: len(crucible.submissions(task_id, 1)) == 2, 600)
    warp(crucible, crucible.deadlines(task_id, 1).submit)
    finish_round(1, 2)
    for process in roles.started:
        roles.wait_for(f"`{process.command}` to finish", lambda p=process: p.process.poll() is not None, 300)
        assert process.process.returncode == 0, process.failed()

    # Every cheat: rejected by the honest validators with evidence naming the right check, slashed once,
    # unpaid; the honest validators that found it got the finder's share. (Safety property 4.) Broken
    # versions to check this test: return early from check_update with passed=True → garbage-update is
    # settled as included and the first assertion fails; drop the node comparison from check_format →
    # copied passes format and fails later (prompts), so its expected check does not match.
    cheats = {name: submission_id(task_id, 1 if name == "replay" else 0, address[name]) for name in EXPECTED_CHECK}
    honest_validators = {address["v1"], address["v2"], address["v3"]}
    for name, sid in cheats.items():
        settled = crucible.events("TaskMarket", "Settled", submissionId=sid)
        assert len(settled) == 1 and settled[0]["rejected"] and int(settled[0]["slashed"]) == params.slash_wei, name
        assert int(settled[0]["reward"]) == 0, f"{name} was paid"
        if name != "replay":  # (its round-0 submission was honest, and paid)
            assert credits(crucible, task_id, address[name], 0) == 0, f"{name} was paid"
        for attestation in crucible.events("TaskMarket", "Attested", submissionId=sid):
            if attestation["validator"] in honest_validators:
                evidence = parse_evidence(store.get(attestation["evidenceCid"]), attestation["evidenceCid"])
                assert not attestation["valid"] and evidence["failed_check"] in EXPECTED_CHECK[name], (name, evidence)
    for validator in honest_validators:
        assert credits(crucible, task_id, validator, 2) > 0, f"{name_of[validator]} got no finder's share"
    expected_stake = {name: 1200 * TOKEN - params.slash_wei for name in EXPECTED_CHECK}
    expected_stake["honest"] = 1200 * TOKEN
    for name, stake in expected_stake.items():
        assert crucible.stake_account(address[name]).staked == stake, name

    # The honest node: accepted in both rounds and paid (property 3). Broken version: make
    # ChunkFigures.passes require `exp_mismatches < 0` → every honest chunk fails, the honest node is
    # rejected and slashed, and these assertions fail.
    for round_index in (0, 1):
        sid = submission_id(task_id, round_index, address["honest"])
        assert [e["rejected"] for e in crucible.events("TaskMarket", "Settled", submissionId=sid)] == [False]
    assert credits(crucible, task_id, address["honest"], 0) > 0

    # The lazy validator attested every cheat it checked valid: outvoted, penalised once per position it
    # held, slashed.
    lazy_positions = [s for s in cheats.values() for a in crucible.assigned_validators(s) if a == address["lazy"]]
    penalties = crucible.events("TaskMarket", "ValidatorPenalised", validator=address["lazy"])
    assert lazy_positions and sorted(int(e["submissionId"]) for e in penalties) == sorted(lazy_positions)
    assert (
        crucible.stake_account(address["lazy"]).staked == 200 * TOKEN - len(lazy_positions) * params.validator_slash_wei
    )

    # The agreed next checkpoint is the outer step over exactly the included updates of round 0: the
    # honest node's and the replay node's (honest in round 0).
    agreed = crucible.events("TaskMarket", "CheckpointAgreed", taskId=task_id, round=0)[0]["checkpointCid"]
    proposals = crucible.events("TaskMarket", "CheckpointProposed", taskId=task_id, round=0)
    # Every aggregator that proposed agrees, and together they hold a majority of the aggregator positions
    # (one validator may hold several: its one proposal counts for each).
    aggregators = crucible.aggregators(task_id, 0)
    held = sum(aggregators.count(e["aggregator"]) for e in proposals)
    assert 2 * held > len(aggregators) and {e["checkpointCid"] for e in proposals} == {agreed}
    accepted = [
        event
        for event in crucible.submissions(task_id, 0)
        if not crucible.submission(submission_id(task_id, 0, event["trainer"])).rejected
    ]
    assert sorted(name_of[event["trainer"]] for event in accepted) == ["honest", "replay"]
    included = [
        (submission_id(task_id, 0, event["trainer"]), load_state_dict(event["updateCid"], store)) for event in accepted
    ]
    expected = publish_next_checkpoint(load_checkpoint(model_cid, store), included, spec.training,
                                       LocalStore(crucible_home / "recomputed"))  # fmt: skip
    assert agreed == expected


def test_a_lying_validator_loses_to_a_dispute_and_a_cheats_dispute_loses_its_bond(
    model_cid_factory: Callable[[Path], str],
    crucible_home: Path,
    crucible: Crucible,
    deployment: Deployment,
    dev: list[Signer],
    roles: Any,
) -> None:
    model_cid = model_cid_factory(crucible_home)
    # One position per check and per committee; a bond the appeal rule accepts with these numbers.
    task = create_small_task(crucible, crucible_home, model_cid, dev[0], 2, rounds=1, validators_per_check=1,
                             dispute_bond_wei=200 * TOKEN)  # fmt: skip
    task_id, params = task.task_id, task.params
    honest, honest_key = funded_account(crucible, dev[0], "dispute-honest")
    cheat, cheat_key = funded_account(crucible, dev[0], "dispute-cheat")
    for signer in (honest, cheat):
        crucible.stake(signer, 1200 * TOKEN, Role.TRAINER)
    validators = {name: funded_account(crucible, dev[0], f"dispute-{name}") for name in ("liar", "v1", "v2")}
    for signer, _ in validators.values():
        crucible.stake(signer, 200 * TOKEN, Role.VALIDATOR)
        crucible.join_task(signer, task_id)
    liar = validators["liar"][0].address

    roles.start("node", "--task", str(task_id), "--account", "env", "--rounds", "1", key=honest_key)
    roles.start("node", "--task", str(task_id), "--account", "env", "--rounds", "1", "--adversary",
                "inflated-rewards", "--dispute", key=cheat_key)  # fmt: skip
    roles.wait_for("two submissions", lambda: len(crucible.submissions(task_id, 0)) == 2, 600)
    honest_id, cheat_id = (submission_id(task_id, 0, s.address) for s in (honest, cheat))
    crucible = fix_check_seed_where(
        crucible.chain.rpc_url,
        deployment,
        dev[9],
        task_id,
        lambda view: view.assigned_validators(honest_id) == [liar] and view.assigned_validators(cheat_id) != [liar],
    )
    (checker,) = crucible.assigned_validators(cheat_id)
    processes = {}
    for name, (signer, key) in validators.items():
        adversary = ["--adversary", "liar"] if name == "liar" else []
        processes[signer.address] = roles.start(
            "validator", "--task", str(task_id), "--account", "env", "--rounds", "1", *adversary, key=key
        )

    # Crash safety: the cheat's checker is killed right after its check (its verdict journaled,
    # perhaps sent) and restarted; it attests exactly once.
    roles.wait_for(
        "the cheat's check", lambda: processes[checker].seen("checked", submission=submission_text(cheat_id)), 300
    )
    roles.kill(processes[checker])
    key = next(k for s, k in validators.values() if s.address == checker)
    processes[checker] = roles.start("validator", "--task", str(task_id), "--account", "env", "--rounds", "1", key=key)
    reveal_votes(crucible, roles, task_id, 0, 2, 300)
    assert crucible.submission(honest_id).rejected and crucible.submission(cheat_id).rejected

    # The appeal's committee is drawn over the whole seat stake, the liar's third included: the test holds
    # the validators (killed, journals kept) while it picks the committees' seeds — the honest node's judged
    # by an honest validator — and starts them again.
    for process in processes.values():
        roles.kill(process)
    deadlines = crucible.deadlines(task_id, 0)
    warp(crucible, deadlines.validate)
    roles.wait_for("both disputes", lambda: all(crucible.dispute_state(s).open for s in (honest_id, cheat_id)), 300)
    crucible = fix_dispute_seed_where(crucible.chain.rpc_url, deployment, dev[9], cheat_id, lambda view: True)
    crucible = fix_dispute_seed_where(crucible.chain.rpc_url, deployment, dev[9], honest_id,
                                      lambda view: liar not in view.dispute_committee(honest_id))  # fmt: skip
    for signer, key in validators.values():
        adversary = ["--adversary", "liar"] if signer.address == liar else []
        roles.start("validator", "--task", str(task_id), "--account", "env", "--rounds", "1", *adversary, key=key)

    def mine() -> None:  # a devnet mines only on traffic; a dispute's committee needs the next block
        crucible.chain.w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]

    reveal_dispute_votes(crucible, roles, [honest_id, cheat_id], tick=mine)
    roles.wait_for("both disputes resolved", lambda: len(crucible.events("TaskMarket", "DisputeResolved")) == 2,
                   300, tick=mine)  # fmt: skip
    roles.wait_for("an agreed checkpoint", lambda: crucible.events("TaskMarket", "CheckpointAgreed", taskId=task_id),
                   300, tick=mine)  # fmt: skip
    warp(crucible, max(deadlines.challenge, crucible.chain.now()))
    for process in roles.started:
        roles.wait_for(f"`{process.command}` to finish", lambda p=process: p.process.poll() is not None, 300, mine)
        assert process.process.returncode == 0, process.failed()

    # Broken version: drop the `_voted` look-ups in Validator._attest_assigned and the journal → the
    # restarted checker re-checks and sends a second commitment, which the contract refuses
    # (MarketAlreadyVoted, tolerated as a race) — the counts below still hold because the contract
    # is the last guard; removing `if (sub.committedMask & bits != 0)` from Votes.commit makes them 2.
    for event in ("AttestationCommitted", "Attested"):
        assert len(crucible.events("TaskMarket", event, submissionId=cheat_id, validator=checker)) == 1, event
    # Broken version for the dispute: NodeOptions.disputes_rejections returning False → no dispute, the
    # honest submission stays rejected and `resolved[honest_id]` raises KeyError.
    resolved = {int(e["submissionId"]): e for e in crucible.events("TaskMarket", "DisputeResolved")}
    # Committees as protocol/chain/assignment.py draws them: the market's, drawn by seat stake over the whole
    # seat stake from the prevrandao of the block each dispute named, whose seed a validator fixed.
    state = crucible.round(task_id, 0)
    members = crucible.members_of(task_id)[: state.validator_count]
    for sid in (honest_id, cheat_id):
        mix = bytes(crucible.chain.w3.eth.get_block(crucible.dispute_state(sid).seed_block)["mixHash"])
        drawn = committee_positions(dispute_seed(mix, sid), state.seat_stake, params.validators_per_check)
        assert holders(members, drawn) == crucible.dispute_committee(sid)
    # The wrongly rejected honest node won: accepted, paid, its bond back and its stake whole.
    assert resolved[honest_id]["upheld"] and not resolved[honest_id]["rejected"]
    assert [e["rejected"] for e in crucible.events("TaskMarket", "Settled", submissionId=honest_id)] == [False]
    assert credits(crucible, task_id, honest.address, 0) > 0
    assert credits(crucible, task_id, honest.address, 3) == params.dispute_bond_wei
    assert crucible.stake_account(honest.address).staked == 1200 * TOKEN
    # The lying validator: penalised for its vote, slashed.
    penalties = crucible.events("TaskMarket", "ValidatorPenalised", validator=liar)
    assert [int(e["submissionId"]) for e in penalties] == [honest_id]
    assert crucible.stake_account(liar).staked == 200 * TOKEN - params.validator_slash_wei
    # The cheat's frivolous dispute: lost, its bond paid to the committee, its stake slashed.
    assert not resolved[cheat_id]["upheld"] and resolved[cheat_id]["rejected"]
    assert credits(crucible, task_id, cheat.address, 3) == 0
    committee_shares = sum(credits(crucible, task_id, s.address, 4) for s, _ in validators.values())
    assert committee_shares >= params.dispute_bond_wei
    assert crucible.stake_account(cheat.address).staked == 1200 * TOKEN - params.slash_wei


def test_validator_run_refuses_bad_input_in_one_line_with_nothing_sent(
    crucible_home: Path, crucible: Crucible, dev: list[Signer], tmp_path: Path
) -> None:
    store = LocalStore(crucible_home / "store")
    env_cid = store.put(default_spec("arithmetic").canonical_bytes())
    task_id = crucible.create_task(dev[0], demo_task_params(), env_cid, env_cid)
    crucible.stake(dev[2], 600 * TOKEN, Role.TRAINER)
    crucible.stake(dev[4], 200 * TOKEN, Role.VALIDATOR)
    crucible_bin = str(Path(sys.executable).parent / "crucible")
    base = [crucible_bin, "--rpc", crucible.chain.rpc_url, "--deployment", str(tmp_path / "deployment.json")]
    base += ["validator", "run"]
    env = {**os.environ, "CRUCIBLE_HOME": str(crucible_home)}
    nonces = {s.address: crucible.chain.w3.eth.get_transaction_count(s.address) for s in dev}
    cases = [
        (["--task", str(task_id), "--account", "dev2"], "not as a validator"),
        (["--task", str(task_id), "--account", "dev3"], "free stake"),
        (["--task", "99", "--account", "dev4"], "unknown task 99"),
        (["--task", str(task_id), "--account", "dev4", "--adversary", "sneaky"], "unknown validator adversary"),
        (["--task", str(task_id), "--account", "dev4", "--device", "tpu"], "unknown device"),
        (["--task", str(task_id), "--account", "dev4", "--rounds", "0"], "--rounds"),
        (["--task", str(task_id), "--account", "nobody"], "nobody"),
    ]
    for args, fragment in cases:
        done = subprocess.run([*base, *args], capture_output=True, text=True, env=env, timeout=120)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and done.stdout == "", (args, done.stdout, done.stderr)
        assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], (args, done.stderr)
    assert nonces == {s.address: crucible.chain.w3.eth.get_transaction_count(s.address) for s in dev}
    assert crucible.validators_of(task_id) == []
