"""`crucible demo` under attack, on a made-up model: a poisoner nobody checks, clipped by the outer step; a lazy
validator, slashed by the creator's canaries. (Apart from test_demo.py so that the two run on other workers.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.demo import demo_env, demo_processes

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CRUCIBLE = str(Path(sys.executable).parent / "crucible")


def test_an_unchecked_poisoner_is_clipped_by_the_outer_step(tmp_path: Path) -> None:
    """Validation off (validators attest without looking): a `scaled-update` trainer's x100 update is included,
    and the default outer step (`trimmed_mean`, which clips first) scales it down to its bound (a multiple of the
    round's median norm) and records that; the honest updates pass unclipped. Broken version: `--set
    training.aggregation.rule=mean` (the plain mean) — no record, and the poison moves the checkpoint 100-fold."""
    env = demo_env(tmp_path)
    done = subprocess.run([CRUCIBLE, "demo", "--model", "tiny", "--rounds", "1", "--prompts", "16", "--eval-problems",
                           "20", "--adversary", "scaled-update", "--unsafe-no-validation", "--json"],
                          capture_output=True, text=True, env=env, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    poisoner = next(a for a in summary["accounts"] if a["adversary"] == "scaled-update")
    # Only the poison is clipped: the honest updates are within the clip (each update is also noted for the share
    # of its values the trimmed mean dropped).
    notes = [note for note in summary["rounds"][0]["outer_step"] if "clipped to" in note]
    assert len(notes) == 1, summary["rounds"][0]["outer_step"]
    found = re.fullmatch(
        r"outer step: submission (0x[0-9a-f]+)'s update clipped to ([0-9.e-]+) of its norm .*", notes[0]
    )
    assert found is not None, notes[0]
    assert int(found[1], 16) & (2**160 - 1) == int(poisoner["address"], 16)
    # x100 of an honest-sized update, brought to at most 2 x the median: a factor of about 1/50.
    assert 0 < float(found[2]) < 0.05
    assert all(update["included"] for update in summary["rounds"][0]["updates"]), "nothing was checked"
    assert demo_processes(tmp_path) == []


def test_a_lazy_validator_pays_for_the_canaries_it_waved_through(tmp_path: Path) -> None:
    """`--trainers 4 --validator-adversary lazy --canary-rate 0.2`: a canary node plants one canary a round and reveals
    it (five submissions: the rate, rounded down, reveals one); the
    summary names them. Every validator that voted a canary valid is slashed for it (the lazy one, whenever the
    draw gave it the canary's check: three chances in four), every one that voted it invalid shares its
    prize, the canary's owner keeps its stake and is paid nothing, the canaries never reach the aggregate, and the
    books balance. Broken version: settle a revealed canary as work (the `_settleTrainer` canary branch removed) —
    the owner is paid and its catchers get nothing."""
    env = demo_env(tmp_path)
    done = subprocess.run([CRUCIBLE, "demo", "--model", "tiny", "--rounds", "1", "--prompts", "16", "--eval-problems",
                           "20", "--no-adversary", "--trainers", "4", "--validator-adversary", "lazy",
                           "--canary-rate", "0.2", "--json"],
                          capture_output=True, text=True, env=env, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    accounts = {a["name"]: a for a in summary["accounts"]}
    lazy, honest, owner = accounts["validator-1 (lazy)"], accounts["validator-2"], accounts["canary-1"]
    canaries = summary["canaries"]
    assert [c["round"] for c in canaries] == [0] and {c["trainer"] for c in canaries} == {"canary-1"}
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
    assert [u["included"] for u in summary["rounds"][0]["updates"] if u["trainer"] == "canary-1"] == [False]
    assert summary["money_check"]["balanced"]
    assert demo_processes(tmp_path) == []
