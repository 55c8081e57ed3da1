// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title ITaskMarket
/// @notice Crucible's task lifecycle: escrowed bounties, rounds with windows, work submissions,
///         seeded sampling and validator assignment, attestations, disputes, checkpoint agreement,
///         finalisation, pull payments and refunds. See docs/contracts.md for the rules in prose.
/// @dev A submission is identified by `taskId << 192 | round << 160 | trainer`, so one trainer
///      submits at most once per round and the id needs no storage of its own.
interface ITaskMarket {
    /// @notice A task's numbers, as given to {createTask}. Token amounts in wei, windows in seconds.
    struct TaskParams {
        /// Escrowed bounty, split evenly across rounds.
        uint96 bounty;
        /// Number of rounds, at least one.
        uint16 rounds;
        /// Probability that a submission is spot-checked, in parts per million (0 < p <= 1e6).
        uint32 sampleRatePpm;
        /// Validators assigned to each sampled submission (1..16); also the aggregation and dispute committee size.
        uint8 validatorsPerCheck;
        /// Share of each round's budget that pays validators' checks, in basis points.
        uint16 validatorFeeBps;
        /// Share of a trainer's slash paid to those who found the fault, in basis points; the rest returns to the task.
        uint16 finderShareBps;
        /// Slash of a trainer whose submission is proven invalid.
        uint96 slashAmount;
        /// Light slash of a validator whose vote lost (minority or overturned by a dispute).
        uint96 validatorSlash;
        /// Stake a trainer must have unlocked to submit; locked until its submission is settled.
        uint96 minTrainerStake;
        /// Stake a validator locks to join the task, until the task ends.
        uint96 minValidatorStake;
        /// Bond a dispute carries: at least the validator slash, and at least what makes overturning a verdict
        /// cost the colluders' side what it gains ({Params-leastDisputeBond}). Returned only when upheld.
        uint96 disputeBond;
        /// Largest work-unit count (tokens generated) one submission may claim.
        uint32 maxWorkUnits;
        /// Seconds from a round's opening to its submission deadline.
        uint32 submitWindow;
        /// Seconds from the submission deadline to the attestation deadline.
        uint32 validateWindow;
        /// Seconds from the attestation deadline to the end of the challenge window; also a dispute's voting time.
        uint32 challengeWindow;
        /// The largest share of the task's seat stake that may collude with a cheat, in parts per million
        /// (below half): the deterrence check counts the chance that they hold a cheat's check.
        uint32 colludingSharePpm;
        /// How many rounds behind its round a submission's base checkpoint may be (0..MAX_STALENESS): 0 is
        /// sequential rounds (a round opens when the one before is final, and work builds on its own
        /// round's checkpoint); k lets round r+1 open once round r's submission window closed while up to k
        /// rounds are not final, and work build on any agreed checkpoint of rounds r-k..r.
        uint8 maxStaleness;
        /// The most canaries (known-bad work the creator plants, revealed after the vote) a round may reveal,
        /// as a share of its submissions in parts per million (0: none; at most half). A revealed canary's
        /// share of the round's trainer budget pays the validators who caught it ({revealCanary}).
        uint32 canaryRatePpm;
    }

    /// @notice A task as stored.
    struct Task {
        address creator;
        uint16 rounds;
        /// The oldest round not final: the one {finaliseRound} closes next, whose checkpoint is the newest agreed.
        uint16 currentRound;
        uint8 validatorsPerCheck;
        uint24 sampleRatePpm;
        uint16 validatorFeeBps;
        uint16 finderShareBps;
        // What submitWork reads sits in one slot.
        uint96 minTrainerStake;
        uint32 maxWorkUnits;
        uint32 submitWindow;
        uint32 validateWindow;
        uint32 challengeWindow;
        bool ended;
        /// The newest round opened: rounds `currentRound..openRound` are live (one unless `maxStaleness` > 0).
        uint16 openRound;
        uint8 maxStaleness;
        uint96 bounty;
        /// Unearned tokens the creator may take back once the task ended.
        uint96 pool;
        uint24 canaryRatePpm;
        uint96 slashAmount;
        uint96 validatorSlash;
        uint96 minValidatorStake;
        uint96 disputeBond;
    }

