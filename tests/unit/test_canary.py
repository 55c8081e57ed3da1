"""A canary node's salt and tag (`node.canary`): deterministic from the creator's key, bound to one submission,
shaped like real work's random tag (the chain checks the tag's first 12 bytes; tests/integration/test_lifecycle.py
reveals one on a real chain, and contracts/test/Canary.t.sol tests every rule of the reveal)."""

from __future__ import annotations

from eth_abi import encode
from eth_utils import keccak

from node.adversary import WrongModel
from node.canary import Canary, NoiseUpdate
from protocol.accounts import load_signer
from protocol.chain.ids import canary_tag, submission_id

MARKET = "0x5FbDB2315678afecb367f032d93F642f64180aa3"


def test_the_salt_is_the_creators_alone_and_one_per_submission() -> None:
    creator, other = Canary(load_signer("dev0")), Canary(load_signer("dev1"))
    first, second = submission_id(1, 0, load_signer("dev5").address), submission_id(1, 1, load_signer("dev5").address)
    assert creator.salt(MARKET, first) == Canary(load_signer("dev0")).salt(MARKET, first)  # a restart finds it
    assert creator.salt(MARKET, first) != creator.salt(MARKET, second)
    assert creator.salt(MARKET, first) != other.salt(MARKET, first)
    assert creator.salt(MARKET, first) != creator.salt("0x" + "11" * 20, first)


def test_the_tag_opens_only_with_its_salt_and_submission() -> None:
    """The first 12 bytes are `Ids.canaryTag` (keccak256 of the ABI-encoded salt, label and id); the rest random-
    looking, so the stored 12 bytes are all a validator sees. Broken version: the label left out of the hash."""
    canary = Canary(load_signer("dev0"))
    sid = submission_id(3, 2, load_signer("dev5").address)
    salt = canary.salt(MARKET, sid)
    tag = canary.tag(MARKET, sid)
    assert len(tag) == 32 and tag == canary_tag(salt, sid)
    assert tag[:12] == keccak(encode(["bytes32", "string", "uint256"], [salt, "crucible-canary", sid]))[:12]
    assert canary_tag(salt, sid + 1)[:12] != tag[:12]
    assert canary_tag(bytes(32), sid)[:12] != tag[:12]


def test_the_fault_is_one_every_check_catches() -> None:
    canary = Canary(load_signer("dev0"))
    faults = {type(canary.fault(MARKET, submission_id(1, r, load_signer("dev5").address))) for r in range(16)}
    assert faults == {WrongModel, NoiseUpdate}


def test_the_noise_fault_is_never_the_honest_update() -> None:
    """Even where the honest update is zero (no reward varied in any group), the canary's update is not: the
    update replay tells them apart. Broken version: `random-update`, scaled to the honest norm (zero here)."""
    import torch

    from protocol.work.round import RoundContext

    zero = {"layer.weight": torch.zeros(4, 3), "layer.bias": torch.zeros(3)}
    context = RoundContext.__new__(RoundContext)
    object.__setattr__(context, "round_index", 2)
    noisy = NoiseUpdate().corrupt_update(zero, context)
    assert all(noisy[name].norm() > 0 and noisy[name].shape == zero[name].shape for name in zero)
