// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Test} from "../utils/Test.sol";
import {Handler} from "./Handler.sol";
import {ITaskMarket} from "../../src/interfaces/ITaskMarket.sol";
import {IStakeManager} from "../../src/interfaces/IStakeManager.sol";

/// @dev The spec's seven safety properties under random sequences of every lifecycle call
///      (forge finds `invariant*` functions and asks `targetContracts()` what to call).
///      Each invariant was seen to fail on a deliberately broken contract; `make mutants`
///      (scripts/mutants.py) applies each break to a copy of the contracts and re-runs this
///      suite, and fails unless every break is caught. The breaks are listed beside each one.
contract TaskMarketInvariantTest is Test {
    Handler internal handler;

    function setUp() public virtual {
        handler = new Handler(8, 0);
    }

    function targetContracts() public view returns (address[] memory targets) {
        targets = new address[](1);
        targets[0] = address(handler);
    }

    /// Property 1, tokens conserved: the market holds, to the wei, each task's pool, every round
    /// budget not yet credited, the open bonds (the handler's own count) and the unclaimed credits;
    /// the stake manager holds every operator's staked and unbonding tokens.
    /// Broken by: paying a check fee without taking it from the round's fee budget (mutant "fee-not-debited").
    function invariant_tokensConserved() public view {
        ITaskMarket.Task memory task = handler.market().getTask(handler.taskId());
        uint256 expected = task.pool + handler.market().totalCredits() + handler.ghost_openBonds();
        uint256 perRound = task.bounty / task.rounds;
        for (uint256 r = 0; r < task.rounds; ++r) {
            ITaskMarket.Round memory rd = handler.market().getRound(handler.taskId(), r);
            if (rd.finalised) expected += rd.trainerBudgetRemaining + rd.feeRemaining;
            else expected += r == task.rounds - 1 ? task.bounty - perRound * (task.rounds - 1) : perRound;
        }
        assertEq(handler.token().balanceOf(address(handler.market())), expected, "market balance");
        uint256 staked;
        for (uint256 i = 0; i < handler.trainerCount(); ++i) {
            staked += handler._stakeOf(handler.trainers(i));
        }
        for (uint256 i = 0; i < handler.validatorCount(); ++i) {
            staked += handler._stakeOf(handler.validators(i));
        }
        assertEq(handler.token().balanceOf(address(handler.stakes())), staked, "stake manager balance");
    }

    /// Randomness nobody steers (issue 17): whoever fixes a round's check seed, in whatever block (the
    /// handler's `grindSeed` calls it from any actor up to 300 blocks on), the seed is the hash of the
    /// block its request named. Broken by: taking the seed from the fixing call's own block (mutant
    /// "seed-from-callers-block", also caught by a unit test).
    function invariant_seedsNotSteered() public view {
        assertEq(handler.ghost_steeredSeeds(), 0, "a check seed not from its requested block");
    }

    /// Unverified stays unverified: once a round's validate deadline passed without a check seed (the
    /// campaign's warps skip past it), a validator that joins then (`joinLate`, a cheat's sybil in the attack)
    /// cannot fix one, so the round is finalised unverified and nothing in it is paid or slashed. Broken by:
    /// letting `fixCheckSeed` seed a round past its validate deadline (mutant "late-seed").
    function invariant_unverifiedStaysUnverified() public view {
        assertEq(handler.ghost_lateSeeds(), 0, "a check seed fixed after its round's validate deadline");
    }

    /// Property 2, paid at most once: a settled submission never settles again.
    /// Removing `sub.settled = true` (mutant "resettle") is not reached by this campaign: the stake
    /// lock and the round's remaining units refuse most second settlements on their own. The state
    /// where only the flag protects is built by test_RevertWhen_SettleTwiceWhileLockedElsewhere,
    /// which the mutant makes fail.
    function invariant_settledAtMostOnce() public view {
        assertEq(handler.ghost_doubleSettles(), 0, "a submission settled twice");
    }

    /// A revealed canary's owner is neither slashed nor paid, and every position that voted it valid is slashed.
    /// Broken by: settling a revealed canary as rejected work (mutant "canary-owner-slashed"). A reveal that leaves
    /// an accepted canary accepted (mutant "canary-voters-unpunished") shows only where liars hold a check's
    /// majority, seldom here: test_LazyValidatorsSlashedAndTheCatcherPaid builds that case and is its check.
    function invariant_canariesChargeTheVotersNotTheOwner() public view {
        assertEq(handler.ghost_canaryOwnersCharged(), 0, "a canary's owner was slashed or paid");
        assertEq(handler.ghost_canaryValidVotesUnslashed(), 0, "a valid vote on a canary went unslashed");
    }

    /// Property 3: with an honest majority in every assignment, no honest trainer is slashed.
    /// Rejecting on the first invalid vote instead of a majority (mutant "first-vote-rejects") breaks it
    /// only in runs where the liar votes first on honest work; test_ALoneInvalidVoteCastFirstDoesNotReject
    /// builds that case and is the mutant's check.
    function invariant_honestTrainerNeverSlashed() public view {
        assertEq(handler.ghost_honestSlashed(), 0, "an honest trainer was slashed");
    }

    /// Property 4: with an honest majority, every sampled invalid submission is slashed.
    /// Requiring every position to vote invalid (mutant "unanimity") lets cheats through the check, but
    /// the campaign's auditor disputes them and an honest committee overturns it, so the mutant is
    /// caught by test_TwoInvalidVotesOfThreeReject instead.
    function invariant_sampledCheatAlwaysSlashed() public view {
        assertEq(handler.ghost_sampledCheatsUnslashed(), 0, "a sampled cheat went unslashed");
    }

    /// Property 5: a claim pays its caller what it was owed and touches nobody else's credit.
    /// Broken by: `claim` paying the whole credit of the caller twice over (mutant "claim-twice").
    function invariant_nobodyTakesAnothersFunds() public view {
        assertEq(handler.ghost_foreignClaims(), 0, "a claim moved someone else's funds");
    }

    /// Property 6: no two submissions share a commitment (chain, contract, task, round, trainer bound).
    /// Broken by: leaving the round out of the commitment (mutant "commitment-without-round").
    function invariant_commitmentsNeverRepeat() public view {
        assertEq(handler.ghost_commitmentRepeats(), 0, "a commitment repeated");
    }

    /// Validators answer for their votes (issue 17): none leaves a task with a vote unsettled.
    /// Dropping the pending-votes check from `leaveTask` (mutant "leave-with-pending-votes") is rarely
    /// reached here: a run seldom ends the 3-round task and then leaves before settling. It is caught
    /// by test_RevertWhen_LeavingBeforeTheVoteIsSettled; HandlerReachTest shows this action reaches
    /// both the refused and the allowed leave.
    function invariant_votesAnsweredBeforeLeaving() public view {
        assertEq(handler.ghost_leftWithVotesUnsettled(), 0, "a validator left with a vote unsettled");
    }

    /// Votes nobody can copy: no verdict (an attestation's or a committee member's) shows before its reveal phase,
    /// and no validator that had not committed got a commitment in once one did. Broken by: reveals open from the
    /// commit phase's start (mutant "reveal-in-commit-phase"), or commitments taken to the validate deadline
    /// (mutant "commit-in-reveal-phase").
    function invariant_noVoteCopied() public view {
        assertEq(handler.ghost_verdictsBeforeReveal(), 0, "a verdict showed before its reveal phase");
        assertEq(handler.ghost_copiedCommitments(), 0, "a copier committed after verdicts showed");
    }

    /// Property 7: the gas of the hot calls stays within the documented bounds whatever happened
    /// before (measured inside the handler, without the 21,000 intrinsic gas of a transaction; a vote is two calls,
    /// its commitment and its reveal, each bounded).
    /// Broken by: a loop over all the task's validators in `attest` (mutant "attest-loops-validators").
    function invariant_gasWithinBounds() public view {
        assertTrue(handler.ghost_maxSubmitGas() <= 80_000, "submitWork over 80k");
        assertTrue(handler.ghost_maxCommitGas() <= 80_000, "commitAttestation over 80k");
        assertTrue(handler.ghost_maxRevealGas() <= 80_000, "attest (the reveal) over 80k");
        assertTrue(handler.ghost_maxClaimGas() <= 60_000, "claim over 60k");
    }

    /// Pipelined rounds (issue 18): a submission's base is agreed, not after its round, and at most
    /// `maxStaleness` rounds behind it (every base the handler tries, in the bound or not, is judged
    /// against that rule), and every base in the bound is taken.
    /// Broken by: taking a base that is not agreed yet (mutant "base-not-agreed") or one beyond the bound
    /// (mutant "staleness-unbounded").
    function invariant_basesWithinBound() public view {
        assertEq(handler.ghost_basesOutOfBoundAccepted(), 0, "a base out of the bound was taken");
        assertEq(handler.ghost_basesInBoundRefused(), 0, "a base in the bound was refused");
    }

    /// Rounds finalise in order, and open ahead of finality no further than the bound allows.
    /// Broken by: opening rounds ahead without the bound (mutant "open-ahead-unbounded").
    function invariant_roundsInOrderAndBounded() public view {
        assertEq(handler.ghost_finalisedOutOfOrder(), 0, "a round finalised out of order");
        assertEq(handler.ghost_openedBeyondBound(), 0, "a round opened beyond the staleness bound");
    }
}

/// @dev Every invariant above again, on a task whose rounds overlap: `maxStaleness` 2, so up to three
///      rounds take work at once and submissions build on checkpoints up to two rounds old.
contract TaskMarketPipelinedInvariantTest is TaskMarketInvariantTest {
    function setUp() public override {
        handler = new Handler(8, 2);
    }
}
