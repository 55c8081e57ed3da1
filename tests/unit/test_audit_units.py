"""The auditor's judgement, the money arithmetic, the explorer's input parsing, pagination and charts."""

from __future__ import annotations

import re

import pytest

from auditor.audit import Auditor
from auditor.index import plain
from auditor.money import MoneyCheck
from auditor.report import SubmissionAudit, Vote
from explorer.charts import line_chart
from explorer.views import BadInput, NotFound, paginate, parse_address, parse_cid, parse_submission
from protocol.work.checks import Verdict
from protocol.work.results import CheckResult

VALID = Verdict([CheckResult("availability", True), CheckResult("update", True)])
INVALID = Verdict([CheckResult("availability", True), CheckResult("rewards", False, reason="8 rewards differ")])


def submission(
    sampled: bool, rejected: bool, votes: list[bool], rerun: Verdict, seed_fixed: bool = True
) -> SubmissionAudit:
    audit = SubmissionAudit(
        submission=1, task_id=0, round_index=0, trainer="0xT", rollout_cid="r", update_cid="u", work_units=10,
        block=5, sampled=sampled, assigned=[f"0xV{i}" for i in range(len(votes))],
        votes=[Vote(f"0xV{i}", valid, "e", "attest") for i, valid in enumerate(votes)], disputed_by=None,
        dispute_upheld=None, rejected=rejected, settled=False, reward_wei=0, slashed_wei=0, base_round=0, rerun=rerun,
        seed_fixed=seed_fixed,
    )  # fmt: skip
    Auditor._judge(audit)
    return audit


def kinds(audit: SubmissionAudit) -> list[str]:
    return sorted(finding.kind for finding in audit.findings)


def test_an_unsampled_cheat_is_flagged_for_a_dispute() -> None:
    """Broken version: drop the `not verdict.valid and not audit.rejected` branch → no finding."""
    audit = submission(sampled=False, rejected=False, votes=[], rerun=INVALID)
    assert kinds(audit) == ["unsampled-cheat"]
    assert "rewards" in audit.findings[0].message and "dispute" in audit.findings[0].message


def test_a_cheat_before_its_check_seed_is_pending_not_accepted() -> None:
    assert kinds(submission(sampled=False, rejected=False, votes=[], rerun=INVALID, seed_fixed=False)) == [
        "pending-cheat"
    ]


def test_a_lazy_acceptance_flags_the_outcome_and_the_validator() -> None:
    audit = submission(sampled=True, rejected=False, votes=[True], rerun=INVALID)
    assert kinds(audit) == ["validator-disagrees", "wrong-outcome"]
    assert "0xV0" in next(f.message for f in audit.findings if f.kind == "validator-disagrees")


def test_a_wrong_rejection_is_flagged_and_the_lying_vote_named() -> None:
    audit = submission(sampled=True, rejected=True, votes=[False, True], rerun=VALID)
    assert kinds(audit) == ["validator-disagrees", "wrong-outcome"]
    messages = {finding.kind: finding.message for finding in audit.findings}
    assert "0xV0" in messages["validator-disagrees"] and "its trainer may dispute" in messages["wrong-outcome"]


def test_verdicts_that_match_the_rerun_give_no_finding() -> None:
    assert submission(sampled=True, rejected=True, votes=[False, False], rerun=INVALID).findings == []
    assert submission(sampled=True, rejected=False, votes=[True], rerun=VALID).findings == []
    assert submission(sampled=False, rejected=False, votes=[], rerun=VALID).findings == []


def test_money_balances_only_to_the_wei() -> None:
    credited = {"trainer_reward": 900, "validator_fee": 50, "finder_share": 250, "bond_returned": 50}
    books = MoneyCheck(bounty=1000, slashed=500, bonds=50, credited=credited, refunded=300, held=0)
    assert books.balanced and books.as_json()["difference_wei"] == "0"
    off = MoneyCheck(bounty=1000, slashed=500, bonds=50, credited=credited, refunded=300, held=1)
    assert not off.balanced and off.as_json()["difference_wei"] == "-1"


def test_explorer_input_is_parsed_or_refused_with_a_reason() -> None:
    assert parse_submission("0x10") == 16 and parse_submission("16") == 16
    for text in ("zzz", "1.5", str(2**256), "-1"):
        with pytest.raises(BadInput):
            parse_submission(text)
    assert parse_address("0x" + "ab" * 20).startswith("0x")
    with pytest.raises(BadInput, match="malformed address"):
        parse_address("0x1234")
    with pytest.raises(BadInput, match="malformed CID"):
        parse_cid("not-a-cid")


def test_pagination_bounds() -> None:
    items = list(range(120))
    assert paginate(items, 1)["items"] == list(range(50)) and paginate(items, 3)["items"] == list(range(100, 120))
    assert paginate([], 1) == {"page": 1, "pages": 1, "items": []}
    with pytest.raises(NotFound, match="there are 3"):
        paginate(items, 4)
    for page in (0, 10**7):
        with pytest.raises(BadInput):
            paginate(items, page)


def test_a_chart_draws_each_series_and_skips_missing_points() -> None:
    svg = line_chart("Accuracy", ["r0", "r1", "final"], {"greedy": [0.1, None, 0.3], "sampled": [0.2, 0.25, 0.4]})
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert len(re.findall(r"<circle ", svg)) == 5  # one point missing
    assert svg.count("<polyline") == 2 and "greedy" in svg and "sampled" in svg
    assert "no data yet" in line_chart("Empty", ["r0"], {"a": [None]})
    assert "&lt;b&gt;" in line_chart("<b>", ["r0"], {"a": [1.0]})  # titles are escaped


def test_decoded_event_values_become_json() -> None:
    from collections import namedtuple

    Params = namedtuple("Params", ["bounty", "rounds"])
    assert plain({"seed": b"\x01\x02", "params": Params(10, 2), "list": (b"\xff",)}) == {
        "seed": "0x0102",
        "params": {"bounty": 10, "rounds": 2},
        "list": ["0xff"],
    }


def test_a_commitment_not_revealed_is_shown_beside_the_votes() -> None:
    """The auditor lists who committed a hidden vote and whose commitment is not revealed (a reveal withheld past
    the validate deadline is slashed like a wrong vote). Broken version: count a dispute vote as the reveal →
    0xV2, whose only vote is a committee vote, drops out of `unrevealed`."""
    audit = submission(sampled=True, rejected=False, votes=[True], rerun=VALID)
    audit.committed = ["0xV0", "0xV1", "0xV2"]
    audit.votes.append(Vote("0xV2", True, "e", "dispute"))
    assert audit.unrevealed == ["0xV1", "0xV2"]
    shown = audit.as_json()
    assert shown["committed"] == ["0xV0", "0xV1", "0xV2"] and shown["unrevealed"] == ["0xV1", "0xV2"]
