// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {BaseTest} from "./BaseTest.sol";
import {ITaskMarket} from "../src/interfaces/ITaskMarket.sol";

/// @dev Votes nobody can copy: a validator commits to a hidden verdict in the commit phase and reveals it in the
///      reveal phase (the validate window's last quarter). Played as the copier would, in real time: these tests never
///      move the clock back (BaseTest's `_vote` does, to keep other tests short; these show why that is sound).
///      Default task as in TaskMarketLifecycle.t.sol: validator slash 10, 5 validators, 3 per check, p = 1.
contract CommitRevealTest is BaseTest {
    uint256 internal taskId;
    uint256 internal honest;
    uint256 internal cheat;

    function setUp() public override {
        super.setUp();
        taskId = _readyTask(_params());
        honest = _submit(taskId, 0, trainers[0], 300);
        cheat = _submit(taskId, 0, trainers[2], 200);
        _warpToValidate(taskId, 0);
    }

    /// @dev The copier's whole play: it waits to the commit phase's last second for someone's verdict, finds none (a
    ///      commitment shows nothing, a reveal is refused until the reveal phase), and once verdicts show it may no
    ///      longer commit: it earns no fee. On the contracts before commit-reveal (`attest` public at once) the copier
    ///      attested after the two checkers, with the majority, and was paid as a checker; with the commit phase
    ///      running to the validate deadline (mutant "commit-in-reveal-phase") or reveals open from its start
    ///      (mutant "reveal-in-commit-phase") this test fails.
    function test_ACopyingValidatorFindsNoVoteToCopy() public {
        address[] memory assigned = lens.assignedValidators(cheat);
        (address checkerA, address checkerB, address copier) = (assigned[0], assigned[1], assigned[2]);
        _commitVote(checkerA, cheat, false, "checked-a");
        _commitVote(checkerB, cheat, false, "checked-b");
        uint256 revealFrom = _revealFrom(cheat);
        vm.warp(revealFrom - 1);
        ITaskMarket.Submission memory seen = market.getSubmission(cheat);
        assertEq(seen.votedMask, 0, "no verdict is public in the commit phase");
        assertTrue(!seen.rejected, "nor is the outcome");
        (, uint256 validateDeadline,) = lens.deadlinesOf(taskId, 0);
        vm.expectRevert(
            abi.encodeWithSelector(
                ITaskMarket.MarketOutsideWindow.selector, revealFrom - 1, revealFrom, validateDeadline
            )
        );
        _revealVote(checkerA, cheat, false, "checked-a");

        vm.warp(revealFrom);
        _revealVote(checkerA, cheat, false, "checked-a");
        _revealVote(checkerB, cheat, false, "checked-b");
        assertTrue(market.getSubmission(cheat).rejected, "the checkers' verdicts show now");
        (uint256 submitDeadline,,) = lens.deadlinesOf(taskId, 0);
        vm.expectRevert(
            abi.encodeWithSelector(ITaskMarket.MarketOutsideWindow.selector, revealFrom, submitDeadline, revealFrom)
        );
        _commitVote(copier, cheat, false, "copied");

        _warpToFinal(taskId, 0);
        market.finaliseRound(taskId);
        market.settle(cheat);
        assertEq(market.creditOf(copier), 0, "the copier earns nothing");
        assertTrue(market.creditOf(checkerA) > 0 && market.creditOf(checkerB) > 0, "the checkers are paid");
    }

    /// @dev A copier that copies a checker's commitment from its event and, once the checker reveals, sends the same
    ///      verdict, evidence and salt: the commitment names its voter, so it opens for nobody else. With the voter
    ///      left out of `Ids.voteCommitment` (mutant "commitment-without-voter") the copy opens and this test fails.
    function test_RevertWhen_ACopiedCommitmentIsRevealed() public {
        address[] memory assigned = lens.assignedValidators(cheat);
        (address checker, address copier) = (assigned[0], assigned[2]);
        bytes32 commitment = _voteCommitment(checker, cheat, false, "checked");
        vm.prank(checker);
        market.commitAttestation(cheat, commitment);
        vm.prank(copier);
        market.commitAttestation(cheat, commitment); // read from the checker's AttestationCommitted event
        vm.warp(_revealFrom(cheat));
        _revealVote(checker, cheat, false, "checked");
        bytes32 salt = _voteSalt(checker, cheat); // public now, in the checker's reveal
        vm.prank(copier);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketRevealMismatch.selector, cheat, copier));
        market.attest(cheat, false, "checked", salt);
    }

    /// @dev A reveal opens only its own commitment: another verdict, another evidence CID, or no commitment at all is
    ///      refused. Without the comparison (mutant "reveal-unchecked") a validator could commit anything and reveal
    ///      what it saw, and this test fails.
    function test_RevertWhen_ARevealDoesNotOpenItsCommitment() public {
        address[] memory assigned = lens.assignedValidators(honest);
        _commitVote(assigned[0], honest, true, "checked");
        vm.warp(_revealFrom(honest));
        vm.prank(assigned[0]);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketRevealMismatch.selector, honest, assigned[0]));
        market.attest(honest, false, "checked", _voteSalt(assigned[0], honest));
        vm.prank(assigned[0]);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketRevealMismatch.selector, honest, assigned[0]));
        market.attest(honest, true, "other evidence", _voteSalt(assigned[0], honest));
        vm.prank(assigned[1]);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketNoCommitment.selector, honest, assigned[1]));
        market.attest(honest, true, "checked", _voteSalt(assigned[1], honest));
        _revealVote(assigned[0], honest, true, "checked");
        vm.prank(assigned[0]);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketNoCommitment.selector, honest, assigned[0]));
        market.attest(honest, true, "checked", _voteSalt(assigned[0], honest)); // a reveal counts once
    }

    /// @dev A lazy validator commits "valid" without checking, sees the checkers reveal "invalid", and withholds its
    ///      reveal to dodge the wrong vote's slash: the withheld reveal is slashed as the wrong vote would have been,
    ///      earns no fee, and kept its seat's stake answering until settled. Paying it as a missed check (mutant
    ///      "withheld-reveal-unpunished") makes withholding a free option and this test fails.
    function test_AWithheldRevealIsPenalisedLikeAWrongVote() public {
        address[] memory assigned = lens.assignedValidators(cheat);
        address lazy = assigned[0];
        _commitVote(lazy, cheat, true, "not checked");
        _commitVote(assigned[1], cheat, false, "checked-1");
        _commitVote(assigned[2], cheat, false, "checked-2");
        assertEq(market.seatOf(taskId, lazy).pendingVotes, 1, "its stake answers from the commitment");
        vm.warp(_revealFrom(cheat));
        _revealVote(assigned[1], cheat, false, "checked-1");
        _revealVote(assigned[2], cheat, false, "checked-2");
        _warpToFinal(taskId, 0);
        market.finaliseRound(taskId);
        uint256 before = stakes.accountOf(lazy).staked;
        vm.expectEmit();
        emit ITaskMarket.ValidatorMissed(cheat, lazy);
        vm.expectEmit();
        emit ITaskMarket.ValidatorPenalised(cheat, lazy, 10 * TOKEN);
        market.settle(cheat);
        assertEq(stakes.accountOf(lazy).staked, before - 10 * TOKEN, "slashed what the wrong vote costs");
        assertEq(market.creditOf(lazy), 0, "no fee");
        assertEq(market.seatOf(taskId, lazy).pendingVotes, 0, "answered for");
    }

    /// @dev The same play in a dispute's committee: three checkers wave a cheat through, an auditor disputes it, and
    ///      a committee member that waits to copy finds no vote before its commit phase closes, after which it may
    ///      not commit: the two that checked uphold the dispute and share the finder's share and the penalties; the
    ///      copier gets nothing. On the contracts before (`voteDispute` public at once) it voted last with the two
    ///      and took a third; with the dispute's reveals open from its start (mutant "dispute-reveal-in-commit-phase")
    ///      this test fails.
    function test_ACopyingCommitteeMemberFindsNoVoteToCopy() public {
        _attestAll(cheat, true);
        _warpToChallenge(taskId, 0);
        address[] memory committee = _disputeApart(auditor, cheat);
        (address memberA, address memberB, address copier) = (committee[0], committee[1], committee[2]);
        vm.prank(memberA);
        market.commitDisputeVote(cheat, _voteCommitment(memberA, cheat, false, "forged"));
        vm.prank(memberB);
        market.commitDisputeVote(cheat, _voteCommitment(memberB, cheat, false, "forged"));
        uint256 revealFrom = _disputeRevealFrom(cheat);
        uint256 deadline = market.getDispute(cheat).deadline;
        vm.warp(revealFrom - 1);
        assertEq(market.getDispute(cheat).votedMask, 0, "no committee vote is public in the commit phase");
        vm.prank(memberA);
        vm.expectRevert(
            abi.encodeWithSelector(ITaskMarket.MarketOutsideWindow.selector, revealFrom - 1, revealFrom, deadline)
        );
        market.voteDispute(cheat, false, "forged", _voteSalt(memberA, cheat));

        vm.warp(revealFrom);
        vm.prank(memberA);
        market.voteDispute(cheat, false, "forged", _voteSalt(memberA, cheat));
        vm.prank(memberB);
        market.voteDispute(cheat, false, "forged", _voteSalt(memberB, cheat));
        vm.prank(copier);
        vm.expectRevert(abi.encodeWithSelector(ITaskMarket.MarketOutsideWindow.selector, revealFrom, 0, revealFrom));
        market.commitDisputeVote(cheat, _voteCommitment(copier, cheat, false, "copied"));
        market.resolveDispute(cheat);
        assertTrue(market.getSubmission(cheat).rejected, "upheld by the two that checked");
        _warpToFinal(taskId, 0);
        market.finaliseRound(taskId);
        market.settle(cheat);
        assertEq(market.creditOf(copier), 0, "the copier gets nothing");
        assertTrue(market.creditOf(memberA) > 0 && market.creditOf(memberB) > 0, "the members that checked are paid");
    }
}
