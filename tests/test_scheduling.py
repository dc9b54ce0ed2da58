"""The order in which `make nbval` hands the long notebook tests to its two workers."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import longest_first, notebook_seconds


def _finish_times(order: list[int], costs: list[float], workers: int = 2) -> list[float]:
    """pytest-xdist's `load` scheduling with --maxschedchunk=1: each worker is given two
    tests at first and, whenever it finishes one, the next pending test."""
    queues = [list(order[2 * w:2 * w + 2]) for w in range(workers)]
    pending, clock = list(order[2 * workers:]), [0.0] * workers
    while any(queues):
        worker = min((w for w in range(workers) if queues[w]),
                     key=lambda w: clock[w] + costs[queues[w][0]])
        clock[worker] += costs[queues[worker].pop(0)]
        if pending:
            queues[worker].append(pending.pop(0))
    return clock


def test_the_two_longest_tests_start_on_different_workers():
    costs = [300, 290, 118, 60, 55, 50, 45, 43, 40, 6, 1]
    order = longest_first(costs)
    assert sorted(order) == list(range(len(costs)))
    assert {order[0], order[2]} == {0, 1}  # each worker's first test: one of the two longest
    assert {order[1], order[3]} == {9, 10}  # queued behind them: the two shortest
    balanced = max(_finish_times(order, costs))
    in_file_order = max(_finish_times(list(range(len(costs))), costs))
    assert balanced <= sum(costs) / 2 + max(costs[2:])  # the LPT bound
    assert balanced < in_file_order  # 0 and 1 would run on the same worker, one after the other


def test_short_lists_are_only_sorted():
    assert longest_first([1, 3, 2]) == [1, 2, 0]


def test_notebook_seconds_sums_the_recorded_cell_times(tmp_path):
    def cell(start, end):
        return {"cell_type": "code", "metadata": {"execution": {
            "iopub.execute_input": start, "shell.execute_reply": end}}}

    notebook = {"cells": [cell("2026-12-01T01:00:00.000Z", "2026-12-01T01:00:02.500Z"),
                          cell("2026-12-01T01:00:03Z", "2026-12-01T01:01:03Z"),
                          {"cell_type": "markdown", "metadata": {}}]}
    path = Path(tmp_path, "nb.ipynb")
    path.write_text(json.dumps(notebook))
    assert notebook_seconds(path) == 62.5
