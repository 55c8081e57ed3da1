"""Devnet helpers shared by the integration tests: funded accounts, small tasks, time warps and control
over the check and dispute seeds. (On the import path through pytest's `pythonpath` setting.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.accounts import Signer
from protocol.artifacts.store import LocalStore
from protocol.chain import devnet
from protocol.chain.client import Crucible
from protocol.chain.connection import Chain
from protocol.chain.deployment import Deployment
from protocol.chain.params import TaskParams, demo_task_params
from protocol.chain.seeds import HASH_HORIZON
from protocol.ml.envs.spec import EnvSpec, default_spec

TOKEN = 10**18
LONG_S = 3600  # windows the test ends by warping the clock, never by waiting
# The test chains mine a block every second, as a real chain does: several senders share blocks and
# time passes on its own. A test that must decide which block holds what mines by hand (`manual_mining`).
BLOCK_TIME_S = 1


@contextmanager
def manual_mining(crucible: Crucible) -> Iterator[None]:
    """No blocks but the test's own (`evm_mine`): transactions wait in the pool. The interval mining
    comes back afterwards, whatever happened."""
    provider = crucible.chain.w3.provider
    provider.make_request("evm_setIntervalMining", [0])  # type: ignore[arg-type]
    provider.make_request("evm_setAutomine", [False])  # type: ignore[arg-type]
    try:
        yield
    finally:
        provider.make_request("evm_setIntervalMining", [BLOCK_TIME_S])  # type: ignore[arg-type]


def funded_account(crucible: Crucible, funder: Signer, label: str) -> tuple[Signer, str]:
    """A fresh account (key derived from `label`) with devnet ether and 5,000 tokens, and its key."""
    return devnet.funded_account(crucible, funder, f"crucible-test-{label}", 5000 * TOKEN, name=label)


def fix_check_seed_where(
    rpc_url: str, deployment: Deployment, keeper: Signer, task_id: int, wanted: Callable[[Crucible], bool]
) -> Crucible:
    """Fixes the current round's check seed at its submission deadline, re-rolling (evm_snapshot /
    evm_revert, another seed block each time) until `wanted` holds: a test's control over the devnet's
    randomness, as forge's `vm.prevrandao` would be. Every try uses a fresh connection (nonces)."""

    def fix(crucible: Crucible, attempt: int) -> None:
        task = crucible.task(task_id)
        deadline = crucible.deadlines(task_id, task.current_round).submit
        crucible.chain.w3.provider.make_request("evm_setNextBlockTimestamp", [deadline + attempt])  # type: ignore[arg-type]
        # The request is sent with a fixed gas limit: estimating would run at the current time, before the
        # deadline. Then blocks past the one it names, and the fix.
        w3 = crucible.chain.w3
        transaction = crucible.market.functions.fixCheckSeed(task_id, b"").build_transaction(
            {"from": keeper.address, "gas": 300_000, "nonce": w3.eth.get_transaction_count(keeper.address),
             "chainId": crucible.chain.chain_id}
        )  # fmt: skip
        receipt = w3.eth.wait_for_transaction_receipt(w3.eth.send_raw_transaction(keeper.sign_transaction(transaction)))
        assert receipt["status"] == 1
        devnet.finish_check_seed(crucible, keeper, task_id)
        assert crucible.round(task_id, task.current_round).check_seed != bytes(32)

    return _reroll(rpc_url, deployment, fix, wanted, "check seed")


def fix_dispute_seed_where(
    rpc_url: str, deployment: Deployment, keeper: Signer, submission: int, wanted: Callable[[Crucible], bool]
) -> Crucible:
    """Fixes an open dispute's committee seed, re-rolling as `fix_check_seed_where` does until `wanted` holds.
    A seed block already mined has its prevrandao out: the try first lets its hash pass the 256-block horizon
    and moves it (the market's block-moving call), so each try's block is a fresh one. Nothing else may send
    transactions meanwhile (a re-roll drops them): stop the role processes first."""

    def fix(crucible: Crucible, attempt: int) -> None:
        if crucible.chain.block_number() > crucible.dispute_state(submission).seed_block:
            crucible.chain.w3.provider.make_request("anvil_mine", [hex(HASH_HORIZON + 1)])  # type: ignore[arg-type]
            assert crucible.fix_dispute_seed(keeper, submission) is not None
            assert crucible.dispute_state(submission).seed == bytes(32), "the block moved"
        devnet.finish_dispute_seed(crucible, keeper, submission)

    return _reroll(rpc_url, deployment, fix, wanted, "dispute seed")


