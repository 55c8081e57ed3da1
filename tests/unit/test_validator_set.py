"""The validator set beside the declared colluding share: largest first, and the exact boundary of "one address
alone holds more than the share"."""

from protocol.chain.validator_set import ValidatorSet

A, B, C = ("0x" + digit * 40 for digit in "abc")


def test_the_largest_holder_is_compared_with_the_declared_share_exactly() -> None:
    """A third of the stake against a declared 333,333 ppm exceeds it (1/3 > 0.333333); against 333,334 it does not.
    Broken version: compare the rounded float share (`round(share, 6) * 1e6 > ppm`) → the first assertion fails."""
    even = {A: 100, B: 100, C: 100}
    assert ValidatorSet.of(even, 333_333).one_exceeds
    assert not ValidatorSet.of(even, 333_334).one_exceeds
    found = ValidatorSet.of({A: 1, B: 5, C: 0}, 333_333)
    assert [h.address for h in found.holders] == [B, A], "largest first, no stake left out"
    assert found.as_json()["holders"][0]["share"] == round(5 / 6, 6)
    assert "WARNING" in found.line("seat holder(s)") and B in found.line("seat holder(s)")
    assert ValidatorSet.of({}, 333_333).line("seat holder(s)").startswith("validator set: no seat holder(s) yet")
    assert not ValidatorSet.of({}, 333_333).one_exceeds