    /// @notice A round as stored.
    struct Round {
        bytes32 workSeed;
        bytes32 checkSeed;
        // What submitWork and an attestation write sits in one slot.
        uint40 openedAt;
        uint32 submissionCount;
        uint32 validatorCount;
        uint16 openDisputes;
        uint16 checkpointEpoch;
        bool finalised;
        bool unverified; // finalised with too few validators to check it: nothing paid, nothing slashed
        /// Work units the trainer budget is shared over: included submissions and revealed canaries.
        uint96 includedUnits;
        uint8 canaries; // revealed canaries
        uint32 attestCount; // check positions committed to (each earns a fee share, or a penalty when unrevealed)
        uint32 checksRemaining;
        uint96 unitsRemaining;
        // Written together when the seed is requested.
        uint64 seedBlock; // the block whose hash is the check seed, fixed in advance (0: not requested)
        uint96 seatStake; // the seat stake the round's draws share out (snapshot with `validatorCount`)
        // For a round opened ahead, when its checkpoint was fixed (the round before it was final); zero for a
        // round opened on its checkpoint. Aggregators get a whole challenge window after it before the round
        // can be final. Kept out of the slot `submitWork` writes, and written only for rounds opened ahead.
        uint40 checkpointAt;
        uint128 trainerBudgetRemaining;
        uint128 feeRemaining;
        /// The keccak256 of the CID of the checkpoint the round aggregates onto (zero while the round
        /// before it is not final).
        bytes32 checkpoint;
        bytes32 agreedNext;
    }

    /// @notice A submission as stored. Its trainer, task and round are in its id.
    struct Submission {
        uint64 workUnits;
        /// The round whose agreed checkpoint the work was computed from (its base).
        uint16 baseRound;
        uint16 votedMask;
        uint16 invalidMask;
        bool rejected;
        bool disputed;
        bool settled;
        /// Revealed as a canary by the task's creator: excluded from the aggregate, its owner neither paid nor
        /// slashed, its reward share paid to the validators who voted it invalid.
        bool canary;
        /// The first 12 bytes of the tag sent with the work: random for real work, {Ids-canaryTag} for a canary.
        bytes12 tag;
        /// The check positions whose holders committed a vote ({commitAttestation}); `votedMask` those revealed.
        uint16 committedMask;
    }

    /// @notice A dispute as stored; at most one per submission.
    struct Dispute {
        address disputer;
        uint96 bond;
        /// The block whose prevrandao seeds the committee: named two ahead when the dispute was filed (or when
        /// the block-moving call found its hash gone).
        uint64 seedBlock;
        uint64 deadline;
        uint16 votedMask;
        uint16 validMask;
        bool claimValid;
        bool open;
        bool upheld;
        /// The committee positions whose holders committed a vote ({commitDisputeVote}); `votedMask` those revealed.
        uint16 committedMask;
        bytes32 seed;
    }

    /// @notice A validator's seat in a task: its place in the joining order, the positions it voted on
    ///         that are not settled yet (its stake stays locked until they are), whether it lost the seat,
    ///         and the range of seat stake it holds, `[from, from + stake)`: a drawn position in that range
    ///         is its to vote on.
    struct Seat {
        uint32 slot; // index in `membersOf` plus one; zero when not joined (or left)
        uint24 pendingVotes;
        bool benched; // slashed below the task's minimum validator stake: it may not vote again
        uint96 from;
        uint96 stake; // what it locked to join, at least the task's minimum validator stake
    }

    /// @notice A task's validator in joining order and where its range of seat stake starts (it ends
    ///         where the next member's starts, or at the round's `seatStake`).
    struct Member {
        address account;
        uint96 from;
    }

    /// @notice What a credit paid for.
    enum CreditKind {
        TrainerReward,
        ValidatorFee,
        FinderShare,
        BondReturned,
        CommitteeShare,
        CanaryPrize
    }

