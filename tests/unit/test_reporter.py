"""What a person reads from a running role: amounts in tokens, yes/no, no Python reprs."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from protocol.runtime.reporter import Reporter


def human_line(**fields: object) -> str:
    out = io.StringIO()
    reporter = Reporter("node", json_lines=False, console=Console(file=out, width=300, color_system=None))
    reporter.use_token(18, "CRU")
    reporter.event("claimed", **fields)
    return out.getvalue().strip()


def test_human_lines_have_no_python_reprs() -> None:
    """Broken version: format fields with `f"{key}={value}"` as before → `adversary=None`,
    `rejected=False`, `seconds={'format': 0.00123}` and `amount_wei=900000000000000000000` appear."""
    line = human_line(
        amount_wei="900000000000000000000",
        rejected=False,
        adversary=None,
        seconds={"format": 0.00123456},
        rounds=[0, 1],
    )
    assert "amount=900 CRU" in line and "rejected=no" in line and "seconds=(format 0.001235)" in line
    assert "rounds=[0,1]" in line
    for repr_text in ("None", "False", "{", "'", "_wei"):
        assert repr_text not in line.split(" node claimed ")[1], line
    # A list of rounds is not a count: round 0 alone is `[0]` (it read `submitted_rounds=0` before).
    assert "submitted_rounds=[0]" in human_line(submitted_rounds=[0]) and "skipped_rounds=none" in human_line(
        skipped_rounds=[]
    )


def test_a_lost_race_reads_as_what_happened_not_as_a_failure() -> None:
    """Broken version: print every field, `revert` included, and drop the note → `revert=MarketAlreadyVoted`."""
    line = human_line(step="attest", revert="MarketAlreadyVoted", note="its vote was already counted; nothing lost")
    assert line.endswith(" step=attest: its vote was already counted; nothing lost"), line
    assert "revert" not in line and "MarketAlreadyVoted" not in line


def test_submission_ids_are_hex_in_json_and_in_human_lines(capsys: pytest.CaptureFixture[str]) -> None:
    """One notation everywhere. Broken version: pass ids through unchanged → JSON carries a decimal number."""
    sid = (1 << 192) | (2 << 160) | 0xABC
    assert f"submission={hex(sid)}" in human_line(submission=sid)
    reporter = Reporter("node", json_lines=True)
    reporter.event("settled", submission=sid, submissions=[sid])
    document = json.loads(capsys.readouterr().out)
    assert document["submission"] == hex(sid) and document["submissions"] == [hex(sid)]


def test_json_lines_keep_exact_wei(capsys: pytest.CaptureFixture[str]) -> None:
    reporter = Reporter("node", json_lines=True)
    reporter.use_token(18, "CRU")
    reporter.event("claimed", amount_wei="900000000000000000000", rejected=False)
    document = json.loads(capsys.readouterr().out)
    assert document["amount_wei"] == "900000000000000000000" and document["rejected"] is False
