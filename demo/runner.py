"""`crucible demo`: a whole decentralised RL task on a private devnet, every role a separate process.

A private devnet (Anvil, or Hardhat's node), the contracts, an initial model (SmolLM2-135M-Instruct from
the model cache, or one made and warmed up locally) published as a checkpoint, a task with a bounty, trainer nodes
(`crucible node run`, some with `--adversary`) and validators (`crucible validator run`) as child
processes sharing one local store. The demo itself only plays the devnet's clock: once everyone has
done a window's work it moves the chain's time to the next deadline (a devnet mines on demand), so a
round takes as long as its work, not its windows. It ends with the held-out gain of the final
checkpoint over the initial one (the same problems, paired, with a 95 % interval), each round's
rollout reward, each account's stake and rewards, and the auditor's money check; every child is
stopped on the way out, Ctrl-C included.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from auditor.audit import Auditor
from auditor.index import EventIndex
from auditor.money import CREDIT_KINDS, market_balance_check, money_check
from demo.children import Children
from demo.clock import Clock, round_final
from demo.options import LONG_WINDOW_S, DemoOptions
from protocol.accounts import Signer, load_signer
from protocol.artifacts.backends import open_store
from protocol.artifacts.ipfs_node import start_private_ipfs
from protocol.artifacts.manifest import load_manifest
from protocol.artifacts.store import Store
from protocol.chain import devnet
from protocol.chain.client import Crucible, Role
from protocol.chain.connection import Chain
from protocol.chain.deployment import DEVNET_UNBONDING_S, deploy
from protocol.chain.ids import decode_submission_id, submission_text
from protocol.chain.params import PPM, demo_task_params
from protocol.config import crucible_home, devnet_settings
from protocol.errors import CrucibleError
from protocol.ml.adapters import check_model_fits
from protocol.ml.evaluation import accuracy, held_out_rewards, paired_gain
from protocol.ml.importing import model_folder
from protocol.ml.model import publish as publish_model
from protocol.ml.model import save_folder
from protocol.ml.training import initial_model
from protocol.values import format_tokens
from protocol.work.rollouts import parse_rollouts

if TYPE_CHECKING:
    from auditor.report import RoundAudit

TOKEN = 10**18
STEP_TIMEOUT_S = 600
CANARY = "canary"  # a participant that plants the creator's canaries (`crucible node run --canary`)
CANARY_PRIZE = CREDIT_KINDS.index("canary_prize")


@dataclass
class Participant:
    """A demo account: its signer, key (handed to its process through the environment), role, adversary."""

    name: str
    role: str
    signer: Signer
    key: str
    adversary: str | None = None
    stake_before: int = 0


class Demo:
    """One demo run."""

    def __init__(self, options: DemoOptions, say: Callable[[str], None], stage: Callable[[str, int, int], None]):
        self.options = options
        self.say = say
        self.stage = stage
        # Per mode ("greedy", "sampled"), each held-out problem's reward under the initial and the final
        # checkpoint, in held-out order: what a bench pairs across runs (bench/poison.py). Set by `run`.
        self.held_out: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {}

    def __enter__(self) -> Demo:
        self.options.check()
        self.home = Path(tempfile.mkdtemp(prefix="crucible-demo-"))
        (self.home / "logs").mkdir()
        # The run's folder goes when it ends; its logs are kept here (said at the start).
        self.kept_logs = crucible_home() / "demo-logs" / self.home.name
        # A block every second, as on a real chain: the roles share blocks and race for the permissionless
        # steps; the demo still ends each window by moving the clock once its work is done.
        self.devnet = devnet.start_private_chain(
            self.home / "logs" / f"{self.options.client}.log",
            block_time_s=devnet_settings().block_time_s,
            client=self.options.client,
        )
        try:
            self.ipfs = start_private_ipfs(self.home / "ipfs") if self.options.store == "kubo" else None
        except CrucibleError:  # __exit__ will not run: stop the devnet and drop the run's folder here
            self.devnet.stop()
            shutil.rmtree(self.home, ignore_errors=True)
            raise
        self.store_text = str(self.home / "store") if self.ipfs is None else f"kubo:{self.ipfs.api_url}"
        self.children = Children(self.home, self.devnet.rpc_url, self.home / "deployment.json")
        # Ctrl-C and SIGTERM both end in __exit__, even where a shell started us with SIGINT ignored.
        self._previous = [signal.signal(number, _interrupt) for number in (signal.SIGINT, signal.SIGTERM)]
        return self

    def __exit__(self, *exc: object) -> None:
        for number, handler in zip((signal.SIGINT, signal.SIGTERM), self._previous, strict=True):
            signal.signal(number, handler)
        self.children.stop_all()
        self.devnet.stop()
        if self.ipfs is not None:
            self.ipfs.stop()
        with contextlib.suppress(OSError):
            shutil.copytree(self.home / "logs", self.kept_logs, dirs_exist_ok=True)
        shutil.rmtree(self.home, ignore_errors=True)

    def run(self) -> dict[str, Any]:
        """Walks the task to its end; returns the summary."""
        chain = Chain(self.devnet.rpc_url)
        creator = load_signer("dev0")
        crucible = Crucible(chain, deploy(chain, creator, token_holders=(creator.address,),
                                          unbonding_period_s=DEVNET_UNBONDING_S))  # fmt: skip
        crucible.deployment.save(self.children.book)
        where = f"private {self.options.client} devnet at {self.devnet.rpc_url}"
        self.say(f"{where}, contracts deployed; logs kept in {self.kept_logs}")
        return self._walk(crucible, creator, self.home, self.children)

    def keep(self) -> str:
        """Starts the explorer over the finished task; returns its URL (stop with Ctrl-C)."""
        self.children.start("explorer", ["explorer", "serve", "--port", str(self.options.port), "--no-evaluate",
                                         "--store", self.store_text, "--index",
                                         str(self.home / "index.sqlite")])  # fmt: skip
        return f"http://127.0.0.1:{self.options.port}"

    def wait_forever(self) -> None:
        """Blocks until Ctrl-C or until a child fails."""
        while (failure := self.children.failed()) is None:
            time.sleep(1)
        raise CrucibleError(failure)

    # ------------------------------------------------------------ the walk

    def _walk(self, crucible: Crucible, creator: Signer, home: Path, children: Children) -> dict[str, Any]:
        options = self.options
        store = open_store(self.store_text)
        spec = options.spec()
        if options.made_up:
            steps = options.warmup_steps
            self.stage("making the initial model: warm-up", 0, steps)
            model, _, _ = initial_model(
                spec.env(), options.model, steps, seed=0,
                on_step=lambda step, loss: self.stage("making the initial model: warm-up", step + 1, steps),
            )  # fmt: skip
            save_folder(model, home / "model")
            folder = home / "model"
        else:
            self.stage(f"making the initial model: {options.model}", 0, 1)
            folder = model_folder(options.model)
        model_cid = publish_model(folder, store)
        check_model_fits(load_manifest(model_cid, store).model_config_data or {}, spec)
        env_cid = store.put(spec.canonical_bytes())
        self.stage("making the initial model: published", 1, 1)
        # Every submission is checked (a sample rate of 1); by two validators each with a made-up model, by
        # one with a real model, whose checks (a prefill and an update replay of a 135M model) bound the
        # round on 2 cores. A lying validator is still answered by a dispute.
        per_check = min(2 if options.made_up else 1, options.validators)
        submit, validate, challenge = options.windows_s or (LONG_WINDOW_S,) * 3
        params = demo_task_params(
            rounds=options.round_count,
            sample_rate_ppm=PPM,
            validators_per_check=per_check,
            submit_window_s=submit,
            validate_window_s=validate,
            challenge_window_s=challenge,
            max_staleness=options.max_staleness,
            canary_rate_ppm=round(options.canary_rate * PPM),
        )
        task_id = crucible.create_task(creator, params, model_cid, env_cid)
        bounty = format_tokens(params.bounty_wei, 18, "CRU")
        self.say(f"task {task_id}: bounty {bounty} over {options.round_count} rounds, model {model_cid}")

        people = self._participants(crucible, creator)
        for person in people:
            # A cheat is slashed every round: it stakes enough to keep submitting to the end. With pipelining a
            # trainer has up to max_staleness + 1 submissions locked at once.
            locks = options.max_staleness + 1
            stake = params.min_trainer_stake_wei * locks + params.slash_wei * (
                options.round_count if person.adversary else 1
            )
            if person.role == "validator":
                stake = 2 * params.min_validator_stake_wei
            crucible.transfer(creator, person.signer.address, stake)
            crucible.stake(person.signer, stake, Role.TRAINER if person.role == "trainer" else Role.VALIDATOR)
            person.stake_before = crucible.stake_account(person.signer.address).staked
        common = [
            "--task",
            str(task_id),
            "--account",
            "env",
            "--rounds",
            str(options.round_count),
            "--json",
            "--poll",
            "0.5",
            "--store",
            self.store_text,
        ]
        cores = os.cpu_count() or 1
        for person in people:
            role_args = ["node" if person.role == "trainer" else "validator", "run", *common]
            if person.adversary == CANARY:
                # The creator's canaries: it reveals them with its own key (a devnet account the child knows).
                role_args += ["--canary", "--creator-account", "dev0"]
            elif person.adversary:
                role_args += ["--adversary", person.adversary]
            # The cores shared out: more threads than cores spin (OpenMP waits busily) where they would wait.
            threads = max(1, cores // (options.trainers if person.role == "trainer" else options.validators))
            core = None
            if options.pin_cores:
                threads, core = 1, people.index(person) % cores
            children.start(person.name, role_args, key=person.key, threads=threads, core=core)
        trainers = [(p.signer.address, p.name) for p in people if p.role == "trainer"]
        canaries = [p.signer.address for p in people if p.adversary == CANARY]
        if options.windows_s is None:
            wait = partial(self._wait, children=children, tick=crucible)
            Clock(crucible, task_id, options.round_count, trainers, per_check, children, self.stage, wait,
                  canaries).play()  # fmt: skip
        else:  # real windows: the roles move the rounds on themselves, as on a public chain
            for round_index in range(options.round_count):
                self.stage(f"round {round_index} of 0-{options.round_count - 1} (real windows)", round_index,
                           options.round_count)  # fmt: skip
                final = round_final(crucible, task_id, round_index)
                self._wait(f"round {round_index} final", final, children, timeout_s=8 * max(options.windows_s) + 600)
        self._wait("every process to settle, claim and exit", lambda: all(
            process.poll() is not None for _, process in children.processes), children)  # fmt: skip
        refund = crucible.refund(creator, task_id) if crucible.task(task_id).pool else 0
        return self._summary(crucible, home, store, task_id, people, refund)

    def _participants(self, crucible: Crucible, creator: Signer) -> list[Participant]:
        options = self.options
        people = []
        adversaries = list(options.adversaries)
        for i in range(options.trainers):
            # The adversaries are the last trainers: honest work comes first (a `copied` node copies it).
            adversary = adversaries[i - (options.trainers - len(adversaries))] if i >= options.trainers - len(
                adversaries) else None  # fmt: skip
            people.append(self._fund(crucible, creator, f"trainer-{i + 1}", "trainer", adversary))
        for i in range(options.canary_nodes):
            people.append(self._fund(crucible, creator, f"canary-{i + 1}", "trainer", CANARY))
        for i in range(options.validators):
            strategy = options.validator_adversaries[i] if i < len(options.validator_adversaries) else None
            strategy = "lazy" if options.unsafe_no_validation else strategy
            people.append(self._fund(crucible, creator, f"validator-{i + 1}", "validator", strategy))
        return people

    @staticmethod
    def _fund(crucible: Crucible, creator: Signer, name: str, role: str, adversary: str | None) -> Participant:
        signer, key = devnet.funded_account(crucible, creator, f"crucible-demo-{name}", 5000 * TOKEN, name=name)
        label = f"{name} ({adversary})" if adversary and adversary != CANARY else name
        return Participant(label, role, signer, key, adversary)

    def _wait(
        self,
        what: str,
        condition: Callable[[], bool],
        children: Children,
        tick: Crucible | None = None,
        timeout_s: float = STEP_TIMEOUT_S,
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return
            failure = children.failed()
            if failure:
                raise CrucibleError(f"waiting for {what}: {failure}")
            if tick is not None:  # a dispute's committee needs the next block: one now, not in a second
                tick.chain.w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]
            time.sleep(0.5)
        raise CrucibleError(f"timed out after {timeout_s:.0f} s waiting for {what}")

    # ------------------------------------------------------------ the summary

    @staticmethod
    def _time_of(crucible: Crucible, block: int) -> int:
        """A block's timestamp (the chain's clock: the wall clock where the demo does not move it)."""
        return int(crucible.chain.w3.eth.get_block(block)["timestamp"])

    def _busy_fraction(self, person: Participant) -> float | None:
        """A trainer's compute time over its wall time, from the `finished` line of its log (None: not a
        trainer, or it did not finish)."""
        if person.role != "trainer":
            return None
        finished = [e for e in self.children.events(person.name) if e.get("event") == "finished"]
        return float(finished[-1]["busy_fraction"]) if finished else None

    @staticmethod
    def _canaries(index: EventIndex, task_id: int, names: dict[str, str]) -> list[dict[str, Any]]:
        """Each revealed canary: its round and planter, who voted it valid and invalid, the validators it slashed
        (they voted it valid) and those it paid (they voted it invalid: its prize)."""
        found = []
        prizes = [e for e in index.events("Credited", task=task_id) if int(e.args["kind"]) == CANARY_PRIZE]
        for event in index.events("CanaryRevealed", task=task_id):
            submission = int(event.args["submissionId"])
            _, round_index, trainer = decode_submission_id(submission)
            slashed = [
                names.get(e.args["validator"], e.args["validator"])
                for e in index.events("ValidatorPenalised", submission=submission)
            ]
            # Its prize is credited in the transaction that settles it (a credit names no submission).
            settled = {e.tx for e in index.events("Settled", submission=submission)}
            paid = [(names.get(e.args["account"], e.args["account"]), int(e.args["amount"]))
                    for e in prizes if e.tx in settled]  # fmt: skip
            votes = index.events("Attested", submission=submission)
            found.append({
                "submission": submission_text(submission), "round": round_index, "trainer": names.get(trainer, trainer),
                "voted_valid": [names.get(e.args["validator"], e.args["validator"]) for e in votes if e.args["valid"]],
                "voted_invalid": [names.get(e.args["validator"], e.args["validator"]) for e in votes
                                  if not e.args["valid"]],
                "slashed": slashed, "prize_wei": {name: str(amount) for name, amount in paid},
            })  # fmt: skip
        return found

    @staticmethod
    def _rollout_reward(audit: RoundAudit, store: Store) -> float | None:
        """Mean reward of the round's accepted rollouts: the checkpoint's policy on thousands of training
        prompts (RL's own objective, a far smaller error than the held-out set's 200 problems)."""

        rewards = [
            sample.reward
            for submission in audit.submissions
            if not submission.rejected
            for sample in parse_rollouts(store.get(submission.rollout_cid), submission.rollout_cid).samples
        ]
        return sum(rewards) / len(rewards) if rewards else None

    def _summary(
        self, crucible: Crucible, home: Path, store: Store, task_id: int, people: list[Participant], refund: int
    ) -> dict[str, Any]:

        index = EventIndex(crucible, home / "index.sqlite")
        try:
            index.sync()
            auditor = Auditor(crucible, index, store, rerun=False)
            env_cid = str(auditor.created(task_id).args["envCid"])
            created_block = auditor.created(task_id).block
            audits = [auditor.round(task_id, r, rerun=False) for r in range(self.options.round_count)]
            checkpoints = [audit.checkpoint_cid for audit in audits]
            last = audits[-1].agreed_cid or crucible.checkpoint_cid(task_id, self.options.round_count - 1)
            rewards = [self._rollout_reward(audit, store) for audit in audits]
            # The gain: the initial and final checkpoints on the same held-out problems (the same sampling
            # seeds), paired problem by problem; rounds in between show their rollouts' reward.
            spec = auditor.spec(env_cid)
            every = [*checkpoints, last]
            chosen = range(len(every)) if self.options.eval_every_round else (0, len(every) - 1)
            modes = ("greedy", "sampled") if self.options.eval_sampled else ("greedy",)
            evaluated: dict[tuple[int, str], tuple[float, ...]] = {}
            for done, (number, mode) in enumerate([(n, m) for n in chosen for m in modes]):
                self.stage(f"evaluating on {self.options.eval_problems} held-out problems", done,
                           len(chosen) * len(modes))  # fmt: skip
                loaded = auditor.models.get(every[number])
                count = self.options.eval_problems
                evaluated[number, mode] = held_out_rewards(
                    loaded.model, loaded.tokenizer, spec, count, mode == "greedy"
                )
            rounds = []
            names = {person.signer.address: person.name for person in people}
            for number, cid in enumerate(every):
                greedy, sampled = evaluated.get((number, "greedy")), evaluated.get((number, "sampled"))
                rounds.append({
                    "round": number, "checkpoint_cid": cid,
                    "accuracy": None if greedy is None else accuracy(greedy),
                    "sampled_accuracy": None if sampled is None else accuracy(sampled),
                    "rollout_reward": rewards[number] if number < len(rewards) else None,
                    "opened_at": next((self._time_of(crucible, e.block) for e in index.events(
                        "RoundOpened", task=task_id, round_index=number)), None),
                    "finalised_at": next((self._time_of(crucible, e.block) for e in index.events(
                        "RoundFinalised", task=task_id, round_index=number)), None),
                    "finalised_block": next((e.block for e in index.events("RoundFinalised", task=task_id,
                                                                            round_index=number)), None),
                    # Each update of the round: how many rounds old its base was, and whether it was included.
                    "updates": [] if number >= len(audits) else [
                        {"trainer": names.get(s.trainer, s.trainer), "base_round": s.base_round,
                         "staleness": s.round_index - s.base_round, "included": not s.rejected,
                         "block": s.block}
                        for s in audits[number].submissions
                    ],
                    # What the outer step did to the round's updates (clipped, trimmed), as the agreed
                    # checkpoint records it: one line each, notes, not findings.
                    "outer_step": [] if number >= len(audits) else audits[number].outer_step_notes,
                })  # fmt: skip
            last_number = len(every) - 1
            gain: dict[str, Any] = {"problems": len(evaluated[0, "greedy"])}
            for mode in ("greedy", "sampled"):
                ends = evaluated.get((0, mode)), evaluated.get((last_number, mode))
                if ends[0] is not None and ends[1] is not None:
                    self.held_out[mode] = (ends[0], ends[1])
                gain[mode] = None if ends[0] is None or ends[1] is None else paired_gain(ends[0], ends[1]).as_json()
            canaries = self._canaries(index, task_id, names)
            books = money_check(crucible, index, task_id)
            market = market_balance_check(crucible, index)
            accounts = []
            for person in people:
                credited = sum(int(e.args["amount"]) for e in index.events("Credited", task=task_id,
                                                                            account=person.signer.address))  # fmt: skip
                staked = crucible.stake_account(person.signer.address).staked
                accounts.append({
                    "name": person.name, "role": person.role, "address": person.signer.address,
                    "adversary": person.adversary, "stake_before_wei": str(person.stake_before),
                    "stake_after_wei": str(staked), "rewards_wei": str(credited),
                    "busy_fraction": self._busy_fraction(person),
                })  # fmt: skip
        finally:
            index.close()
        return {
            "task_id": task_id,
            "chain": {"client": self.options.client, "client_version": crucible.chain.client_version()},
            "created_at": self._time_of(crucible, created_block),
            "max_staleness": self.options.max_staleness,
            "rounds": rounds,
            "gain": gain,
            "accounts": accounts,
            "canaries": canaries,
            "refunded_wei": str(refund),
            "money_check": books.as_json() | {"market": market, "balanced": books.balanced and market["balanced"]},
        }


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