    /// @notice A task was posted and its bounty escrowed; its parameters and the CIDs of its initial checkpoint and environment.
    event TaskCreated(
        uint256 indexed taskId, address indexed creator, TaskParams params, string modelCid, string envCid
    );
    /// @notice A round began: the checkpoint it aggregates onto (zero for a round opened before the round
    ///         ahead of it was final: {CheckpointFixed} names it then), the seed of its prompts, and when it opened.
    event RoundOpened(
        uint256 indexed taskId, uint256 indexed round, bytes32 checkpoint, bytes32 workSeed, uint40 openedAt
    );
    /// @notice A round opened ahead (see `maxStaleness`) got its checkpoint: the round before it was finalised.
    event CheckpointFixed(uint256 indexed taskId, uint256 indexed round, bytes32 checkpoint);
    /// @notice A validator joined a task at `index` in its joining order, locking `stake`: it holds the
    ///         seat stake range `[from, from + stake)` in every draw made after this.
    event ValidatorJoined(
        uint256 indexed taskId, address indexed validator, uint256 index, uint256 from, uint256 stake
    );
    /// @notice A validator left a task; it is drawn no more in rounds whose check seed is fixed after this.
    event ValidatorLeft(uint256 indexed taskId, address indexed validator);
    /// @notice A slash left a validator below the task's minimum stake: it keeps its place in the draws
    ///         (so no one else's assignment moves) but may not attest, vote or propose in the task again.
    event ValidatorBenched(uint256 indexed taskId, address indexed validator, uint256 staked);
    /// @notice A trainer committed its round's work, computed from the agreed checkpoint of `baseRound`: the
    ///         rollout file and update by CID, its work units, and the commitment binding them to this chain,
    ///         market, round, base and trainer.
    event WorkSubmitted(
        uint256 indexed taskId,
        uint256 indexed round,
        address indexed trainer,
        uint256 submissionId,
        uint256 baseRound,
        string rolloutCid,
        string updateCid,
        uint64 workUnits,
        bytes32 commitment
    );
    /// @notice A round's check seed will come from the prevrandao of `seedBlock`, a block still to come when this was
    ///         recorded (after the submission deadline), and its draws use `validatorCount` validators.
    event CheckSeedRequested(uint256 indexed taskId, uint256 indexed round, uint256 seedBlock, uint32 validatorCount);
    /// @notice A round's check seed was fixed from the prevrandao of its requested block.
    event CheckSeedFixed(uint256 indexed taskId, uint256 indexed round, bytes32 checkSeed, uint32 validatorCount);
    /// @notice An assigned validator committed to a verdict it will reveal from the reveal phase ({attest}):
    ///         `commitment` hides the verdict, its evidence CID and a salt ({Ids-voteCommitment}).
    event AttestationCommitted(uint256 indexed submissionId, address indexed validator, bytes32 commitment);
    /// @notice An assigned validator's verdict on a submission, with the CID of its evidence: the reveal of its commitment.
    event Attested(uint256 indexed submissionId, address indexed validator, bool valid, string evidenceCid);
    /// @notice A majority of a submission's assigned validators found it invalid (or a dispute upheld that).
    event SubmissionRejected(uint256 indexed submissionId);
    /// @notice The task's creator revealed a submission as a canary, with the salt its tag was made from.
    event CanaryRevealed(uint256 indexed submissionId, bytes32 salt);
    /// @notice Someone disputed a submission's outcome, with a bond, claiming it valid or not; votes close at `deadline`.
    event Disputed(
        uint256 indexed submissionId, address indexed disputer, bool claimValid, uint256 bond, uint64 deadline
    );
    /// @notice Nobody fixed the dispute's seed within 256 blocks of its seed block, whose hash is gone: the
    ///         committee will come from the prevrandao of `seedBlock`, two blocks after this call.
    event DisputeBlockMoved(uint256 indexed submissionId, uint256 seedBlock);
    /// @notice A dispute's committee seed was fixed from the prevrandao of its seed block.
    event DisputeSeedFixed(uint256 indexed submissionId, bytes32 seed);
    /// @notice A committee member committed to a hidden vote on a dispute ({commitDisputeVote}).
    event DisputeVoteCommitted(uint256 indexed submissionId, address indexed validator, bytes32 commitment);
    /// @notice A committee member's vote on a dispute, with the CID of its evidence: the reveal of its commitment.
    event DisputeVoted(uint256 indexed submissionId, address indexed validator, bool valid, string evidenceCid);
    /// @notice A dispute closed: whether the disputer was upheld and whether the submission ends rejected.
    event DisputeResolved(uint256 indexed submissionId, bool upheld, bool rejected);
    /// @notice An aggregator proposed the round's next checkpoint (its CID and digest).
    event CheckpointProposed(
        uint256 indexed taskId, uint256 indexed round, address indexed aggregator, bytes32 digest, string checkpointCid
    );
    /// @notice A majority of the round's aggregators proposed the same next checkpoint.
    event CheckpointAgreed(uint256 indexed taskId, uint256 indexed round, bytes32 digest, string checkpointCid);
    /// @notice A round closed: its included work units, its trainer and fee budgets, and the checkpoint the next round starts from.
    event RoundFinalised(
        uint256 indexed taskId,
        uint256 indexed round,
        uint96 includedUnits,
        uint256 trainerBudget,
        uint256 feeBudget,
        bytes32 nextCheckpoint
    );
    /// @notice A submission's outcome was paid: the reward credited, or the stake slashed.
    event Settled(uint256 indexed submissionId, bool rejected, uint256 reward, uint256 slashed);
    /// @notice An assigned validator did not reveal a vote by the deadline; it earns no fee for that submission (and
    ///         is penalised, {ValidatorPenalised}, when it committed one: a withheld reveal costs what a wrong vote does).
    event ValidatorMissed(uint256 indexed submissionId, address indexed validator);
    /// @notice An assigned validator voted against the outcome a dispute established, and was slashed.
    event ValidatorPenalised(uint256 indexed submissionId, address indexed validator, uint256 slashed);
    /// @notice Tokens credited to an account, claimable with {claim}; `kind` says what for.
    event Credited(uint256 indexed taskId, address indexed account, CreditKind kind, uint256 amount);
    /// @notice An account withdrew its credits.
    event Claimed(address indexed account, uint256 amount);
    /// @notice A creator took back what its ended task did not pay out.
    event Refunded(uint256 indexed taskId, address indexed creator, uint256 amount);
    /// @notice A task's last round was finalised; nothing more can be submitted to it.
    event TaskEnded(uint256 indexed taskId);