def _reroll(
    rpc_url: str,
    deployment: Deployment,
    fix: Callable[[Crucible, int], None],
    wanted: Callable[[Crucible], bool],
    what: str,
) -> Crucible:
    """Runs `fix(crucible, attempt)` after `attempt` empty blocks under an evm_snapshot until `wanted` holds,
    reverting otherwise: each try's seed block comes later (Anvil draws each block's prevrandao afresh)."""
    for attempt in range(100):
        crucible = Crucible(Chain(rpc_url), deployment)
        provider = crucible.chain.w3.provider
        snapshot = provider.make_request("evm_snapshot", [])["result"]  # type: ignore[arg-type]
        for _ in range(attempt):
            provider.make_request("evm_mine", [])  # type: ignore[arg-type]
        fix(crucible, attempt)
        if wanted(crucible):
            return crucible
        provider.make_request("evm_revert", [snapshot])  # type: ignore[arg-type]
    raise AssertionError(f"no {what} gave the wanted draw in 100 tries")


def distinct_checks(*submissions: int) -> Callable[[Crucible], bool]:
    """A `fix_check_seed_where` wish: each of `submissions` is checked by distinct validators. Stake-weighted
    draws may give one validator several positions (tests/unit/test_checks.py and contracts/test/
    StakeWeightedSeats.t.sol test that); this lets a test speak of "the three assigned validators"."""

    def distinct(view: Crucible) -> bool:
        drawn = [view.assigned_validators(submission) for submission in submissions]
        return all(len(set(holders)) == len(holders) for holders in drawn)

    return distinct


def warp(crucible: Crucible, timestamp: int) -> None:
    from protocol.chain import devnet

    devnet.warp_to(crucible.chain, timestamp)


def reveal_votes(
    crucible: Crucible, roles: Any, task_id: int, round_index: int, votes: int, timeout: int = 600
) -> None:
    """The validators' two steps, each in its phase: waits for `votes` commitments on the round's submissions (the
    commit phase's work), moves the clock to the round's reveal phase, and waits for as many reveals."""

    def count(event: str) -> int:
        sids = [int(e["submissionId"]) for e in crucible.submissions(task_id, round_index)]
        return sum(len(crucible.events("TaskMarket", event, submissionId=sid)) for sid in sids)

    roles.wait_for(
        f"{votes} commitments in round {round_index}", lambda: count("AttestationCommitted") >= votes, timeout
    )
    warp(crucible, crucible.deadlines(task_id, round_index).votes_revealed_from)
    roles.wait_for(f"{votes} reveals in round {round_index}", lambda: count("Attested") >= votes, timeout)


def reveal_dispute_votes(
    crucible: Crucible, roles: Any, submissions: list[int], timeout: int = 300, tick: Callable[[], None] | None = None
) -> None:
    """A dispute committee's two steps: waits until every position of each dispute's committee is committed to,
    then moves the clock to the latest of their reveal phases (the members reveal there)."""
    size = crucible.task(submissions[0] >> 192).validators_per_check

    def committed() -> bool:
        return all(crucible.dispute_state(s).committed_mask.bit_count() == size for s in submissions)

    roles.wait_for("every committee position committed to", committed, timeout, tick=tick)
    warp(crucible, max(crucible.dispute_votes_revealed_from(s) for s in submissions))


def credits(crucible: Crucible, task_id: int, address: str, kind: int) -> int:
    """Tokens credited to `address` in the task for one CreditKind (0 reward, 1 fee, 2 finder, 3 bond, 4 committee)."""
    return sum(
        int(e["amount"])
        for e in crucible.events("TaskMarket", "Credited", taskId=task_id, account=address)
        if int(e["kind"]) == kind
    )


@dataclass
class DevnetTask:
    """A task on the test's devnet with time-warped windows, a small arithmetic spec and its store."""

    task_id: int
    params: TaskParams
    spec: EnvSpec
    store: LocalStore
    model_cid: str


def create_small_task(
    crucible: Crucible, home: Path, model_cid: str, creator: Signer, prompts: int, **changes: int
) -> DevnetTask:
    """Creates a task of `prompts` prompts x 4 samples a round, windows long enough to end only by warping."""
    store = LocalStore(home / "store")
    spec = default_spec("arithmetic")
    spec.training.prompts_per_round, spec.training.group_size = prompts, 4
    windows = {"submit_window_s": LONG_S, "validate_window_s": LONG_S, "challenge_window_s": LONG_S}
    params = demo_task_params(**(windows | changes))
    task_id = crucible.create_task(creator, params, model_cid, store.put(spec.canonical_bytes()))
    return DevnetTask(task_id, params, spec, store, model_cid)
