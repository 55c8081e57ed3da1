// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {BaseTest} from "./BaseTest.sol";
import {IStakeManager} from "../src/interfaces/IStakeManager.sol";
import {StakeManager} from "../src/StakeManager.sol";

contract StakeManagerTest is BaseTest {
    address internal alice;

    function setUp() public override {
        super.setUp();
        alice = trainers[0];
    }

    function test_Stake() public {
        _stake(alice, IStakeManager.Role.Trainer, 100 * TOKEN);
        IStakeManager.Account memory account = stakes.accountOf(alice);
        assertEq(account.staked, 100 * TOKEN, "staked");
        assertEq(uint256(account.role), uint256(IStakeManager.Role.Trainer), "role");
        assertEq(token.balanceOf(address(stakes)), 100 * TOKEN, "held");
        assertEq(stakes.freeStake(alice), 100 * TOKEN, "free");
    }

    function test_RevertWhen_StakeZero() public {
        vm.prank(alice);
        vm.expectRevert(IStakeManager.StakeZeroAmount.selector);
        stakes.stake(0, IStakeManager.Role.Trainer);
    }

    function test_RevertWhen_StakeRoleNone() public {
        vm.prank(alice);
        vm.expectRevert(IStakeManager.StakeInvalidRole.selector);
        stakes.stake(1, IStakeManager.Role.None);
    }

    function test_RevertWhen_StakeOtherRole() public {
        _stake(alice, IStakeManager.Role.Trainer, 1);
        vm.prank(alice);
        vm.expectRevert(
            abi.encodeWithSelector(
                IStakeManager.StakeRoleMismatch.selector,
                alice,
                IStakeManager.Role.Trainer,
                IStakeManager.Role.Validator
            )
        );
        stakes.stake(1, IStakeManager.Role.Validator);
    }

    function test_RoleChangesOnceStakeIsGone() public {
        _stake(alice, IStakeManager.Role.Trainer, 10);
        vm.prank(alice);
        stakes.requestUnstake(10);
        vm.warp(block.timestamp + UNBONDING);
        vm.prank(alice);
        stakes.withdraw();
        _stake(alice, IStakeManager.Role.Validator, 10);
        assertEq(uint256(stakes.accountOf(alice).role), uint256(IStakeManager.Role.Validator), "role");
    }

    function test_StakeWithPermit() public {
        address holder = vm.addr(99);
        vm.prank(creator);
        token.transfer(holder, 50);
        bytes32 structHash = keccak256(
            abi.encode(
                keccak256("Permit(address owner,address spender,uint256 value,uint256 nonce,uint256 deadline)"),
                holder,
                address(stakes),
                50,
                token.nonces(holder),
                block.timestamp + 1
            )
        );
        bytes32 digest = keccak256(abi.encodePacked("\x19\x01", token.DOMAIN_SEPARATOR(), structHash));
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(99, digest);
        vm.prank(holder);
        stakes.stakeWithPermit(50, IStakeManager.Role.Validator, block.timestamp + 1, v, r, s);
        assertEq(stakes.accountOf(holder).staked, 50, "staked with permit");
    }

    function test_RevertWhen_StakeOverBalance() public {
        address broke = vm.addr(98);
        vm.startPrank(broke);
        token.approve(address(stakes), type(uint256).max);
        vm.expectRevert();
        stakes.stake(1, IStakeManager.Role.Trainer);
        vm.stopPrank();
    }

    function test_RequestUnstakeAndWithdraw() public {
        _stake(alice, IStakeManager.Role.Trainer, 100);
        vm.prank(alice);
        stakes.requestUnstake(40);
        IStakeManager.Account memory account = stakes.accountOf(alice);
        assertEq(account.staked, 60, "staked");
        assertEq(account.unbonding, 40, "unbonding");
        assertEq(account.releaseAt, block.timestamp + UNBONDING, "release");
        uint256 before = token.balanceOf(alice);
        vm.warp(block.timestamp + UNBONDING);
        vm.prank(alice);
        assertEq(stakes.withdraw(), 40, "withdrawn");
        assertEq(token.balanceOf(alice) - before, 40, "paid out");
        assertEq(stakes.accountOf(alice).unbonding, 0, "unbonding cleared");
    }

    function test_RevertWhen_RequestUnstakeZero() public {
        vm.prank(alice);
        vm.expectRevert(IStakeManager.StakeZeroAmount.selector);
        stakes.requestUnstake(0);
    }

    function test_RevertWhen_RequestUnstakeOverFree() public {
        _stake(alice, IStakeManager.Role.Trainer, 100);
        vm.prank(address(market));
        stakes.lock(alice, IStakeManager.Role.Trainer, 70);
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.StakeInsufficientFree.selector, alice, 30, 31));
        stakes.requestUnstake(31);
    }

    function test_RevertWhen_WithdrawEarly() public {
        _stake(alice, IStakeManager.Role.Trainer, 100);
        vm.prank(alice);
        stakes.requestUnstake(100);
        vm.warp(block.timestamp + UNBONDING - 1);
        vm.prank(alice);
        vm.expectRevert(
            abi.encodeWithSelector(
                IStakeManager.StakeNotReleasable.selector, alice, block.timestamp + 1, block.timestamp
            )
        );
        stakes.withdraw();
    }

    function test_RevertWhen_WithdrawNothing() public {
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.StakeNotReleasable.selector, alice, 0, block.timestamp));
        stakes.withdraw();
    }

    function test_LockUnlock() public {
        _stake(alice, IStakeManager.Role.Trainer, 100);
        vm.prank(address(market));
        stakes.lock(alice, IStakeManager.Role.Trainer, 60);
        assertEq(stakes.freeStake(alice), 40, "free after lock");
        vm.prank(address(market));
        stakes.unlock(alice, 60);
        assertEq(stakes.freeStake(alice), 100, "free after unlock");
    }

    function test_RevertWhen_LockWrongRole() public {
        _stake(alice, IStakeManager.Role.Trainer, 100);
        vm.prank(address(market));
        vm.expectRevert(
            abi.encodeWithSelector(
                IStakeManager.StakeRoleMismatch.selector,
                alice,
                IStakeManager.Role.Trainer,
                IStakeManager.Role.Validator
            )
        );
        stakes.lock(alice, IStakeManager.Role.Validator, 1);
    }

    function test_RevertWhen_LockOverFree() public {
        _stake(alice, IStakeManager.Role.Trainer, 100);
        vm.prank(address(market));
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.StakeInsufficientFree.selector, alice, 100, 101));
        stakes.lock(alice, IStakeManager.Role.Trainer, 101);
    }

    function test_RevertWhen_UnlockOverLocked() public {
        vm.prank(address(market));
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.StakeUnlockExceedsLocked.selector, alice, 0, 1));
        stakes.unlock(alice, 1);
    }

    /// Safety property 5: nobody but the market touches someone else's stake.
    function test_RevertWhen_NotMarketLocksUnlocksOrSlashes() public {
        _stake(alice, IStakeManager.Role.Trainer, 100);
        vm.startPrank(auditor);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.StakeUnauthorized.selector, auditor));
        stakes.lock(alice, IStakeManager.Role.Trainer, 1);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.StakeUnauthorized.selector, auditor));
        stakes.unlock(alice, 1);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.StakeUnauthorized.selector, auditor));
        stakes.slash(alice, 1);
        vm.stopPrank();
    }

    function test_SlashTakesStakedThenUnbondingAndNeverMore() public {
        _stake(alice, IStakeManager.Role.Trainer, 100);
        vm.prank(alice);
        stakes.requestUnstake(30);
        vm.prank(address(market));
        (uint256 slashed, uint256 left) = stakes.slash(alice, 90);
        assertEq(slashed, 90, "slashed");
        assertEq(left, stakes.accountOf(alice).staked, "what is left, returned");
        IStakeManager.Account memory account = stakes.accountOf(alice);
        assertEq(account.staked, 0, "staked taken first");
        assertEq(account.unbonding, 10, "then unbonding");
        vm.prank(address(market));
        (slashed,) = stakes.slash(alice, 1000);
        assertEq(slashed, 10, "capped at what is left");
        assertEq(token.balanceOf(address(market)), 100, "slashed tokens went to the market");
        vm.prank(address(market));
        (slashed, left) = stakes.slash(alice, 5);
        assertEq(slashed + left, 0, "nothing left");
    }

    function test_RevertWhen_BindMarketTwiceOrByStranger() public {
        StakeManager fresh = new StakeManager(token, 1);
        vm.prank(auditor);
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.StakeMarketBinding.selector, auditor));
        fresh.bindMarket(address(1));
        fresh.bindMarket(address(1));
        vm.expectRevert(abi.encodeWithSelector(IStakeManager.StakeMarketBinding.selector, address(this)));
        fresh.bindMarket(address(2));
    }

    function testFuzz_StakeUnstakeWithdrawConserves(uint256 stakeAmount, uint256 unstakeAmount, uint256 lockAmount)
        public
    {
        stakeAmount = bound(stakeAmount, 1, FUNDS);
        lockAmount = bound(lockAmount, 0, stakeAmount);
        unstakeAmount = bound(unstakeAmount, 1, stakeAmount);
        _stake(alice, IStakeManager.Role.Trainer, stakeAmount);
        vm.prank(address(market));
        stakes.lock(alice, IStakeManager.Role.Trainer, lockAmount);
        vm.prank(alice);
        if (unstakeAmount > stakeAmount - lockAmount) {
            vm.expectRevert(
                abi.encodeWithSelector(
                    IStakeManager.StakeInsufficientFree.selector, alice, stakeAmount - lockAmount, unstakeAmount
                )
            );
            stakes.requestUnstake(unstakeAmount);
            return;
        }
        stakes.requestUnstake(unstakeAmount);
        vm.warp(block.timestamp + UNBONDING);
        vm.prank(alice);
        stakes.withdraw();
        assertEq(token.balanceOf(alice), FUNDS - stakeAmount + unstakeAmount, "balance");
        assertEq(token.balanceOf(address(stakes)), _stakeOf(alice), "conserved");
    }

    function testFuzz_SlashNeverExceedsStake(uint256 stakeAmount, uint256 unbondAmount, uint256 slashAmount) public {
        stakeAmount = bound(stakeAmount, 1, FUNDS);
        unbondAmount = bound(unbondAmount, 0, stakeAmount);
        slashAmount = bound(slashAmount, 0, 2 * FUNDS);
        _stake(alice, IStakeManager.Role.Trainer, stakeAmount);
        if (unbondAmount != 0) {
            vm.prank(alice);
            stakes.requestUnstake(unbondAmount);
        }
        vm.prank(address(market));
        (uint256 slashed,) = stakes.slash(alice, slashAmount);
        assertEq(slashed, slashAmount < stakeAmount ? slashAmount : stakeAmount, "slashed");
        IStakeManager.Account memory account = stakes.accountOf(alice);
        assertEq(account.staked + account.unbonding + slashed, stakeAmount, "accounted");
        assertEq(token.balanceOf(address(stakes)), _stakeOf(alice), "conserved");
    }
}