    /// @notice No task has this id.
    error MarketUnknownTask(uint256 taskId);
    /// @notice A task parameter, named, is above the most it may be.
    error MarketParameterAbove(string name, uint256 value, uint256 most);
    /// @notice A task parameter, named, is below the least it may be.
    error MarketParameterBelow(string name, uint256 value, uint256 least);
    /// @notice With this sampling rate, colluding share, slash, finder's share and fees a cheat would expect to gain
    ///         ({Params-check}: the whole game, docs/protocol.md).
    error MarketDeterrenceTooLow(uint256 sampleRatePpm, uint256 slashAmount, uint256 maxReward);
    /// @notice A CID argument was empty.
    error MarketEmptyCid();
    /// @notice The task has ended.
    error MarketTaskEnded(uint256 taskId);
    /// @notice The task has not ended yet.
    error MarketTaskNotEnded(uint256 taskId);
    /// @notice The call names a round that is not the task's current one.
    error MarketWrongRound(uint256 taskId, uint256 round, uint256 currentRound);
    /// @notice A submission's base round is not agreed yet (after `currentRound`), is after its own round,
    ///         or is more than `maxStaleness` rounds behind it.
    error MarketBaseOutOfBound(
        uint256 taskId, uint256 round, uint256 baseRound, uint256 currentRound, uint256 maxStaleness
    );
    /// @notice The next round cannot open ahead: it would be more than `maxStaleness` rounds after the
    ///         current one, or the task has no round left.
    error MarketStalenessBound(uint256 taskId, uint256 nextRound, uint256 currentRound, uint256 maxStaleness);
    /// @notice The call came outside the window it is allowed in (`opensAt` to `closesAt`).
    error MarketOutsideWindow(uint256 nowTimestamp, uint256 opensAt, uint256 closesAt);
    /// @notice Work units must be at least 1 and at most the task's `maxWorkUnits`.
    error MarketWorkUnitsOutOfRange(uint256 workUnits, uint256 maxWorkUnits);
    /// @notice This trainer already submitted in this round.
    error MarketDuplicateSubmission(uint256 submissionId);
    /// @notice No submission has this id.
    error MarketUnknownSubmission(uint256 submissionId);
    /// @notice The submission was not sampled for checking, so nobody attests to it.
    error MarketNotSampled(uint256 submissionId);
    /// @notice The caller is not one of the validators assigned to this check.
    error MarketNotAssigned(uint256 submissionId, address validator);
    /// @notice The caller already attested to or voted on this submission.
    error MarketAlreadyVoted(uint256 submissionId, address validator);
    /// @notice The caller committed no vote on this submission, so it has none to reveal.
    error MarketNoCommitment(uint256 submissionId, address validator);
    /// @notice The revealed verdict, evidence CID and salt are not what the caller committed to.
    error MarketRevealMismatch(uint256 submissionId, address validator);
    /// @notice The validator already joined this task.
    error MarketAlreadyJoined(uint256 taskId, address validator);
    /// @notice The validator has not joined this task.
    error MarketNotJoined(uint256 taskId, address validator);
    /// @notice The validator was slashed below the task's minimum stake and lost its seat.
    error MarketValidatorBenched(uint256 taskId, address validator);
    /// @notice The validator has votes not settled yet: its stake answers for them until they are
    ///         (anyone can call `settle`).
    error MarketVotesUnsettled(uint256 taskId, address validator, uint256 pendingVotes);
    /// @notice The submission was already disputed.
    error MarketAlreadyDisputed(uint256 submissionId);
    /// @notice The disputer cannot dispute a submission it has a side in (its own work or its own attestation).
    error MarketDisputeSide(uint256 submissionId, address disputer);
    /// @notice No sound committee can judge this dispute: its round's check never started (no check seed: the
    ///         round is unverified), or the committee's seed is not fixed yet ({fixDisputeSeed}).
    error MarketNoCommittee(uint256 submissionId);
    /// @notice A block header that is not the RLP encoding of the block it was given for.
    error MarketWrongHeader(uint256 blockNumber);
    /// @notice Fewer validators joined than the task's `validatorsPerCheck`: the round cannot be checked
    ///         yet. If it still cannot at its end, it is finalised unchecked (nothing paid or slashed).
    error MarketTooFewValidators(uint256 taskId, uint256 validators, uint256 needed);
    /// @notice The round's check seed is not fixed yet: its block is still to come, or nobody requested
    ///         it (`seedBlock` 0) or its hash passed the 256-block horizon — call `fixCheckSeed`.
    error MarketCheckSeedPending(uint256 taskId, uint256 round, uint256 seedBlock);
    /// @notice No dispute is open on this submission.
    error MarketDisputeNotOpen(uint256 submissionId);
    /// @notice The dispute's vote is still open until `deadline`.
    error MarketDisputeVotingOpen(uint256 submissionId, uint256 deadline);
    /// @notice The caller is not one of the round's aggregators.
    error MarketNotAggregator(uint256 taskId, uint256 round, address validator);
    /// @notice This aggregator already proposed a checkpoint for the round.
    error MarketAlreadyProposed(uint256 taskId, uint256 round, address aggregator);
    /// @notice The round is already finalised.
    error MarketRoundFinalised(uint256 taskId, uint256 round);
    /// @notice The round is not finalised yet.
    error MarketRoundNotFinalised(uint256 taskId, uint256 round);
    /// @notice The round still has disputes open.
    error MarketOpenDisputes(uint256 taskId, uint256 round, uint256 openDisputes);
    /// @notice The submission was already settled.
    error MarketAlreadySettled(uint256 submissionId);
    /// @notice The account has no credits.
    error MarketNothingToClaim(address account);
    /// @notice Only the task's creator may do this.
    error MarketNotCreator(uint256 taskId, address caller);
    /// @notice The ended task holds nothing to refund.
    error MarketNothingToRefund(uint256 taskId);
    /// @notice The task plants no canaries (`canaryRatePpm` is zero).
    error MarketNoCanaries(uint256 taskId);
    /// @notice The salt does not open the submission's tag as a canary's, or it was revealed or disputed already.
    error MarketNotCanary(uint256 submissionId);
    /// @notice A proposal computed for another checkpoint epoch (the included set changed since): the current one.
    error MarketWrongEpoch(uint256 taskId, uint256 round, uint256 epoch);
    /// @notice The outcome a dispute was sent against changed before it landed (a vote, or a canary revealed).
    error MarketOutcomeChanged(uint256 submissionId, bool rejected);
    /// @notice The round revealed as many canaries as the task's canary rate allows.
    error MarketCanaryRate(uint256 taskId, uint256 round, uint256 canaries);

