"""The client's view calls against web3's own: `Chain.call` does the ABI work once per function
(protocol/chain/views.py) and must give what web3's `call()` gives."""

from __future__ import annotations

from typing import Any

from protocol.accounts import Signer
from protocol.chain.client import Crucible
from protocol.chain.params import TaskParams


def plain(value: Any) -> Any:
    """A result with its shape spelled out: structs as dicts of their field names, arrays and tuples as lists."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {name: plain(item) for name, item in zip(value._fields, value, strict=True)}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return (type(value).__name__, value)


def assert_views_match_web3(
    crucible: Crucible, task_id: int, disputed: int, dev: list[Signer], params: TaskParams
) -> None:
    """`Chain.call` (the ABI work done once per function) gives what web3's own `call()` gives, field names,
    checksummed addresses and value types included, for every view the client reads, on a round with seats,
    attestations and an open dispute. Broken version: leaving addresses as eth_abi decodes them (lower case),
    or structs as plain tuples, fails here."""
    market, lens, stakes, token = (
        crucible.market.functions,
        crucible.lens.functions,
        crucible.stakes.functions,
        crucible.token.functions,
    )
    trainer, validator = dev[3].address, dev[4].address
    calls = [
        market.taskCount(), market.getTask(task_id), market.getRound(task_id, 0), market.getSubmission(disputed),
        market.getDispute(disputed), market.seatOf(task_id, validator), market.creditOf(validator),
        market.membersOf(task_id), market.hasProposed(task_id, 0, validator),
        lens.deadlinesOf(task_id, 0), lens.finalFromOf(task_id, 0), lens.isSampled(disputed),
        lens.assignedValidators(disputed), lens.aggregatorsOf(task_id, 0), lens.disputeCommittee(disputed),
        lens.commitmentOf(task_id, 0, 0, trainer, bytes(range(32))), lens.submissionIdOf(task_id, 0, trainer),
        lens.deterrenceOf(params.as_contract_tuple()), lens.honestMajority(333_333, 3),
        lens.maxSubmissionReward(10**21, 2, 1000), stakes.accountOf(validator), token.balanceOf(trainer),
        token.allowance(trainer, crucible.market.address), token.decimals(), token.symbol(),
    ]  # fmt: skip
    for function in calls:
        assert plain(crucible.chain.call(function)) == plain(function.call()), function.abi_element_identifier
