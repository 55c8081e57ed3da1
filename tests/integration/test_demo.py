"""`crucible demo`: a whole task with every role a separate process, its JSON summary, its clean-up."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.amounts import assert_amounts_in_wei
from helpers.demo import demo_env, demo_processes

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CRUCIBLE = str(Path(sys.executable).parent / "crucible")


def test_the_demo_pays_the_honest_slashes_the_cheat_and_balances(tmp_path: Path) -> None:
    env = demo_env(tmp_path)
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
    assert demo_processes(tmp_path) == []  # nothing left running
    # Off a terminal, one line per phase on stderr with the time since the start (stdout stays JSON), and
    # the logs kept where the demo said.
    phases = [line for line in done.stderr.splitlines() if line.startswith("[")]
    assert phases[0].endswith("making the initial model: smollm2") and any(
        "round 0 of 0-0" in line for line in phases
    ), phases
    kept = list((tmp_path / "home" / "demo-logs").glob("*/*.log"))
    assert kept, "the demo's logs were not kept"


def test_ctrl_c_stops_every_process_the_demo_started(tmp_path: Path) -> None:
    env = demo_env(tmp_path)
    demo = subprocess.Popen([CRUCIBLE, "demo", "--model", "tiny", "--rounds", "3", "--warmup-steps", "20", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    deadline = time.monotonic() + 300
    # Wait until the trainers and validators run (the node processes exist), then interrupt.
    while (
        time.monotonic() < deadline
        and sum(" node run " in c or " validator run " in c for c in demo_processes(tmp_path)) < 5
    ):
        assert demo.poll() is None, demo.communicate()[1][-2000:]
        time.sleep(0.5)
    assert demo.poll() is None
    demo.send_signal(signal.SIGINT)
    _, stderr = demo.communicate(timeout=60)
    assert demo.returncode == 130 and "interrupted" in stderr, stderr[-2000:]
    assert demo_processes(tmp_path) == []


def test_demo_options_are_checked_before_anything_starts(tmp_path: Path) -> None:
    env = demo_env(tmp_path)
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
        (["--validator-adversary", "sneaky"], "unknown validator adversary 'sneaky'"),
        (["--validator-adversary", "lazy", "--validators", "1", "--validator-adversary", "liar"], "2 validator"),
        (["--canary-rate", "0.6"], "--canary-rate must be in [0, 0.5]"),
        (["--canary-rate", "0.2"], "reveals no canary beside 3 trainers"),
        (["--store", "ipfs"], "--store must be one of local, kubo"),
        (["--client", "geth"], "--client must be one of anvil, hardhat"),
    ]
    for args, fragment in cases:
        done = subprocess.run([CRUCIBLE, "demo", *args], capture_output=True, text=True, env=env, timeout=60)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and done.stdout == "", (args, done.stderr)
        assert len(lines) == 1 and fragment in lines[0], (args, done.stderr)
    assert demo_processes(tmp_path) == []
