"""Where `make test`'s CPU goes: sums the per-test lines that CRUCIBLE_TEST_CPU_LOG collects, by file.

On a two-core machine the suite is CPU-bound and three workers share the cores, so a test's wall time
under `make test` says more about its neighbours than about itself. Its CPU seconds (the worker's and
those of the processes it started and waited for) do not.

Run: CRUCIBLE_TEST_CPU_LOG=/tmp/cpu.jsonl make test-python
     .venv/bin/python -m bench.test_cpu /tmp/cpu.jsonl [--top 25] [--json]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def by_file(lines: list[dict[str, object]]) -> list[dict[str, object]]:
    """Per test file: tests, CPU and wall seconds, most CPU first."""
    files: dict[str, dict[str, float]] = defaultdict(lambda: {"tests": 0, "cpu_s": 0.0, "wall_s": 0.0})
    for line in lines:
        entry = files[str(line["test"]).split("::")[0]]
        entry["tests"] += 1
        entry["cpu_s"] += float(line["cpu_s"])  # type: ignore[arg-type]
        entry["wall_s"] += float(line["wall_s"])  # type: ignore[arg-type]
    rows = [{"file": name, **{k: round(v, 1) for k, v in figures.items()}} for name, figures in files.items()]
    return sorted(rows, key=lambda row: -float(row["cpu_s"]))  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    lines = [json.loads(text) for text in args.log.read_text().splitlines() if text.strip()]
    rows = by_file(lines)
    total_cpu = sum(float(line["cpu_s"]) for line in lines)
    if args.json:
        print(json.dumps({"files": rows, "tests": lines, "total_cpu_s": round(total_cpu, 1)}))
        return
    print(f"{len(lines)} tests, {total_cpu:.0f} CPU s in all")
    print(f"{'CPU s':>8} {'wall s':>8} {'tests':>5}  file")
    for row in rows[: args.top]:
        print(f"{row['cpu_s']:>8} {row['wall_s']:>8} {row['tests']:>5}  {row['file']}")
    print("\nmost CPU, by test:")
    for line in sorted(lines, key=lambda x: -float(x["cpu_s"]))[: args.top]:
        print(f"{line['cpu_s']:>8} {line['wall_s']:>8}  {line['test']}")


if __name__ == "__main__":
    main()