    /// @notice Create a task and escrow its bounty (pulled from the caller; needs an allowance).
    ///         Refuses parameters that make cheating pay: `q·S >= (1-q)·R`, with `R` the most one
    ///         submission can earn (a round's trainer budget) and `q` the chance a cheat is caught: it is
    ///         sampled (`p`) and its assigned positions hold an honest majority when `colludingSharePpm`
    ///         of the seat stake votes with the cheat. Opens round 0 on `modelCid`.
    /// @param params The task's numbers.
    /// @param modelCid CID of the initial checkpoint manifest.
    /// @param envCid CID of the environment spec.
    /// @return taskId The new task's id (1, 2, ...).
    function createTask(TaskParams calldata params, string calldata modelCid, string calldata envCid)
        external
        returns (uint256 taskId);

    /// @notice Join a task as a validator, locking `stake` (at least `minValidatorStake`) until the task
    ///         ends and its votes are settled. Every draw picks positions in proportion to seat stake,
    ///         so one seat of `2s` weighs the same as two seats of `s`: splitting stake buys nothing.
    /// @param taskId The task.
    /// @param stake The stake the seat weighs, in wei.
    function joinTask(uint256 taskId, uint256 stake) external;

    /// @notice Leave an ended task and release the validator's lock.
    /// @param taskId The task.
    function leaveTask(uint256 taskId) external;

