"""Break the contracts on purpose, one way at a time, and check the invariant suite catches each.

Each mutant is a text replacement in a copy of the Foundry project; the suite must then fail
the invariant named beside it. Exit status is non-zero unless every mutant is caught.
Run with `make mutants` (it is part of `make test`).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKET = "contracts/src/TaskMarket.sol"
IDS = "contracts/src/libraries/Ids.sol"
PARAMS = "contracts/src/libraries/Params.sol"
PULL = "contracts/src/libraries/Pull.sol"
DRAWS = "contracts/src/libraries/Draws.sol"
DISPUTES = "contracts/src/libraries/Disputes.sol"
CANARIES = "contracts/src/libraries/Canaries.sol"
VOTES = "contracts/src/libraries/Votes.sol"
REVEAL_RULES = "test_RevertWhen_RevealBreaksARule"
LIMITS = "test_RevertWhen_LimitBroken"
# The platform binary itself: the npm wrapper in node_modules/.bin exits 0 even when tests fail.
ARCH = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}[platform.machine()]
FORGE = ROOT / f"node_modules/@foundry-rs/forge-linux-{ARCH}/bin/forge"

# (name, file, original text, broken text, the invariant or test that must fail)
MUTANTS = [
    (
        "fee-not-debited",
        MARKET,
        "            rd.feeRemaining -= uint128(share);\n",
        "",
        "invariant_tokensConserved",
    ),
    (
        "resettle",
        MARKET,
        "        sub.settled = true;\n",
        "",
        "test_RevertWhen_SettleTwiceWhileLockedElsewhere",
    ),
    (
        "first-vote-rejects",
        VOTES,
        "if (!sub.rejected && 2 * Draws.popcount(sub.invalidMask) > task.validatorsPerCheck) {",
        "if (!sub.rejected) {",
        "test_ALoneInvalidVoteCastFirstDoesNotReject",
    ),
    (
        "unanimity",
        VOTES,
        "if (!sub.rejected && 2 * Draws.popcount(sub.invalidMask) > task.validatorsPerCheck) {",
        "if (!sub.rejected && Draws.popcount(sub.invalidMask) == task.validatorsPerCheck) {",
        "test_TwoInvalidVotesOfThreeReject",
    ),
    (
        "claim-twice",
        MARKET,
        "token.safeTransfer(msg.sender, amount);\n    }\n\n    /// @inheritdoc ITaskMarket\n    function refund",
        "token.safeTransfer(msg.sender, 2 * amount);\n    }\n\n    /// @inheritdoc ITaskMarket\n    function refund",
        "invariant_nobodyTakesAnothersFunds",
    ),
    (
        "commitment-without-round",
        IDS,
        "abi.encode(block.chainid, market, taskId, round, baseRound, trainer, proofsDigest)",
        "abi.encode(block.chainid, market, taskId, trainer, proofsDigest)",
        "invariant_commitmentsNeverRepeat",
    ),
    (
        "attest-loops-validators",
        VOTES,
        "        sub.votedMask |= uint16(bits);\n",
        "        sub.votedMask |= uint16(bits);\n"
        "        for (uint256 i = 0; i < 64 * uint256(rd.validatorCount); ++i) rd.seedBlock = rd.seedBlock;\n",
        "invariant_gasWithinBounds",
    ),
    # One break per creation limit (issue 17): each lets through what test_RevertWhen_LimitBroken expects refused.
    ("rounds-unbounded", PARAMS, '_atMost("rounds", p.rounds, MAX_ROUNDS);', "", LIMITS),
    ("validator-stake-zero", PARAMS, '_atLeast("minValidatorStake", p.minValidatorStake, 1);', "", LIMITS),
    ("validator-slash-zero", PARAMS, '_atLeast("validatorSlash", p.validatorSlash, 1);', "", LIMITS),
    (
        "validator-slash-too-big",
        PARAMS,
        '_atMost("validatorSlash", p.validatorSlash, p.minValidatorStake);',
        "",
        LIMITS,
    ),
    ("bond-below-floor", PARAMS, '_atLeast("disputeBond", p.disputeBond, p.validatorSlash);', "", LIMITS),
    ("windows-unbounded", PARAMS, "MIN_WINDOW = 5;", "MIN_WINDOW = 1;", LIMITS),
    # Validators answer for their votes (issue 17): leaving with a vote unsettled, voting once benched.
    (
        "leave-with-pending-votes",
        "contracts/src/libraries/Seats.sol",
        "if (seat.pendingVotes != 0) revert",
        "if (false) revert",
        "test_RevertWhen_LeavingBeforeTheVoteIsSettled",
    ),
    (
        "benched-still-votes",
        MARKET,
        "if (seat.benched) revert",
        "if (false) revert",
        "test_SlashedBelowTheMinimumLosesItsSeat",
    ),
    (
        "benched-still-attests",
        VOTES,
        "if (seat.benched) revert",
        "if (false) revert",
        "test_SlashedBelowTheMinimumLosesItsSeat",
    ),
    # Votes nobody can copy: commit-reveal attestations.
    (
        "commit-in-reveal-phase",
        VOTES,
        "Ids.within(submitDeadline, Ids.revealFrom(validateDeadline, task.validateWindow));",
        "Ids.within(submitDeadline, validateDeadline);",
        "test_ACopyingValidatorFindsNoVoteToCopy",
    ),
    (
        "reveal-in-commit-phase",
        VOTES,
        "Ids.within(Ids.revealFrom(validateDeadline, task.validateWindow), validateDeadline);",
        "Ids.within(0, validateDeadline);",
        "test_ACopyingValidatorFindsNoVoteToCopy",
    ),
    (
        "commitment-without-voter",
        IDS,
        "abi.encode(id, voter, valid, evidenceCid, salt)",
        "abi.encode(id, valid, evidenceCid, salt)",
        "test_RevertWhen_ACopiedCommitmentIsRevealed",
    ),
    (
        "reveal-unchecked",
        VOTES,
        "if ((opened ^ stored) >> 16 != 0) revert",
        "if (opened == 0) revert",
        "test_RevertWhen_ARevealDoesNotOpenItsCommitment",
    ),
    (
        "withheld-reveal-unpunished",
        MARKET,
        "            if (sub.committedMask & bit == 0) continue;\n",
        "            if (!revealed) continue;\n",
        "test_AWithheldRevealIsPenalisedLikeAWrongVote",
    ),
    (
        "dispute-reveal-in-commit-phase",
        DISPUTES,
        "Ids.within(_revealFrom(task, d), d.deadline);",
        "Ids.within(0, d.deadline);",
        "test_ACopyingCommitteeMemberFindsNoVoteToCopy",
    ),
    # Randomness nobody steers (issue 17): the seed from the caller's block again; a lost dispute block
    # replaced by the voter's choice of parent again.
    (
        "seed-from-block-hash",
        MARKET,
        "bytes32 seed = Draws.checkSeedFrom(mix, taskId, round);",
        "bytes32 seed = Draws.checkSeedFrom(blockhash(at), taskId, round);",
        "test_TheSeedBlocksProducerCannotChooseTheSeed",
    ),
    (
        "dispute-block-chosen",
        DISPUTES,
        "if (blockhash(at) == 0) {",
        "if (blockhash(at) == 0) {\n"
        "            d.seed = Draws.disputeSeedFrom(blockhash(block.number - 1), submissionId);\n"
        "            return;\n        }\n        if (false) {",
        "test_ALostDisputeBlockIsReplacedNotChosen",
    ),
    (
        "late-seed",
        MARKET,
        "if (rd.checkSeed == 0 && block.timestamp < validateDeadline)",
        "if (rd.checkSeed == 0)",
        "test_AnUnverifiedRoundStaysUnverified",
    ),
    (
        "appeal-unpriced",
        PARAMS,
        '_atLeast("disputeBond", p.disputeBond, leastDisputeBond(p, honest));',
        "",
        "test_RevertWhen_TheAppealPays",
    ),
    (
        "finder-share-unpriced",
        PARAMS,
        "kept += term * (slash * perCheck * BPS - finderBps * slash * (perCheck - h)) / (perCheck * BPS);",
        "kept += term * slash;",
        "test_RevertWhen_ColludersTakeTheFindersShareBack",
    ),
    (
        "bond-free-without-majority",
        DISPUTES,
        "        if (upheld) {\n            Payouts.credit(",
        "        if (upheld || 2 * Draws.popcount(againstMask) <= size) {\n            Payouts.credit(",
        "test_DisputeWithoutMajorityLosesItsBond",
    ),
    # Seats by stake and deterrence that counts collusion (issue 17): a seat that weighs the minimum
    # whatever it locked; a range whose end counts as inside (split seats then hold more); a round checked
    # by fewer validators than a check needs; ties counted as honest majorities; a colluding majority.
    (
        "seat-weighs-minimum",
        MARKET,
        "seat.stake = (from + stake).toUint96() - uint96(from);",
        "seat.stake = task.minValidatorStake;",
        "test_OneSeatOfTenTimesTheStakeWeighsTenSeats",
    ),
    (
        "range-end-inside",
        DRAWS,
        "drawn[j] - from < stake",
        "drawn[j] - from <= stake",
        "testFuzz_SplittingStakeBuysNothing",
    ),
    (
        "too-few-validators-checked",
        MARKET,
        "if (count < task.validatorsPerCheck) revert",
        "if (false) revert",
        "test_TooFewValidatorsPayNothingAndStrandNothing",
    ),
    (
        "dispute-on-unverified-round",
        DISPUTES,
        "if (rd.checkSeed == 0) revert ITaskMarket.MarketNoCommittee(submissionId);",
        "",
        "test_RevertWhen_DisputeWithoutCommittee",
    ),
    ("ties-count-honest", PARAMS, "2 * h > perCheck", "2 * h >= perCheck", "test_HonestMajorityIsExactWhereItCanBe"),
    (
        "colluding-majority-allowed",
        PARAMS,
        '_atMost("colludingSharePpm", p.colludingSharePpm, PPM / 2 - 1);',
        "",
        "test_RevertWhen_ColludingShareIsAMajority",
    ),
    # Pipelined rounds (issue 18): a base not agreed, a base beyond the bound, rounds opened ahead without
    # the bound, a round final before its aggregators had a window on its checkpoint, a commitment that
    # does not bind the base.
    (
        "base-not-agreed",
        MARKET,
        "if (baseRound > current || baseRound > round ||",
        "if (baseRound > round ||",
        "test_RevertWhen_BaseNotAgreed",
    ),
    (
        "staleness-unbounded",
        MARKET,
        " || round - baseRound > task.maxStaleness) {",
        ") {",
        "test_RevertWhen_BaseTooOld",
    ),
    (
        "open-ahead-unbounded",
        PARAMS,
        "if (next >= task.rounds || next - task.currentRound > task.maxStaleness) {",
        "if (next >= task.rounds) {",
        "test_RevertWhen_OpenAheadWithStalenessZero",
    ),
    (
        "finalise-before-checkpoint-window",
        MARKET,
        "_within(_finalFrom(task, rd), type(uint256).max);",
        "_within(rd.openedAt + task.submitWindow + task.validateWindow + task.challengeWindow, type(uint256).max);",
        "test_FinaliseFixesTheCheckpointOfTheRoundOpenedAhead",
    ),
    (
        "commitment-without-base",
        IDS,
        "abi.encode(block.chainid, market, taskId, round, baseRound, trainer, proofsDigest)",
        "abi.encode(block.chainid, market, taskId, round, trainer, proofsDigest)",
        "test_CommitmentCannotBeReplayed",
    ),
    # Canaries: a reveal before the votes or late in the challenge window, by anyone, with any salt, beyond the
    # rate; a rate above half; a revealed canary settled as a cheat, its valid voters paid, its catchers unpaid,
    # its units left out of the split once caught; a false canary nobody but its owner may appeal.
    ("canary-reveal-early", CANARIES, "Ids.within(validateDeadline, ", "Ids.within(0, ", REVEAL_RULES),
    ("canary-reveal-late", CANARIES, "task.challengeWindow / 2);", "task.challengeWindow);", REVEAL_RULES),
    ("canary-any-salt", CANARIES, " || sub.tag != Ids.canaryTag(salt, submissionId)", "", REVEAL_RULES),
    ("canary-by-anyone", CANARIES, "if (msg.sender != task.creator) revert", "if (false) revert", REVEAL_RULES),
    (
        "canary-rate-unbounded",
        CANARIES,
        "if ((canaries + 1) * PPM > rate * rd.submissionCount ||",
        "if (",
        "test_RevertWhen_MoreCanariesThanTheRate",
    ),
    (
        "canary-rate-rounds-up",
        CANARIES,
        "if ((canaries + 1) * PPM > rate * rd.submissionCount ||",
        "if (canaries * PPM >= rate * rd.submissionCount ||",
        "test_RevertWhen_TheRateRoundsToNoCanary",
    ),
    (
        "bond-unbounded-above",
        PARAMS,
        'if (honest < ONE) _atMost("disputeBond", p.disputeBond, mostDisputeBond(p, honest));',
        "",
        "testFuzz_CheatingNeverPays",
    ),
    (
        "dispute-own-vote",
        DISPUTES,
        "if (!sub.rejected && _votedValid(task, rd, sub, seat, submissionId)) {",
        "if (false) {",
        "test_RevertWhen_ALazyCheckerDisputesItsOwnVote",
    ),
    (
        "canary-rate-above-half",
        PARAMS,
        '_atMost("canaryRatePpm", p.canaryRatePpm, PPM / 2);',
        "",
        "test_RevertWhen_CanaryRateAboveHalf",
    ),
    (
        "canary-owner-slashed",
        MARKET,
        "if (sub.canary && sub.rejected) {",
        "if (false) {",
        "invariant_canariesChargeTheVotersNotTheOwner",
    ),
    (
        "canary-voters-unpunished",
        CANARIES,
        "            sub.rejected = true;\n",
        "",
        "test_LazyValidatorsSlashedAndTheCatcherPaid",
    ),
    (
        "canary-prize-unpaid",
        MARKET,
        "_splitAmong(taskId, assigned, sub.invalidMask, prize, CreditKind.CanaryPrize, address(0));",
        "0;",
        "test_LazyValidatorsSlashedAndTheCatcherPaid",
    ),
    (
        "canary-units-not-restored",
        CANARIES,
        "            rd.includedUnits += sub.workUnits;\n",
        "",
        "test_ACaughtCanaryPaysAllItsCatchers",
    ),
    (
        "false-canary-unappealable",
        DISPUTES,
        "if ((sub.rejected && !sub.canary) != (msg.sender == trainer)) {",
        "if (sub.rejected != (msg.sender == trainer)) {",
        "test_AFalseCanaryIsOverturnedOnAppeal",
    ),
    (
        "proposal-any-epoch",
        MARKET,
        "if (epoch != rd.checkpointEpoch) revert",
        "if (false) revert",
        "test_RevertWhen_AProposalAggregatedARevealedCanary",
    ),
    (
        "dispute-claim-unchecked",
        DISPUTES,
        "if (claimValid != sub.rejected) revert",
        "if (false) revert",
        "test_RevertWhen_ADisputeLandsAfterTheReveal",
    ),
    # A token that delivers less than was sent is accepted again.
    (
        "fee-on-transfer-accepted",
        PULL,
        "if (received != amount) revert",
        "if (received > amount) revert",
        "test_RevertWhen_BountyArrivesShort",
    ),
]


def prepare_base(base: Path) -> None:
    """A copy of the Foundry project, built once with dynamic test linking: the tests then deploy the contracts
    from their artifacts, so a mutant recompiles only the file it changed (~8 s), not the tests built on it
    (~40 s with solc-js)."""
    shutil.copytree(ROOT / "contracts", base / "contracts", ignore=shutil.ignore_patterns("out", "cache"))
    shutil.copytree(ROOT / "scripts", base / "scripts")
    shutil.copy(ROOT / "foundry.toml", base / "foundry.toml")
    (base / "node_modules").symlink_to(ROOT / "node_modules")
    built = subprocess.run([str(FORGE), "build", "--dynamic-test-linking"], cwd=base, capture_output=True, text=True)
    if built.returncode != 0:
        raise SystemExit(f"the unmutated contracts do not build:\n{built.stdout[-2000:]}{built.stderr[-2000:]}")


def run_mutant(base: Path, name: str, file: str, original: str, broken: str, invariant: str) -> bool:
    with tempfile.TemporaryDirectory(prefix=f"mutant-{name}-") as tmp:
        work = Path(tmp) / "project"
        shutil.copytree(base, work, symlinks=True)  # the build's cache and artifacts come along
        target = work / file
        text = target.read_text()
        if original not in text:
            print(f"mutant {name}: its original text is no longer in {file}; update scripts/mutants.py")
            return False
        target.write_text(text.replace(original, broken, 1))
        # The named test runs alone; an invariant runs its campaign checking only itself, so that another
        # invariant breaking first cannot end the campaign before it is tried.
        chosen = ["--match-test", invariant]
        if invariant.startswith("invariant_"):
            chosen += ["--match-contract", "TaskMarketInvariantTest"]
        command = [str(FORGE), "test", "--dynamic-test-linking", *chosen]
        result = subprocess.run(command, cwd=work, capture_output=True, text=True)
        output = result.stdout + result.stderr
        # forge prints one JSON line per broken invariant ({"event":"failure","invariant":NAME,...})
        # and a "[FAIL: ...] NAME()" line per failed unit test.
        failed_test = any("[FAIL" in line and f"{invariant}(" in line for line in output.splitlines())
        caught = result.returncode != 0 and (f'"invariant":"{invariant}"' in output or failed_test)
        print(f"mutant {name:28s} {'caught by ' + invariant if caught else 'NOT CAUGHT by ' + invariant}")
        if not caught:
            print("\n".join(output.splitlines()[-25:]))
        return caught


def main() -> int:
    only = set(sys.argv[1:])  # mutant names, to run a few while working on them
    chosen = [mutant for mutant in MUTANTS if not only or mutant[0] in only]
    with tempfile.TemporaryDirectory(prefix="mutants-base-") as tmp:
        base = Path(tmp) / "project"
        prepare_base(base)
        # Each mutant is its own copy and its own (single-threaded) compile: one per core at a time.
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            results = list(pool.map(lambda mutant: run_mutant(base, *mutant), chosen))
    print(f"{sum(results)} of {len(results)} mutants caught")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
