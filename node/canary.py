"""Canaries: known-bad work a task's creator plants through an ordinary trainer address, to catch validators who
attest without checking.

`crucible node run --canary --creator-account NAME` runs a node that works like an honest one but publishes work
with one fault every real check catches, submits it with a tag only the creator's salt opens, and once the
validate window has closed reveals it with the creator's key (`TaskMarket.revealCanary`). Validators see an
address with stake, a submission in the window and a tag of random-looking bytes until then
(docs/protocol.md, "Canaries").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from eth_account.messages import encode_defunct
from eth_utils import keccak

from node.adversary import Adversary, WrongModel
from protocol.accounts import Signer
from protocol.chain.ids import canary_tag
from protocol.work.round import RoundContext

if TYPE_CHECKING:
    import torch

NOISE_SCALE = 1e-2  # the canary's noise update, per element


class NoiseUpdate(Adversary):
    """Honest rollouts, an update of random noise: unlike `random-update` (the honest update's size) it is never
    zero, so the update replay fails it even in a round whose honest update is zero (no reward varied)."""

    name = "canary-noise"
    description = "publishes honest rollouts with an update of random noise"

    def corrupt_update(self, update: dict[str, torch.Tensor], context: RoundContext) -> dict[str, torch.Tensor]:
        import torch

        generator = torch.Generator().manual_seed(context.round_index)
        return {
            name: (torch.randn(value.shape, generator=generator) * NOISE_SCALE).to(value.dtype)
            for name, value in update.items()
        }


# The faults a canary carries, one a round by its salt: each is caught by every check, deterministically (a
# prefill of the wrong model fails TOPLOC; a noise update fails the update replay), so an honest validator never
# votes a canary valid. Two kinds, so that no single cheap check is enough to spot them all.
CANARY_FAULTS: tuple[type[Adversary], ...] = (WrongModel, NoiseUpdate)


@dataclass(frozen=True)
class Canary:
    """The creator whose canaries a node plants: it signs each canary's salt and sends the reveal."""

    creator: Signer

    def salt(self, market: str, submission: int) -> bytes:
        """The canary's salt: from the creator's deterministic signature over the market and submission, so a
        restarted node finds it again and nobody without the creator's key can make or guess it."""
        message = encode_defunct(text=f"crucible canary salt {market.lower()} {submission}")
        return keccak(hexstr=self.creator.sign_message(message))

    def tag(self, market: str, submission: int) -> bytes:
        """The 32 bytes the canary is submitted with."""
        return canary_tag(self.salt(market, submission), submission)

    def fault(self, market: str, submission: int) -> Adversary:
        """The fault the canary carries this round (picked by its salt)."""
        return CANARY_FAULTS[self.salt(market, submission)[0] % len(CANARY_FAULTS)]()