    /// @notice Open the next round ahead of finality, once the newest open round's submission window
    ///         closed, when the round it opens is at most `maxStaleness` rounds after the current one (so
    ///         never with `maxStaleness` 0: {finaliseRound} opens rounds then). Its work seed is fixed now; its checkpoint when the round
    ///         before it is final. Anyone.
    /// @param taskId The task.
    function openNextRound(uint256 taskId) external;

    /// @notice Submit an open round's work before its submission deadline; locks `minTrainerStake`.
    /// @param taskId The task.
    /// @param round An open round (`currentRound..openRound`).
    /// @param baseRound The round whose agreed checkpoint the work started from: agreed (at most
    ///        `currentRound`), at most `round`, and at most `maxStaleness` rounds behind it.
    /// @param rolloutCid CID of the rollout file.
    /// @param updateCid CID of the update manifest.
    /// @param workUnits Tokens generated, 1..maxWorkUnits.
    /// @param proofsDigest keccak256 of the rollout file's proofs; bound into the emitted commitment.
    /// @param tag 32 random bytes for real work; a canary's is {Ids-canaryTag} of a salt only its creator knows,
    ///        so the two look alike until the creator reveals the canary. The first 12 bytes are stored.
    /// @return submissionId The submission's id.
    function submitWork(
        uint256 taskId,
        uint256 round,
        uint256 baseRound,
        string calldata rolloutCid,
        string calldata updateCid,
        uint64 workUnits,
        bytes32 proofsDigest,
        bytes32 tag
    ) external returns (uint256 submissionId);

