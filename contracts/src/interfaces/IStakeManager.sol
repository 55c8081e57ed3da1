// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title IStakeManager
/// @notice Holds operators' stake in one ERC-20. Unstaking is a request followed by a withdrawal
///         after the unbonding period; unbonding stake stays slashable. Only the bound market can
///         lock, unlock and slash.
interface IStakeManager {
    /// @notice What an operator's stake backs. Fixed while the operator has any stake.
    enum Role {
        None,
        Trainer,
        Validator
    }

    /// @notice One operator's stake. Amounts in token wei.
    struct Account {
        uint96 staked;
        uint96 locked;
        Role role;
        uint40 releaseAt;
        uint96 unbonding;
    }

    /// @notice `operator` added `amount` of stake for `role`.
    event Staked(address indexed operator, Role role, uint256 amount);
    /// @notice `operator` moved `amount` to unbonding; it can be withdrawn from `releaseAt`.
    event UnstakeRequested(address indexed operator, uint256 amount, uint64 releaseAt);
    /// @notice `operator` withdrew `amount` of unbonded stake.
    event Withdrawn(address indexed operator, uint256 amount);
    /// @notice The market locked `amount` of `operator`'s stake for an open obligation.
    event StakeLocked(address indexed operator, uint256 amount);
    /// @notice The market released `amount` of `operator`'s locked stake.
    event StakeUnlocked(address indexed operator, uint256 amount);
    /// @notice The market slashed `amount` of `operator`'s stake; the tokens went to the market.
    event Slashed(address indexed operator, uint256 amount);
    /// @notice The market contract that may lock and slash was bound (once).
    event MarketBound(address indexed market);

    /// @notice A zero amount was given.
    error StakeZeroAmount();
    /// @notice The operator staked before under another role.
    error StakeRoleMismatch(address operator, Role current, Role requested);
    /// @notice `Role.None` cannot be staked for.
    error StakeInvalidRole();
    /// @notice Unlocked stake is smaller than asked for.
    error StakeInsufficientFree(address operator, uint256 free, uint256 needed);
    /// @notice Nothing is unbonding, or the unbonding period has not passed.
    error StakeNotReleasable(address operator, uint256 releaseAt, uint256 nowTimestamp);
    /// @notice The caller is not the bound market.
    error StakeUnauthorized(address caller);
    /// @notice The market was bound already, or the caller may not bind it.
    error StakeMarketBinding(address caller);
    /// @notice The market releases more than it locked.
    error StakeUnlockExceedsLocked(address operator, uint256 locked, uint256 amount);
    /// @notice A balance would exceed the 96-bit accounting range.
    error StakeAmountTooLarge(uint256 amount);

    /// @notice Stake `amount` (wei) of the token for `role`, pulled from the caller (needs an allowance).
    /// @param amount Amount in token wei, more than zero.
    /// @param role Trainer or Validator; must match the caller's role if it has stake already.
    function stake(uint256 amount, Role role) external;

    /// @notice Stake with an EIP-2612 permit instead of a prior approval, in one transaction.
    /// @param amount Amount in token wei.
    /// @param role Trainer or Validator.
    /// @param deadline The permit's deadline.
    /// @param v The permit signature's v.
    /// @param r The permit signature's r.
    /// @param s The permit signature's s.
    function stakeWithPermit(uint256 amount, Role role, uint256 deadline, uint8 v, bytes32 r, bytes32 s) external;

    /// @notice Move `amount` of unlocked stake to unbonding. Restarts the unbonding clock for
    ///         everything unbonding.
    /// @param amount Amount in token wei, at most the caller's unlocked stake.
    function requestUnstake(uint256 amount) external;

    /// @notice Withdraw all unbonded stake once the unbonding period has passed.
    /// @return amount What was sent to the caller.
    function withdraw() external returns (uint256 amount);

    /// @notice Lock `amount` of `operator`'s unlocked stake, which must be staked for `role`. Only the market.
    /// @param operator The operator.
    /// @param role The role the obligation needs.
    /// @param amount Amount in token wei.
    function lock(address operator, Role role, uint256 amount) external;

    /// @notice Release `amount` of `operator`'s locked stake. Only the market.
    /// @param operator The operator.
    /// @param amount Amount in token wei, at most what is locked.
    function unlock(address operator, uint256 amount) external;

    /// @notice Take up to `amount` from `operator` (staked first, then unbonding) and send it to
    ///         the market. Never more than the operator has. Only the market.
    /// @param operator The operator.
    /// @param amount Amount in token wei asked for.
    /// @return slashed What was actually taken.
    /// @return stakedAfter The operator's staked amount afterwards (unbonding not counted).
    function slash(address operator, uint256 amount) external returns (uint256 slashed, uint256 stakedAfter);

    /// @notice Bind the market contract. Callable once, by the deployer.
    /// @param market The TaskMarket.
    function bindMarket(address market) external;

    /// @notice The operator's stake account.
    /// @param operator The operator.
    /// @return The account.
    function accountOf(address operator) external view returns (Account memory);

    /// @notice Stake not locked and not unbonding.
    /// @param operator The operator.
    /// @return Amount in token wei.
    function freeStake(address operator) external view returns (uint256);
}
