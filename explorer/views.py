"""What each explorer page shows, as JSON-ready dictionaries: the HTML pages render these and the
`/api/...` endpoints return them unchanged, so the two never disagree.

Every function raises `NotFound` for an id the index does not know and `BadInput` for a malformed one.
"""

from __future__ import annotations

import math
from typing import Any

from auditor.audit import Auditor
from auditor.index import ACCOUNT_FIELDS
from auditor.money import CREDIT_KINDS, MoneyCheck, money_check
from protocol.accounts import list_accounts
from protocol.chain.client import Role
from protocol.chain.ids import decode_submission_id, parse_submission_id, submission_text
from protocol.chain.params import TaskParams
from protocol.errors import ConfigError, CrucibleError
from protocol.values import checked_address, checked_cid, format_tokens
from protocol.work.evidence import parse_evidence

PAGE_SIZE = 50
MAX_PAGE = 1_000_000


class NotFound(Exception):
    """An id the index does not know (HTTP 404)."""


class BadInput(Exception):
    """A malformed id, address, CID or page (HTTP 400)."""


def parse_submission(text: str) -> int:
    try:
        return parse_submission_id(text)
    except ConfigError as error:
        raise BadInput(str(error)) from None


def parse_address(text: str) -> str:
    try:
        return checked_address(text)
    except ConfigError as error:
        raise BadInput(str(error)) from None


def parse_cid(text: str) -> str:
    try:
        return checked_cid(text)
    except ConfigError as error:
        raise BadInput(str(error)) from None


def paginate(items: list[Any], page: int) -> dict[str, Any]:
    """One page of `items` (numbered from 1); NotFound past the last page."""
    if not 1 <= page <= MAX_PAGE:
        raise BadInput(f"page {page} is out of range: pages are numbered 1 to {MAX_PAGE}")
    pages = max(1, math.ceil(len(items) / PAGE_SIZE))
    if page > pages:
        raise NotFound(f"page {page} does not exist: there are {pages}")
    return {"page": page, "pages": pages, "items": items[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]}


# Event arguments in base units of the token (TaskCreated's params included), shown in tokens.
AMOUNT_ARGS = frozenset({
    "amount", "bond", "reward", "slashed", "staked", "stake", "from", "trainerBudget", "feeBudget",
    "bounty", "slashAmount", "validatorSlash", "minTrainerStake", "minValidatorStake", "disputeBond",
})  # fmt: skip
# Shares in the contract's units, shown as percentages.
SHARE_ARGS = {"sampleRatePpm": 1_000_000, "colludingSharePpm": 1_000_000, "canaryRatePpm": 1_000_000,
              "validatorFeeBps": 10_000, "finderShareBps": 10_000}  # fmt: skip
ADDRESS_ARGS = frozenset(ACCOUNT_FIELDS)