    /// @notice The task's creator reveals a canary — known-bad work it planted through an ordinary trainer
    ///         address — after the validate deadline and before the middle of the challenge window, by the salt
    ///         of the tag sent with the work. The canary leaves the aggregate (a new checkpoint epoch when it
    ///         was included); at settlement its owner is neither paid nor slashed, the assigned validators who
    ///         voted it valid are slashed as for any rejected work, and its share of the round's trainer
    ///         budget pays those who voted it invalid. At most `canaryRatePpm` of a round's submissions.
    ///         Anyone but its owner may dispute a revealed canary (a false canary, overturned, is paid as the
    ///         work it is).
    /// @param submissionId The canary.
    /// @param salt The salt its tag was made from.
    function revealCanary(uint256 submissionId, bytes32 salt) external;

    /// @notice After a submission deadline and before the validate deadline, for every open round past its own
    ///         in turn, oldest first (usually one): the first call requests the round's check seed from a block
    ///         two blocks ahead (and snapshots the validators and their seat stake; it reverts while fewer than
    ///         `validatorsPerCheck` have joined); a call once that block exists, given its RLP header, fixes the
    ///         seed from the block's prevrandao (`mixHash`), which its producer cannot choose, only withhold.
    ///         Past 256 blocks the hash is gone and a call requests a new block ahead. A round whose seed is not
    ///         fixed by its validate deadline is never checked: it is finalised unverified. Anyone; whoever
    ///         calls, and whenever, cannot choose the seed.
    /// @param taskId The task.
    /// @param header The RLP-encoded header of a round's requested seed block (empty to request only); a header
    ///        of another block fixes nothing.
    function fixCheckSeed(uint256 taskId, bytes calldata header) external;

    /// @notice Commit to a verdict on a sampled submission the caller is assigned to, in the commit phase: from the
    ///         submission deadline (once the check seed is fixed) to the reveal phase, the validate window's last
    ///         quarter ({Ids-revealFrom}). Nobody's verdict is public before the commit phase closes, so waiting for
    ///         others' votes shows nothing to copy. A commitment not revealed by the validate deadline is
    ///         penalised like a wrong vote.
    /// @param submissionId The submission.
    /// @param commitment `Ids.voteCommitment(submissionId, caller, valid, evidenceCid, salt)`.
    function commitAttestation(uint256 submissionId, bytes32 commitment) external;

    /// @notice Reveal the caller's committed verdict, in the reveal phase (to the validate deadline): the vote counts
    ///         from here.
    /// @param submissionId The submission.
    /// @param valid The verdict.
    /// @param evidenceCid CID of the evidence file.
    /// @param salt The secret the commitment was made with.
    function attest(uint256 submissionId, bool valid, string calldata evidenceCid, bytes32 salt) external;

    /// @notice Dispute a submission's outcome during the challenge window, with the task's bond.
    ///         Against a rejection only its trainer may dispute; against an acceptance (sampled or
    ///         not) or a revealed canary anyone else may. A fresh committee of `validatorsPerCheck` positions drawn over the round's
    ///         whole seat stake, from the prevrandao of a block two ahead, decides by a majority of all its
    ///         positions; the bond returns only when upheld. Refused in a round whose check never started.
    /// @param submissionId The submission.
    /// @param claimValid What the disputer claims: valid against a rejection (or a revealed canary), invalid
    ///        against an acceptance. Refused when the outcome changed since the disputer looked.
    function dispute(uint256 submissionId, bool claimValid) external;

    /// @notice Fix a dispute's committee seed from the prevrandao of its seed block, given that block's RLP header;
    ///         when the block's hash is gone (256 blocks on) this moves the seed block two ahead instead
    ///         ({DisputeBlockMoved}). Anyone; validators' clients do it before they vote.
    /// @param submissionId The disputed submission.
    /// @param header The RLP-encoded header of the dispute's seed block (ignored when it moves).
    function fixDisputeSeed(uint256 submissionId, bytes calldata header) external;

