// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ITaskMarket} from "../interfaces/ITaskMarket.sol";

/// @title Payouts
/// @notice Budgets and payouts: how a bounty splits into rounds, trainers' budgets and validators' fees, and
///         the credit ledger every payment goes through (pulled later with {ITaskMarket-claim}). The market and
///         the dispute module credit through the same functions, so every credit emits the same event.
library Payouts {
    uint256 internal constant BPS = 10_000;

    /// @dev Every account's unclaimed credits and their sum.
    struct Ledger {
        mapping(address account => uint256) credits;
        uint256 total;
    }

    /// @notice A round's trainer and fee budgets: the bounty split evenly across rounds (the last takes the
    ///         rounding remainder), and the fee share of it for validators' checks.
    function roundBudgets(uint256 bounty, uint256 rounds, uint256 round, uint256 validatorFeeBps)
        external
        pure
        returns (uint256 trainerBudget, uint256 feeBudget)
    {
        // The division first is the point: every round gets the floor, the last one the remainder.
        // slither-disable-next-line divide-before-multiply
        uint256 budget = bounty / rounds;
        // slither-disable-next-line divide-before-multiply
        if (round == rounds - 1) budget = bounty - budget * (rounds - 1);
        feeBudget = budget * validatorFeeBps / BPS;
        trainerBudget = budget - feeBudget;
    }

    /// @dev The largest round's budget (the last round takes the bounty's rounding remainder).
    function largestRound(uint256 bounty, uint256 rounds) internal pure returns (uint256) {
        // slither-disable-next-line divide-before-multiply
        return bounty - (bounty / rounds) * (rounds - 1);
    }

    /// @dev The most one submission can earn: the largest round's trainer budget.
    function maxSubmissionReward(uint256 bounty, uint256 rounds, uint256 validatorFeeBps)
        internal
        pure
        returns (uint256)
    {
        return largestRound(bounty, rounds) - maxRoundFee(bounty, rounds, validatorFeeBps);
    }

    /// @dev The most the validators of one round can earn in fees: the largest round's fee budget.
    function maxRoundFee(uint256 bounty, uint256 rounds, uint256 validatorFeeBps) internal pure returns (uint256) {
        return largestRound(bounty, rounds) * validatorFeeBps / BPS;
    }

    /// @dev Credits `amount` to `account`, claimable later.
    function credit(Ledger storage ledger, uint256 taskId, address account, uint256 amount, ITaskMarket.CreditKind kind)
        internal
    {
        if (amount == 0) return;
        ledger.credits[account] += amount;
        ledger.total += amount;
        emit ITaskMarket.Credited(taskId, account, kind, amount);
    }

    /// @dev Credits `amount` in equal parts to the members whose bit is set in `mask` and to `extra` when
    ///      given; `extra` (or else the first member) takes the rounding remainder. Returns what was credited:
    ///      all of `amount`, or zero when nobody qualifies.
    function splitAmong(
        Ledger storage ledger,
        uint256 taskId,
        address[] memory members,
        uint256 mask,
        uint256 amount,
        ITaskMarket.CreditKind kind,
        address extra
    ) internal returns (uint256) {
        uint256 count = extra == address(0) ? 0 : 1;
        for (uint256 j = 0; j < members.length; ++j) {
            if (mask & (1 << j) != 0) ++count;
        }
        if (count == 0 || amount == 0) return 0;
        // The remainder is computed from the floored share on purpose: it goes to one member.
        // slither-disable-next-line divide-before-multiply
        uint256 share = amount / count;
        // slither-disable-next-line divide-before-multiply
        uint256 remainder = amount - share * count;
        if (extra != address(0)) {
            credit(ledger, taskId, extra, share + remainder, kind);
            remainder = 0;
        }
        for (uint256 j = 0; j < members.length; ++j) {
            if (mask & (1 << j) == 0) continue;
            credit(ledger, taskId, members[j], share + remainder, kind);
            remainder = 0;
        }
        return amount;
    }
}
