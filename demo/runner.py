"""`crucible demo`: a whole decentralised RL task on a private devnet, every role a separate process.

A private Anvil, the contracts, an initial model made and warmed up locally (`crucible model init`,
`crucible model publish`), a task with a bounty, trainer nodes (`crucible node run`, some with
`--adversary`) and validators (`crucible validator run`) as child processes sharing one local
store. The demo itself only plays the devnet's clock: once everyone has done a window's work it
moves the chain's time to the next deadline (a devnet mines on demand), so a round takes as long
as its work, not its windows. It ends with the held-out accuracy of every checkpoint, each
account's stake and rewards, and the auditor's money check; every child is stopped on the way out,
Ctrl-C included.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from auditor.audit import Auditor
from auditor.index import EventIndex
from auditor.money import market_balance_check, money_check
from node.adversary import ADVERSARIES
from protocol.accounts import Signer, load_signer
from protocol.artifacts.store import LocalStore
from protocol.chain import devnet
from protocol.chain.client import Crucible, Role
from protocol.chain.connection import Chain
from protocol.chain.deployment import DEVNET_UNBONDING_S, deploy
from protocol.chain.ids import submission_id
from protocol.chain.params import PPM, demo_task_params
from protocol.config import crucible_home, devnet_settings
from protocol.errors import ConfigError, CrucibleError
from protocol.ml.envs.spec import MAX_SAMPLES, default_spec
from protocol.ml.model import publish as publish_model
from protocol.ml.model import save_folder
from protocol.ml.training import initial_model
from protocol.values import format_tokens
from protocol.work.rollouts import parse_rollouts

if TYPE_CHECKING:
    from auditor.report import RoundAudit

CRUCIBLE = str(Path(sys.executable).parent / "crucible")
TOKEN = 10**18
LONG_S = 3600  # windows the demo ends by moving the devnet's clock, never by waiting
STEP_TIMEOUT_S = 600


@dataclass
class DemoOptions:
    """What `crucible demo` runs."""

    rounds: int = 5
    trainers: int = 3
    validators: int = 2
    adversaries: list[str] = field(default_factory=lambda: ["inflated-rewards"])
    env: str = "arithmetic"
    size: str = "tiny"
    warmup_steps: int = 600
    prompts: int = 256
    minibatch: int | None = None  # sequences per optimizer step; None: the spec's default
    keep: bool = False
    port: int = 8600
    unsafe_no_validation: bool = False  # validators attest without checking (`--adversary lazy`): a lesson

    def check(self) -> None:
        """Refuses options that cannot make a demo, naming the first problem."""

        if not 1 <= self.rounds <= 50:
            raise ConfigError(f"--rounds must be 1 to 50, got {self.rounds}")
        if not 1 <= self.trainers <= 20:
            raise ConfigError(f"--trainers must be 1 to 20, got {self.trainers}")
        if not 1 <= self.validators <= 16:
            raise ConfigError(f"--validators must be 1 to 16, got {self.validators}")
        if len(self.adversaries) >= self.trainers:
            raise ConfigError(
                f"{len(self.adversaries)} adversaries need at least one more trainer than that "
                "(--no-adversary: every trainer honest)"
            )
        for name in self.adversaries:
            if name not in ADVERSARIES:
                raise ConfigError(f"unknown adversary {name!r}: one of {', '.join(sorted(ADVERSARIES))}")
        if self.env not in ("arithmetic", "sorting"):
            raise ConfigError(f"unknown environment {self.env!r}: arithmetic or sorting")
        if self.size not in ("tiny", "small", "base"):
            raise ConfigError(f"unknown model size {self.size!r}: tiny, small or base")
        if not 1 <= self.prompts <= 512:
            raise ConfigError(f"--prompts must be 1 to 512, got {self.prompts}")
        if self.minibatch is not None and not 0 <= self.minibatch <= MAX_SAMPLES:
            raise ConfigError(f"--minibatch must be 0 (all in one step) to {MAX_SAMPLES}, got {self.minibatch}")


@dataclass
class Participant:
    """A demo account: its signer, key (handed to its process through the environment), role, adversary."""

    name: str
    role: str
    signer: Signer
    key: str
    adversary: str | None = None
    stake_before: int = 0


class Children:
    """Child processes, all stopped when the demo ends or is interrupted."""

    def __init__(self, home: Path, rpc_url: str, book: Path) -> None:
        self.home, self.rpc_url, self.book = home, rpc_url, book
        self.processes: list[tuple[str, subprocess.Popen[str]]] = []

    def start(self, label: str, args: list[str], key: str | None = None) -> subprocess.Popen[str]:
        env = {**os.environ, "CRUCIBLE_HOME": str(self.home)}
        if key is not None:
            env["CRUCIBLE_PRIVATE_KEY"] = key
        log = (self.home / "logs" / f"{label}.log").open("w")
        command = [CRUCIBLE, "--rpc", self.rpc_url, "--deployment", str(self.book), *args]
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True, env=env)
        self.processes.append((label, process))
        return process

    def failed(self) -> str | None:
        """A child that exited non-zero, with its log's last line."""
        for label, process in self.processes:
            code = process.poll()
            if code not in (None, 0):
                lines = (self.home / "logs" / f"{label}.log").read_text().strip().splitlines()
                return f"{label} exited {code}: {lines[-1] if lines else 'no output'}"
        return None

    def stop_all(self) -> None:
        for _, process in self.processes:
            if process.poll() is None:
                process.terminate()
        for _, process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class Demo:
    """One demo run."""

    def __init__(self, options: DemoOptions, say: Callable[[str], None], stage: Callable[[str, int, int], None]):
        self.options = options
        self.say = say
        self.stage = stage

    def __enter__(self) -> Demo:
        self.options.check()
        self.home = Path(tempfile.mkdtemp(prefix="crucible-demo-"))
        (self.home / "logs").mkdir()
        # The run's folder goes when it ends; its logs are kept here (said at the start).
        self.kept_logs = crucible_home() / "demo-logs" / self.home.name
        # A block every second, as on a real chain: the roles share blocks and race for the permissionless
        # steps; the demo still ends each window by moving the clock once its work is done.
        self.anvil = devnet.start_private_anvil(
            self.home / "logs" / "anvil.log", block_time_s=devnet_settings().block_time_s
        )
        self.children = Children(self.home, self.anvil.rpc_url, self.home / "deployment.json")
        # Ctrl-C and SIGTERM both end in __exit__, even where a shell started us with SIGINT ignored.
        self._previous = [signal.signal(number, _interrupt) for number in (signal.SIGINT, signal.SIGTERM)]
        return self

    def __exit__(self, *exc: object) -> None:
        for number, handler in zip((signal.SIGINT, signal.SIGTERM), self._previous, strict=True):
            signal.signal(number, handler)
        self.children.stop_all()
        self.anvil.stop()
        with contextlib.suppress(OSError):
            shutil.copytree(self.home / "logs", self.kept_logs, dirs_exist_ok=True)
        shutil.rmtree(self.home, ignore_errors=True)

    def run(self) -> dict[str, Any]:
        """Walks the task to its end; returns the summary."""
        chain = Chain(self.anvil.rpc_url)
        creator = load_signer("dev0")
        crucible = Crucible(chain, deploy(chain, creator, token_holders=(creator.address,),
                                          unbonding_period_s=DEVNET_UNBONDING_S))  # fmt: skip
        crucible.deployment.save(self.children.book)
        self.say(f"private Anvil at {self.anvil.rpc_url}, contracts deployed; logs kept in {self.kept_logs}")
        return self._walk(crucible, creator, self.home, self.children)

    def keep(self) -> str:
        """Starts the explorer over the finished task; returns its URL (stop with Ctrl-C)."""
        self.children.start("explorer", ["explorer", "serve", "--port", str(self.options.port), "--no-evaluate",
                                         "--store", str(self.home / "store"), "--index",
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
        store = LocalStore(home / "store")
        spec = default_spec(options.env)
        steps = options.warmup_steps
        self.stage("making the initial model: warm-up", 0, steps)
        model, _, _ = initial_model(
            spec.env(), options.size, steps, seed=0,
            on_step=lambda step, loss: self.stage("making the initial model: warm-up", step + 1, steps),
        )  # fmt: skip
        save_folder(model, home / "model")
        model_cid = publish_model(home / "model", store)
        spec.training.prompts_per_round = options.prompts
        if options.minibatch is not None:
            spec.training.minibatch_size = options.minibatch
        env_cid = store.put(spec.canonical_bytes())
        self.stage("making the initial model: published", 1, 1)
        per_check = min(2, options.validators)
        params = demo_task_params(
            rounds=options.rounds,
            sample_rate_ppm=PPM,
            validators_per_check=per_check,
            submit_window_s=LONG_S,
            validate_window_s=LONG_S,
            challenge_window_s=LONG_S,
        )
        task_id = crucible.create_task(creator, params, model_cid, env_cid)
        self.say(f"task {task_id}: bounty {format_tokens(params.bounty_wei, 18, 'CRU')} over {options.rounds} rounds, "
                 f"model {model_cid}")  # fmt: skip

        people = self._participants(crucible, creator)
        for person in people:
            # A cheat is slashed every round: it stakes enough to keep submitting to the end.
            stake = params.min_trainer_stake_wei + params.slash_wei * (options.rounds if person.adversary else 1)
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
            str(options.rounds),
            "--json",
            "--poll",
            "0.5",
        ]
        for person in people:
            role_args = ["node" if person.role == "trainer" else "validator", "run", *common]
            if person.adversary:
                role_args += ["--adversary", person.adversary]
            children.start(person.name, role_args, key=person.key)
        trainers = [p for p in people if p.role == "trainer"]
        for round_index in range(options.rounds):
            self._round(crucible, task_id, round_index, trainers, per_check, children)
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
        lazy = "lazy" if options.unsafe_no_validation else None
        for i in range(options.validators):
            people.append(self._fund(crucible, creator, f"validator-{i + 1}", "validator", lazy))
        return people

    @staticmethod
    def _fund(crucible: Crucible, creator: Signer, name: str, role: str, adversary: str | None) -> Participant:
        signer, key = devnet.funded_account(crucible, creator, f"crucible-demo-{name}", 5000 * TOKEN, name=name)
        label = f"{name} ({adversary})" if adversary else name
        return Participant(label, role, signer, key, adversary)

    def _round(
        self,
        crucible: Crucible,
        task_id: int,
        round_index: int,
        trainers: list[Participant],
        per_check: int,
        children: Children,
    ) -> None:
        total = 4
        label = f"round {round_index} of 0-{self.options.rounds - 1}"
        self.stage(f"{label}: trainers working", 0, total)
        ids = [submission_id(task_id, round_index, p.signer.address) for p in trainers]
        self._wait(f"{len(trainers)} submissions in round {round_index}",
                   lambda: len(crucible.submissions(task_id, round_index)) == len(trainers), children)  # fmt: skip
        deadlines = crucible.deadlines(task_id, round_index)
        devnet.warp_to(crucible.chain, deadlines.submit)
        self.stage(f"{label}: validators checking", 1, total)
        checks = len(ids) * per_check

        def attested() -> int:
            # Positions voted: a validator holding several of a check's positions votes them at once.
            return sum(crucible.submission(s).voted_mask.bit_count() for s in ids)

        self._wait(f"{checks} checks in round {round_index}", lambda: attested() >= checks, children)
        devnet.warp_to(crucible.chain, deadlines.validate)
        self.stage(f"{label}: agreeing the next checkpoint", 2, total)

        def agreed() -> bool:
            state = crucible.round(task_id, round_index)
            return state.open_disputes == 0 and state.agreed_next != bytes(32)

        self._wait(f"an agreed checkpoint for round {round_index}", agreed, children, tick=crucible)
        devnet.warp_to(crucible.chain, max(deadlines.challenge, crucible.chain.now()))
        self.stage(f"{label}: finalising", 3, total)
        self._wait(f"round {round_index} final", lambda: crucible.round(task_id, round_index).finalised, children,
                   tick=crucible)  # fmt: skip
        self.stage(f"{label}: done", 4, total)

    def _wait(self, what: str, condition: Callable[[], bool], children: Children, tick: Crucible | None = None) -> None:
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while time.monotonic() < deadline:
            if condition():
                return
            failure = children.failed()
            if failure:
                raise CrucibleError(f"waiting for {what}: {failure}")
            if tick is not None:  # a dispute's committee needs the next block: one now, not in a second
                tick.chain.w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]
            time.sleep(0.5)
        raise CrucibleError(f"timed out after {STEP_TIMEOUT_S} s waiting for {what}")

    # ------------------------------------------------------------ the summary

    @staticmethod
    def _rollout_reward(audit: RoundAudit, store: LocalStore) -> float | None:
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
        self, crucible: Crucible, home: Path, store: LocalStore, task_id: int, people: list[Participant], refund: int
    ) -> dict[str, Any]:

        index = EventIndex(crucible, home / "index.sqlite")
        try:
            index.sync()
            auditor = Auditor(crucible, index, store, rerun=False)
            env_cid = str(auditor.created(task_id).args["envCid"])
            audits = [auditor.round(task_id, r, rerun=False) for r in range(self.options.rounds)]
            checkpoints = [audit.checkpoint_cid for audit in audits]
            last = audits[-1].agreed_cid or crucible.checkpoint_cid(task_id, self.options.rounds - 1)
            rewards = [self._rollout_reward(audit, store) for audit in audits]
            rounds = []
            for number, cid in enumerate([*checkpoints, last]):
                self.stage("evaluating checkpoints", number, len(checkpoints) + 1)
                greedy, sampled = auditor.accuracy(cid, env_cid)
                rounds.append({
                    "round": number, "checkpoint_cid": cid, "accuracy": greedy, "sampled_accuracy": sampled,
                    "rollout_reward": rewards[number] if number < len(rewards) else None,
                })  # fmt: skip
            books = money_check(crucible, index, task_id)
            market = market_balance_check(crucible, index)
            accounts = []
            for person in people:
                credited = sum(int(e.args["amount"]) for e in index.events("Credited", task=task_id,
                                                                            account=person.signer.address))  # fmt: skip
                after = crucible.stake_account(person.signer.address).staked
                accounts.append({
                    "name": person.name, "role": person.role, "address": person.signer.address,
                    "adversary": person.adversary, "stake_before_wei": str(person.stake_before),
                    "stake_after_wei": str(after), "rewards_wei": str(credited),
                })  # fmt: skip
        finally:
            index.close()
        return {
            "task_id": task_id,
            "rounds": rounds,
            "accounts": accounts,
            "refunded_wei": str(refund),
            "money_check": books.as_json() | {"market": market, "balanced": books.balanced and market["balanced"]},
        }


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