    /// @notice A dispute committee member's hidden vote, in the dispute's commit phase: from its committee's seed to
    ///         the last quarter of its voting time (`deadline - challengeWindow / 4`). As with attestations
    ///         ({commitAttestation}), nobody's vote shows before the commit phase closes, so none can be copied.
    /// @param submissionId The disputed submission.
    /// @param commitment `Ids.voteCommitment(submissionId, caller, valid, evidenceCid, salt)`.
    function commitDisputeVote(uint256 submissionId, bytes32 commitment) external;

    /// @notice Reveal a committee member's committed vote, in the dispute's reveal phase (to its deadline).
    /// @param submissionId The disputed submission.
    /// @param valid The member's verdict on the submission.
    /// @param evidenceCid CID of the evidence file.
    /// @param salt The secret the commitment was made with.
    function voteDispute(uint256 submissionId, bool valid, string calldata evidenceCid, bytes32 salt) external;

    /// @notice Resolve a dispute once its committee has a majority or its deadline passed. Anyone.
    /// @param submissionId The disputed submission.
    function resolveDispute(uint256 submissionId) external;

    /// @notice An aggregation committee member's proposal for the next checkpoint, after the
    ///         attestation deadline; a strict majority on one digest agrees it.
    /// @param taskId The task.
    /// @param round The round aggregated.
    /// @param epoch The round's checkpoint epoch the aggregate was computed in (`getRound(...).checkpointEpoch`):
    ///        a proposal for an included set that changed since (a dispute resolved, a canary revealed) is refused.
    /// @param checkpointCid CID of the next checkpoint's manifest.
    function proposeCheckpoint(uint256 taskId, uint256 round, uint256 epoch, string calldata checkpointCid) external;

    /// @notice Finalise the current round after its challenge window (and at least a challenge window after
    ///         its checkpoint was fixed) with no dispute open: allocates its budget and gives the next round
    ///         the agreed checkpoint (or the same one when none was agreed), opening it unless it opened
    ///         ahead, or ends the task. Anyone.
    /// @param taskId The task.
    function finaliseRound(uint256 taskId) external;

    /// @notice Settle a submission of a finalised round: release the trainer's lock, credit its
    ///         reward or slash it, pay or penalise its validators. Once per submission. Anyone.
    /// @param submissionId The submission.
    function settle(uint256 submissionId) external;

    /// @notice Withdraw everything credited to the caller.
    /// @return amount What was sent.
    function claim() external returns (uint256 amount);

    /// @notice The creator takes back what the ended task did not pay out.
    /// @param taskId The task.
    /// @return amount What was sent.
    function refund(uint256 taskId) external returns (uint256 amount);

    /// @notice Task data.
    function getTask(uint256 taskId) external view returns (Task memory);
    /// @notice Round data.
    function getRound(uint256 taskId, uint256 round) external view returns (Round memory);
    /// @notice Submission data.
    function getSubmission(uint256 submissionId) external view returns (Submission memory);
    /// @notice Dispute data.
    function getDispute(uint256 submissionId) external view returns (Dispute memory);
    /// @notice Number of tasks created.
    function taskCount() external view returns (uint256);
    /// @notice A task's validators in joining order, with where each one's range of seat stake starts.
    function membersOf(uint256 taskId) external view returns (Member[] memory);
    /// @notice A validator's seat in a task.
    function seatOf(uint256 taskId, address validator) external view returns (Seat memory);
    /// @notice Sum of every account's unclaimed credits.
    function totalCredits() external view returns (uint256);
    /// @notice Credits the account can claim.
    function creditOf(address account) external view returns (uint256);
    /// @notice Whether `aggregator` proposed a checkpoint for `round` since its proposals were last reset.
    function hasProposed(uint256 taskId, uint256 round, address aggregator) external view returns (bool);
}
