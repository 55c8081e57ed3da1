"""How the demo plays the devnet's clock: it moves the chain's time to the nearest deadline of the live
rounds once the work due before it is done, so a round takes as long as its work, not its windows. With
pipelined rounds several rounds are live at once; the clock then also waits for every open round's
submissions before it moves, and for a round that can open ahead to be opened."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from demo.children import Children
from protocol.chain import devnet
from protocol.chain.client import Crucible

Condition = Callable[[], bool]
# Deadlines this close to the one the clock moves to have their work waited for too: the demo's windows are
# an hour long, so two rounds' deadlines are either seconds apart (rounds opened one after the other) or
# about a window apart.
NEAR_S = 60


def round_final(crucible: Crucible, task_id: int, round_index: int) -> Condition:
    """Whether the round is final."""
    return lambda: crucible.round(task_id, round_index).finalised


@dataclass
class Clock:
    """The demo's task, its trainers (address and log label) and how it reports and waits."""

    crucible: Crucible
    task_id: int
    rounds: int
    trainers: list[tuple[str, str]]
    per_check: int
    children: Children
    stage: Callable[[str, int, int], None]
    wait: Callable[[str, Condition], None]  # waits for the condition, failing on a child's failure
    canaries: list[str] = field(default_factory=list)  # addresses planting the creator's canaries

    def play(self) -> None:
        """Moves the clock from deadline to deadline until the task ends: each time the work due before the
        nearest one is done (every trainer submitted or skipped, every check committed to, then revealed, the
        next checkpoint agreed). With pipelining, a round that can open ahead is waited for first: its trainers
        then work while the round before it is validated."""
        crucible, task_id, last = self.crucible, self.task_id, self.rounds - 1
        while not (task := crucible.task(task_id)).ended:
            now = crucible.chain.now()
            following = task.open_round + 1
            if (task.max_staleness and following < self.rounds and following - task.current_round <= task.max_staleness
                    and now >= crucible.deadlines(task_id, task.open_round).submit):  # fmt: skip
                self.wait(f"round {following} opened ahead", self._opened(following))
                continue
            # (deadline, whether it closes a submission window, what, the work due before it)
            due: list[tuple[int, bool, str, Condition]] = []
            for r in crucible.live_rounds(task):
                deadlines = crucible.deadlines(task_id, r)
                if now < deadlines.submit:
                    due.append((deadlines.submit, True, f"round {r} of 0-{last}: trainers working", self._submitted(r)))
                elif now < deadlines.votes_revealed_from:
                    due.append((deadlines.votes_revealed_from, False, f"round {r} of 0-{last}: validators checking",
                                self._checked(r, "committed_mask")))  # fmt: skip
                elif now < deadlines.validate:
                    due.append((deadlines.validate, False, f"round {r} of 0-{last}: validators revealing",
                                self._checked(r, "voted_mask")))  # fmt: skip
                elif r == task.current_round and self.canaries and now < deadlines.reveals_end:
                    # The canaries are revealed in the challenge window's first half; validators dispute after it.
                    due.append((deadlines.reveals_end, False, f"round {r} of 0-{last}: revealing canaries",
                                partial(self._revealed, r)))  # fmt: skip
                elif r == task.current_round:
                    final_from = max(crucible.final_from(task_id, r), now)
                    due.append((final_from, False, f"round {r} of 0-{last}: agreeing the next checkpoint",
                                self._agreed(r)))  # fmt: skip
            if not due:  # a later round's windows have passed while an earlier one is not final: its turn next
                time.sleep(0.5)
                continue
            deadline = min(at for at, _, _, _ in due)
            # The work due at the nearest deadline, every open round's submissions, and the work due at any
            # deadline soon after it: pipelined rounds open seconds apart, so after the move a later window
            # (a submission or an attestation window) would otherwise close in real time, seconds later,
            # while its work is still being done.
            for at, submissions, what, condition in due:
                if at - deadline <= NEAR_S or submissions:
                    self.stage(what, task.current_round, self.rounds)
                    self.wait(what, condition)
            devnet.warp_to(crucible.chain, max(deadline, crucible.chain.now()))
            current = task.current_round
            if any(at == deadline and "agreeing" in what for at, _, what, _ in due):
                self.stage(f"round {current} of 0-{last}: finalising", current, self.rounds)
                self.wait(f"round {current} final", round_final(crucible, task_id, current))
        self.stage("every round final", self.rounds, self.rounds)

    def _opened(self, round_index: int) -> Condition:
        return lambda: self.crucible.task(self.task_id).open_round >= round_index

    def _submitted(self, round_index: int) -> Condition:
        """Whether every trainer submitted to the round or said it skips it (a refused base, a full stake)."""

        def done() -> bool:
            sent = {str(e["trainer"]) for e in self.crucible.submissions(self.task_id, round_index)}
            return all(
                address in sent
                or any(
                    e.get("event") == "skipped" and e.get("round") == round_index for e in self.children.events(label)
                )
                for address, label in self.trainers
            )

        return done

    def _checked(self, round_index: int, mask: str) -> Condition:
        """Whether every position of every check of the round was committed to (`mask` "committed_mask", the
        commit phase's work) or revealed ("voted_mask", the reveal phase's); a validator holding several of a
        check's positions votes them at once."""

        def done() -> bool:
            ids = [int(e["submissionId"]) for e in self.crucible.submissions(self.task_id, round_index)]
            marked = sum(getattr(self.crucible.submission(s), mask).bit_count() for s in ids)
            return marked >= len(ids) * self.per_check

        return done

    def _agreed(self, round_index: int) -> Condition:
        """Whether the round's canaries are revealed (a reveal changes what is aggregated), its disputes resolved
        and its next checkpoint agreed."""

        def done() -> bool:
            if not self._revealed(round_index):
                return False
            self._close_tied_disputes(round_index)
            state = self.crucible.round(self.task_id, round_index)
            if state.finalised:  # finalised once a tied dispute's deadline passed, agreed or not
                return True
            # A round whose work was all rejected has nothing to aggregate: it keeps its checkpoint.
            return state.open_disputes == 0 and (state.agreed_next != bytes(32) or state.included_units == 0)

        return done

    def _revealed(self, round_index: int) -> bool:
        """Whether every canary planted in the round was revealed (or disputed first: then its dispute decides)."""
        planted = [
            int(e["submissionId"])
            for e in self.crucible.submissions(self.task_id, round_index)
            if str(e["trainer"]) in self.canaries
        ]
        return all((state := self.crucible.submission(s)).canary or state.disputed for s in planted)

    def _close_tied_disputes(self, round_index: int) -> None:
        """A dispute whose whole committee committed to its votes waits for its reveal phase (the last quarter of
        its voting time): the clock moves there, and the members reveal. One whose whole committee revealed without
        a majority (a lazy member against an honest one) waits for its deadline: the clock moves there, and the
        validators resolve it (not upheld)."""
        now = self.crucible.chain.now()
        for event in self.crucible.submissions(self.task_id, round_index):
            submission = int(event["submissionId"])
            if not self.crucible.submission(submission).disputed:
                continue
            dispute = self.crucible.dispute_state(submission)
            if not dispute.open or now >= dispute.deadline:
                continue
            revealed_from = self.crucible.dispute_votes_revealed_from(submission)
            if dispute.committed_mask.bit_count() >= self.per_check and now < revealed_from:
                devnet.warp_to(self.crucible.chain, revealed_from)
                now = revealed_from
            elif dispute.voted_mask.bit_count() >= self.per_check:
                devnet.warp_to(self.crucible.chain, dispute.deadline)
                now = dispute.deadline
