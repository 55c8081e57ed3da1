"""`crucible demo`: a whole task with every role a separate process, its JSON summary, its clean-up."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.amounts import assert_amounts_in_wei

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CRUCIBLE = str(Path(sys.executable).parent / "crucible")


def demo_processes() -> list[str]:
    """Command lines of processes a demo started (their state folder is a crucible-demo-* temp dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "crucible-demo-" in command:
            found.append(command)
    return found


def test_the_demo_pays_the_honest_slashes_the_cheat_and_balances(tmp_path: Path) -> None:
    env = {**os.environ, "CRUCIBLE_HOME": str(tmp_path / "home")}
    # The real model (SmolLM2 with LoRA on reasoning-gym chain_sum), small: 2 prompts x 8 completions of
    # at most 8 tokens a trainer, one round, 40 held-out problems.
    done = subprocess.run([CRUCIBLE, "demo", "--rounds", "1", "--prompts", "2", "--eval-problems", "40",
                           "--set", "sampling.max_new_tokens=8", "--json"], capture_output=True, text=True, env=env,
                          timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    # The initial checkpoint first, then the one each round agreed.
    assert [r["round"] for r in summary["rounds"]] == [0, 1]
    assert all(0.0 <= r["accuracy"] <= 1.0 and r["sampled_accuracy"] is None for r in summary["rounds"])
    # The gain: the same held-out problems before and after, paired, with a 95 % interval around the mean.
    gain = summary["gain"]
    assert gain["problems"] == 40 and gain["sampled"] is None  # greedy only unless --eval-sampled
    figures = gain["greedy"]
    assert figures["low"] <= figures["mean"] <= figures["high"] and figures["real"] == (figures["low"] > 0)
    assert summary["rounds"][0]["checkpoint_cid"] != summary["rounds"][1]["checkpoint_cid"]
    # Round 0's accepted rollouts were sampled from the initial checkpoint; the last checkpoint has none.
    assert 0.0 <= summary["rounds"][0]["rollout_reward"] <= 1.0 and summary["rounds"][1]["rollout_reward"] is None
    accounts = {a["name"]: a for a in summary["accounts"]}
    assert {a["role"] for a in accounts.values()} == {"trainer", "validator"} and len(accounts) == 5
    # Amounts in JSON are exact wei, as decimal strings, in fields named *_wei.
    wei = {name: {k: int(v) for k, v in a.items() if k.endswith("_wei")} for name, a in accounts.items()}
    assert assert_amounts_in_wei(summary) > 20
    cheat = wei["trainer-3 (inflated-rewards)"]
    assert accounts["trainer-3 (inflated-rewards)"]["adversary"] == "inflated-rewards" and cheat["rewards_wei"] == 0
    assert cheat["stake_after_wei"] == cheat["stake_before_wei"] - 500 * 10**18
    for name in ("trainer-1", "trainer-2"):
        assert wei[name]["rewards_wei"] > 0 and wei[name]["stake_after_wei"] == wei[name]["stake_before_wei"]
    # The validators earned, between them, at least the round's check fees (10 % of 1,000) and the finders'
    # half of the slash (250). (Positions are drawn by stake, so one of the two may hold none of the round's
    # three check positions, one a submission with the real model.)
    assert sum(wei[f"validator-{i}"]["rewards_wei"] for i in (1, 2)) >= (100 + 250) * 10**18
    assert summary["money_check"]["balanced"] is True and summary["money_check"]["difference_wei"] == "0"
    assert summary["money_check"]["market"]["balanced"] is True
    assert demo_processes() == []  # nothing left running
    # Off a terminal, one line per phase on stderr with the time since the start (stdout stays JSON), and
    # the logs kept where the demo said.
    phases = [line for line in done.stderr.splitlines() if line.startswith("[")]
    assert phases[0].endswith("making the initial model: smollm2") and any(
        "round 0 of 0-0" in line for line in phases
    ), phases
    kept = list((tmp_path / "home" / "demo-logs").glob("*/*.log"))
    assert kept, "the demo's logs were not kept"


def test_ctrl_c_stops_every_process_the_demo_started(tmp_path: Path) -> None:
    env = {**os.environ, "CRUCIBLE_HOME": str(tmp_path / "home")}
    demo = subprocess.Popen([CRUCIBLE, "demo", "--model", "tiny", "--rounds", "3", "--warmup-steps", "20", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    deadline = time.monotonic() + 300
    # Wait until the trainers and validators run (the node processes exist), then interrupt.
    while (
        time.monotonic() < deadline and sum(" node run " in c or " validator run " in c for c in demo_processes()) < 5
    ):
        assert demo.poll() is None, demo.communicate()[1][-2000:]
        time.sleep(0.5)
    assert demo.poll() is None
    demo.send_signal(signal.SIGINT)
    _, stderr = demo.communicate(timeout=60)
    assert demo.returncode == 130 and "interrupted" in stderr, stderr[-2000:]
    assert demo_processes() == []


def test_demo_options_are_checked_before_anything_starts(tmp_path: Path) -> None:
    env = {**os.environ, "CRUCIBLE_HOME": str(tmp_path / "home")}
    cases = [
        (["--rounds", "0"], "--rounds"),
        (["--trainers", "1"], "adversaries need"),
        # --no-adversary lifts that: the next check (the environment) is the one that speaks.
        (["--trainers", "1", "--no-adversary", "--env", "chess"], "unknown environment"),
        (["--rounds", "51"], "--rounds must be 1 to 50"),
        (["--adversary", "sneaky"], "unknown adversary"),
        (["--env", "chess"], "unknown environment"),
        (["--size", "huge"], "unknown model 'huge'"),
        (["--model", "gpt-17"], "unknown model 'gpt-17'"),
        (["--set", "training.group_size=1"], "training.group_size"),
        (["--env", "reasoning-gym/chain_sum", "--set", "bogus=1"], "unknown configuration key 'bogus'"),
        (["--eval-problems", "1"], "--eval-problems must be 2"),
        (["--prompts", "513"], "--prompts must be 1 to 512"),
        (["--minibatch", "-1"], "--minibatch must be 0"),
    ]
    for args, fragment in cases:
        done = subprocess.run([CRUCIBLE, "demo", *args], capture_output=True, text=True, env=env, timeout=60)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and done.stdout == "", (args, done.stderr)
        assert len(lines) == 1 and fragment in lines[0], (args, done.stderr)
    assert demo_processes() == []


def test_an_unchecked_poisoner_is_clipped_by_the_outer_step(tmp_path: Path) -> None:
    """Validation off (validators attest without looking): a `scaled-update` trainer's x100 update is included,
    and the default outer step (`clipped_mean`) scales it down to twice the round's median norm and records
    that; the honest updates pass untouched. Broken version: `--set training.aggregation.rule=mean` (the
    plain mean) — no record, and the poison moves the checkpoint 100-fold."""
    env = {**os.environ, "CRUCIBLE_HOME": str(tmp_path / "home")}
    done = subprocess.run([CRUCIBLE, "demo", "--model", "tiny", "--rounds", "1", "--prompts", "16", "--eval-problems",
                           "20", "--adversary", "scaled-update", "--unsafe-no-validation", "--json"],
                          capture_output=True, text=True, env=env, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    poisoner = next(a for a in summary["accounts"] if a["adversary"] == "scaled-update")
    notes = summary["rounds"][0]["outer_step"]
    assert len(notes) == 1, notes  # only the poison: the honest updates are within the clip
    found = re.fullmatch(
        r"outer step: submission (0x[0-9a-f]+)'s update clipped to ([0-9.e-]+) of its norm .*", notes[0]
    )
    assert found is not None, notes[0]
    assert int(found[1], 16) & (2**160 - 1) == int(poisoner["address"], 16)
    # x100 of an honest-sized update, brought to at most 2 x the median: a factor of about 1/50.
    assert 0 < float(found[2]) < 0.05
    assert all(update["included"] for update in summary["rounds"][0]["updates"]), "nothing was checked"


def test_a_lazy_validator_pays_for_the_canaries_it_waved_through(tmp_path: Path) -> None:
    """`--validator-adversary lazy --canary-rate 0.2`: a canary node plants one canary a round and reveals it; the
    summary names them. Every validator that voted a canary valid is slashed for it (the lazy one, whenever the
    draw gave it the canary's check: three chances in four a round), every one that voted it invalid shares its
    prize, the canary's owner keeps its stake and is paid nothing, the canaries never reach the aggregate, and the
    books balance. Broken version: settle a revealed canary as work (the `_settleTrainer` canary branch removed) —
    the owner is paid and its catchers get nothing."""
    env = {**os.environ, "CRUCIBLE_HOME": str(tmp_path / "home")}
    done = subprocess.run([CRUCIBLE, "demo", "--model", "tiny", "--rounds", "2", "--prompts", "16", "--eval-problems",
                           "20", "--no-adversary", "--validator-adversary", "lazy", "--canary-rate", "0.2", "--json"],
                          capture_output=True, text=True, env=env, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    accounts = {a["name"]: a for a in summary["accounts"]}
    lazy, honest, owner = accounts["validator-1 (lazy)"], accounts["validator-2"], accounts["canary-1"]
    canaries = summary["canaries"]
    assert [c["round"] for c in canaries] == [0, 1] and {c["trainer"] for c in canaries} == {"canary-1"}
    slashes = 0
    for canary in canaries:
        # The honest validator runs the checks: it never votes a canary valid.
        assert set(canary["voted_valid"]) <= {lazy["name"]} and set(canary["voted_invalid"]) <= {honest["name"]}
        assert canary["voted_valid"] or canary["voted_invalid"], "every canary is checked (sample rate 1)"
        # One slash per position voted (a validator may hold both of a check's positions), one vote per validator.
        assert set(canary["slashed"]) == set(canary["voted_valid"])
        assert set(canary["prize_wei"]) == set(canary["voted_invalid"])
        assert all(int(amount) > 0 for amount in canary["prize_wei"].values())
        slashes += len(canary["slashed"])
    validator_slash = 10 * 10**18
    assert int(lazy["stake_after_wei"]) == int(lazy["stake_before_wei"]) - slashes * validator_slash
    assert int(honest["stake_after_wei"]) == int(honest["stake_before_wei"])
    assert owner["stake_after_wei"] == owner["stake_before_wei"] and owner["rewards_wei"] == "0"
    for row in summary["rounds"][:2]:
        assert [u["included"] for u in row["updates"] if u["trainer"] == "canary-1"] == [False]
    assert summary["money_check"]["balanced"]
