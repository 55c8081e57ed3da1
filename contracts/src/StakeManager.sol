// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {IERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/IERC20Permit.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {IStakeManager} from "./interfaces/IStakeManager.sol";
import {Pull} from "./libraries/Pull.sol";

/// @title StakeManager
/// @notice Operators' stake for Crucible. See {IStakeManager}.
contract StakeManager is IStakeManager, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;

    /// @notice The stake token.
    IERC20 public immutable token;
    /// @notice Seconds between an unstake request and the withdrawal it allows.
    uint64 public immutable unbondingPeriod;
    /// @notice The only contract that may lock, unlock and slash; bound once after deployment.
    address public market;

    address private immutable _deployer;
    mapping(address operator => Account) private _accounts;

    modifier onlyMarket() {
        if (msg.sender != market) revert StakeUnauthorized(msg.sender);
        _;
    }

    /// @param stakeToken The ERC-20 staked.
    /// @param unbondingPeriodSeconds Seconds from an unstake request to the withdrawal.
    constructor(IERC20 stakeToken, uint64 unbondingPeriodSeconds) {
        token = stakeToken;
        unbondingPeriod = unbondingPeriodSeconds;
        _deployer = msg.sender;
    }

    /// @inheritdoc IStakeManager
    function bindMarket(address marketAddress) external {
        if (msg.sender != _deployer || market != address(0) || marketAddress == address(0)) {
            revert StakeMarketBinding(msg.sender);
        }
        market = marketAddress;
        emit MarketBound(marketAddress);
    }

    /// @inheritdoc IStakeManager
    function stake(uint256 amount, Role role) external nonReentrant {
        _stake(amount, role);
    }

    /// @inheritdoc IStakeManager
    function stakeWithPermit(uint256 amount, Role role, uint256 deadline, uint8 v, bytes32 r, bytes32 s)
        external
        nonReentrant
    {
        // A permit front-run by someone else still leaves the allowance in place: go on if it is there.
        try IERC20Permit(address(token)).permit(msg.sender, address(this), amount, deadline, v, r, s) {} catch {}
        _stake(amount, role);
    }

    function _stake(uint256 amount, Role role) private {
        if (amount == 0) revert StakeZeroAmount();
        if (role == Role.None) revert StakeInvalidRole();
        Account storage account = _accounts[msg.sender];
        if (account.role != role) {
            if (account.staked != 0 || account.unbonding != 0) {
                revert StakeRoleMismatch(msg.sender, account.role, role);
            }
            account.role = role;
        }
        account.staked = _toUint96(account.staked + amount);
        emit Staked(msg.sender, role, amount);
        Pull.fromSender(token, amount);
    }

    /// @inheritdoc IStakeManager
    function requestUnstake(uint256 amount) external {
        if (amount == 0) revert StakeZeroAmount();
        Account storage account = _accounts[msg.sender];
        uint256 free = _free(account);
        if (amount > free) revert StakeInsufficientFree(msg.sender, free, amount);
        // amount <= free <= staked, so the subtraction cannot underflow.
        unchecked {
            account.staked -= uint96(amount);
        }
        account.unbonding = _toUint96(account.unbonding + amount);
        uint64 releaseAt = uint64(block.timestamp) + unbondingPeriod;
        account.releaseAt = uint40(releaseAt);
        emit UnstakeRequested(msg.sender, amount, releaseAt);
    }

    /// @inheritdoc IStakeManager
    function withdraw() external nonReentrant returns (uint256 amount) {
        Account storage account = _accounts[msg.sender];
        amount = account.unbonding;
        if (amount == 0 || block.timestamp < account.releaseAt) {
            revert StakeNotReleasable(msg.sender, account.releaseAt, block.timestamp);
        }
        account.unbonding = 0;
        emit Withdrawn(msg.sender, amount);
        token.safeTransfer(msg.sender, amount);
    }

    /// @inheritdoc IStakeManager
    function lock(address operator, Role role, uint256 amount) external onlyMarket {
        Account storage account = _accounts[operator];
        if (account.role != role) revert StakeRoleMismatch(operator, account.role, role);
        uint256 free = _free(account);
        if (amount > free) revert StakeInsufficientFree(operator, free, amount);
        account.locked = _toUint96(account.locked + amount);
        emit StakeLocked(operator, amount);
    }

    /// @inheritdoc IStakeManager
    function unlock(address operator, uint256 amount) external onlyMarket {
        Account storage account = _accounts[operator];
        if (amount > account.locked) revert StakeUnlockExceedsLocked(operator, account.locked, amount);
        // Checked just above.
        unchecked {
            account.locked -= uint96(amount);
        }
        emit StakeUnlocked(operator, amount);
    }

    /// @inheritdoc IStakeManager
    function slash(address operator, uint256 amount)
        external
        onlyMarket
        nonReentrant
        returns (uint256 slashed, uint256 stakedAfter)
    {
        Account storage account = _accounts[operator];
        uint256 fromStaked = amount < account.staked ? amount : account.staked;
        uint256 rest = amount - fromStaked;
        uint256 fromUnbonding = rest < account.unbonding ? rest : account.unbonding;
        // Each part is at most the balance it is taken from.
        unchecked {
            account.staked -= uint96(fromStaked);
            account.unbonding -= uint96(fromUnbonding);
        }
        slashed = fromStaked + fromUnbonding;
        stakedAfter = account.staked;
        if (slashed == 0) return (0, stakedAfter);
        emit Slashed(operator, slashed);
        token.safeTransfer(msg.sender, slashed);
    }

    /// @inheritdoc IStakeManager
    function accountOf(address operator) external view returns (Account memory) {
        return _accounts[operator];
    }

    /// @inheritdoc IStakeManager
    function freeStake(address operator) external view returns (uint256) {
        return _free(_accounts[operator]);
    }

    /// @dev A slash can leave `staked` below `locked` (other obligations still hold their locks):
    ///      free stake is then zero, never negative.
    function _free(Account storage account) private view returns (uint256) {
        return account.staked > account.locked ? account.staked - account.locked : 0;
    }

    function _toUint96(uint256 value) private pure returns (uint96) {
        if (value > type(uint96).max) revert StakeAmountTooLarge(value);
        return uint96(value);
    }
}