class Views:
    """The explorer's pages over an auditor that does not re-run checks (pages must be fast)."""

    def __init__(self, auditor: Auditor, relay_url: str | None) -> None:
        self.auditor = auditor
        self.index = auditor.index
        self.crucible = auditor.crucible
        self.relay_url = (relay_url or "").rstrip("/")
        # The account names this machine knows (devN, keystores): shown beside addresses, searchable.
        self.names = {account.address: account.name for account in list_accounts()}

    def shown(self, event: dict[str, Any]) -> dict[str, Any]:
        """An event as JSON (`args` exact) with `shown`: each argument as people read it — amounts in tokens,
        enums by name, submission ids in hex, addresses by name — and the page it links to, if any."""
        fields = []
        for key, value in event["args"].items():
            if isinstance(value, dict):  # a struct: TaskCreated's params
                text = ", ".join(self._arg_text(name, item)[0] for name, item in value.items())
                fields.append({"name": key, "text": text, "href": None})
                continue
            text, href = self._arg_text(key, value, event["event"])
            fields.append({"name": key, "text": text, "href": href})
        return event | {"shown": fields}

    def _arg_text(self, key: str, value: Any, event: str = "") -> tuple[str, str | None]:
        """(text, link) of one event argument."""
        if isinstance(value, bool):
            return f"{key} {'yes' if value else 'no'}", None
        if key in AMOUNT_ARGS:
            return f"{key} {self.tokens(int(value))}", None
        if key in SHARE_ARGS:
            return f"{key.removesuffix('Ppm').removesuffix('Bps')} {100 * int(value) / SHARE_ARGS[key]:g} %", None
        if key == "role":
            return f"role {Role(int(value)).name.lower()}", None
        if key == "kind" and event == "Credited":
            return f"kind {CREDIT_KINDS[int(value)].replace('_', ' ')}", None
        if key in ("submissionId", "submission"):
            text = submission_text(int(value))
            return f"submission {text}", f"/submissions/{text}"
        if key == "taskId":
            return f"task {value}", f"/tasks/{value}"
        if key in ADDRESS_ARGS and isinstance(value, str):
            return f"{key} {self.names.get(value, value)}", f"/accounts/{value}"
        if key == "evidenceCid":
            return f"evidence {value}", f"/evidence/{value}"
        if key.endswith("Cid") and value:
            return f"{key.removesuffix('Cid')} {value}", f"/search?q={value}"
        return f"{key} {value}", None

    def tokens(self, wei: int) -> str:
        return format_tokens(wei, self.crucible.decimals, self.crucible.symbol)

    def amount(self, name: str, wei: int) -> dict[str, str]:
        """An amount as the JSON carries it: exact in `<name>_wei`, for people in `<name>_shown`."""
        return {f"{name}_wei": str(wei), f"{name}_shown": self.tokens(wei)}

    def artifact_url(self, cid: str) -> str:
        return f"{self.relay_url}/ipfs/{cid}"

    # ------------------------------------------------------------ pages

    def home(self) -> dict[str, Any]:
        tasks = []
        for task_id in self.index.task_ids():
            created = self.auditor.created(task_id)
            state = self.crucible.task(task_id)
            tasks.append(
                {
                    "task_id": task_id,
                    "creator": created.args["creator"],
                    **self.amount("bounty", int(created.args["params"]["bounty"])),
                    "rounds": int(created.args["params"]["rounds"]),
                    "current_round": state.current_round,
                    "open_round": state.open_round,
                    "ended": state.ended,
                    "submissions": len(self.index.events("WorkSubmitted", task=task_id)),
                }
            )
        return {"tasks": tasks, "indexed_block": self.index.last_block}

    def task(self, task_id: int) -> dict[str, Any]:
        if task_id not in self.index.task_ids():
            raise NotFound(f"unknown task {task_id}")
        created = self.auditor.created(task_id)
        state = self.crucible.task(task_id)
        rounds = []
        for opened in self.index.events("RoundOpened", task=task_id):
            round_index = int(opened.round or 0)
            audit = self.auditor.round(task_id, round_index, rerun=False)
            accuracy = self.index.evaluation(audit.checkpoint_cid)
            rewards = sum(s.reward_wei for s in audit.submissions)
            rounds.append(
                {
                    "round": round_index,
                    "checkpoint_cid": audit.checkpoint_cid,
                    "submissions": len(audit.submissions),
                    "rejected": sum(s.rejected for s in audit.submissions),
                    "agreed_cid": audit.agreed_cid,
                    "finalised": audit.finalised,
                    "accuracy": None if accuracy is None else accuracy[0],
                    "sampled_accuracy": None if accuracy is None else accuracy[1],
                    **self.amount("rewards", rewards),
                }
            )
        final = str(rounds[-1]["agreed_cid"] or "") if rounds and state.ended else ""
        final_accuracy = self.index.evaluation(final) if final else None
        money = money_check(self.crucible, self.index, task_id)
        params = TaskParams.from_contract(created.args["params"])
        return {
            "task_id": task_id,
            "creator": created.args["creator"],
            "model_cid": created.args["modelCid"],
            "env_cid": created.args["envCid"],
            "params": params.as_json(),
            "ended": state.ended,
            "current_round": state.current_round,
            "open_round": state.open_round,
            "validators": self.auditor.validators(task_id),
            "rounds": rounds,
            "final_checkpoint": final or None,
            "final_accuracy": None if final_accuracy is None else final_accuracy[0],
            "final_sampled_accuracy": None if final_accuracy is None else final_accuracy[1],
            "money_check": money.as_json(),
            "money_shown": self._money_for_people(money),
            "params_shown": self._params_for_people(params),
            "decimals": self.crucible.decimals,
            "symbol": self.crucible.symbol,
        }

    def _money_for_people(self, money: MoneyCheck) -> dict[str, Any]:
        """The money check in tokens, as rows of (label, amount) (the JSON's `money_check` keeps exact wei)."""
        return {
            "in": [(label, self.tokens(wei)) for label, wei in
                   (("Bounty", money.bounty), ("Slashed", money.slashed), ("Dispute bonds", money.bonds))],
            "out": [(label, self.tokens(wei)) for label, wei in
                    (("Refunded", money.refunded), ("Held by the market", money.held),
                     *((f"Credited: {kind.replace('_', ' ')}", amount) for kind, amount in money.credited.items()))],
            "total_in": self.tokens(money.total_in),
            "total_out": self.tokens(money.total_out),
        }  # fmt: skip

    def _params_for_people(self, params: TaskParams) -> list[tuple[str, str]]:
        """A task's parameters named and unit-ed for people: tokens, percentages, seconds."""
        amount = self.tokens
        return [
            ("Bounty", amount(params.bounty_wei)),
            ("Rounds", str(params.rounds)),
            ("Share of submissions checked", f"{params.sample_rate_ppm / 10_000:g} %"),
            ("Validators per check", str(params.validators_per_check)),
            ("Validators' fee", f"{params.validator_fee_bps / 100:g} % of each round's budget"),
            ("Finders' share of a slash", f"{params.finder_share_bps / 100:g} %"),
            ("Trainer slash", amount(params.slash_wei)),
            ("Validator slash", amount(params.validator_slash_wei)),
            ("Stake a submission locks", amount(params.min_trainer_stake_wei)),
            ("Stake a validator locks", amount(params.min_validator_stake_wei)),
            ("Dispute bond", amount(params.dispute_bond_wei)),
            ("Most work units a submission", f"{params.max_work_units:,}"),
            (
                "Windows",
                f"submit {params.submit_window_s} s, validate {params.validate_window_s} s, "
                f"challenge {params.challenge_window_s} s",
            ),
        ]

    def round(self, task_id: int, round_index: int) -> dict[str, Any]:
        if task_id not in self.index.task_ids():
            raise NotFound(f"unknown task {task_id}")
        try:
            audit = self.auditor.round(task_id, round_index, rerun=False)
        except ConfigError as error:
            raise NotFound(str(error)) from None
        document = audit.as_json()
        document["submissions"] = [self._submission_row(s.as_json()) for s in audit.submissions]
        return document

    def _submission_row(self, row: dict[str, Any]) -> dict[str, Any]:
        row["reward_shown"] = self.tokens(int(row["reward_wei"]))
        row["slashed_shown"] = self.tokens(int(row["slashed_wei"]))
        return row

    def submission(self, submission: int) -> dict[str, Any]:
        if not self.index.events("WorkSubmitted", submission=submission):
            raise NotFound(f"unknown submission {submission_text(submission)}")
        document = self._submission_row(self.auditor.submission(submission, rerun=False).as_json())
        document["links"] = {
            "rollouts": self.artifact_url(document["rollout_cid"]),
            "update": self.artifact_url(document["update_cid"]),
        }
        document["history"] = [self.shown(e.as_json()) for e in self.index.events(submission=submission)]
        return document

    def evidence(self, cid: str) -> dict[str, Any]:
        try:
            data = self.auditor.store.get(cid)
        except CrucibleError as error:
            raise NotFound(f"evidence {cid} is not available: {error}") from None
        try:
            document = parse_evidence(data, cid)
        except CrucibleError as error:
            raise BadInput(str(error)) from None
        return {"cid": cid, "evidence": document, "raw_url": self.artifact_url(cid)}

    def account(self, address: str, page: int) -> dict[str, Any]:
        events = self.index.events(account=address)
        credits = dict.fromkeys(CREDIT_KINDS, 0)
        slashed = 0
        for event in events:
            if event.name == "Credited":
                credits[CREDIT_KINDS[int(event.args["kind"])]] += int(event.args["amount"])
            if event.name == "Slashed":
                slashed += int(event.args["amount"])
        submissions = [int(e.submission or 0) for e in events if e.name == "WorkSubmitted"]
        stake = self.crucible.stake_account(address)
        return {
            "address": address,
            "stake": {
                **self.amount("staked", stake.staked),
                **self.amount("locked", stake.locked),
                "role": stake.role.name.lower(),
            },
            "credited_wei": {kind: str(amount) for kind, amount in credits.items()},
            "credited_shown": {kind: self.tokens(amount) for kind, amount in credits.items()},
            **self.amount("slashed", slashed),
            "submissions": [submission_text(s) for s in submissions],
            "name": self.names.get(address),
            "history": paginate([self.shown(e.as_json()) for e in events], page),
        }

    def validators(self) -> dict[str, Any]:
        """Per validator: votes, how many agree with the final outcome, slashes."""
        stats: dict[str, dict[str, int]] = {}

        def entry(address: str | None) -> dict[str, int]:
            return stats.setdefault(str(address), {"votes": 0, "agreed": 0, "penalised": 0})

        for event in self.index.events("Attested") + self.index.events("DisputeVoted"):
            counts = entry(event.account)
            state = self.crucible.submission(int(event.submission or 0))
            if state.settled:
                counts["votes"] += 1
                counts["agreed"] += int(bool(event.args["valid"]) != state.rejected)
        for event in self.index.events("ValidatorPenalised"):
            entry(event.account)["penalised"] += 1
        rows = [
            {
                "validator": address,
                "votes": counts["votes"],
                "agreed": counts["agreed"],
                "agreement": None if counts["votes"] == 0 else counts["agreed"] / counts["votes"],
                "penalised": counts["penalised"],
            }
            for address, counts in sorted(stats.items())
        ]
        return {"validators": rows}

    def events(self, page: int) -> dict[str, Any]:
        events = [self.shown(e.as_json()) for e in reversed(self.index.events())]
        return {"events": paginate(events, page), "indexed_block": self.index.last_block}

    def search(self, query: str) -> str:
        """The page a search box query names: a task id, an address, a submission id or a CID."""
        text = query.strip()
        if text.isdigit() and int(text) in self.index.task_ids():
            return f"/tasks/{int(text)}"
        if text.startswith("0x") and len(text) == 42:
            return f"/accounts/{parse_address(text)}"
        named = next((address for address, name in self.names.items() if name == text), None)
        if named is not None:
            return f"/accounts/{named}"
        if text.isdigit() or text.startswith("0x"):
            submission = parse_submission(text)
            decode_submission_id(submission)
            return f"/submissions/{submission_text(submission)}"
        return self._page_of_cid(parse_cid(text))

    def _page_of_cid(self, cid: str) -> str:
        """The page of whatever a CID names: a task (its model, its environment, an agreed checkpoint),
        a submission (its rollouts or its update), or a verdict's evidence."""
        for event in self.index.events("TaskCreated"):
            if cid in (str(event.args["modelCid"]), str(event.args["envCid"])):
                return f"/tasks/{event.task}"
        for event in self.index.events("CheckpointAgreed"):
            if str(event.args["checkpointCid"]) == cid:
                return f"/tasks/{event.task}/rounds/{event.round}"
        for event in self.index.events("WorkSubmitted"):
            if cid in (str(event.args["rolloutCid"]), str(event.args["updateCid"])):
                return f"/submissions/{event.submission}"
        for name in ("Attested", "DisputeVoted"):
            if any(str(event.args["evidenceCid"]) == cid for event in self.index.events(name)):
                return f"/evidence/{cid}"
        raise NotFound(f"no task, round, submission or evidence of this deployment names {cid}")
