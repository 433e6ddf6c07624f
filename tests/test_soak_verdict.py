"""The soak's judge (``bench.soak.verdict``) fails a run for each kind of leak.

The soak itself runs in CI as a step of its own (two minutes) and for an hour by
hand (docs/operations.md#soak); these tests feed its judge the samples of runs that
leaked, so that a soak that holds means something.
"""

from __future__ import annotations

from collections import Counter

import pytest

from bench.soak import Ended, Sample, Tally, verdict
from bench.soakload import SCENARIOS

STDIO = ("stdio_echo", "stdio_count", "stdio_job", "stdio_garbage")
WARM = 4
IDLE: tuple[int, int] = (3, 9)  # tasks, open files before the load


def samples(**series: list[float]) -> list[Sample]:
    """20 samples of a steady run, with the fields ``series`` names replaced."""
    steady: dict[str, list[float]] = {
        "rss_mib": [36.0] * 20,
        "open_files": [18.0] * 20,
        "tasks": [5.0] * 20,
        "stdio_rss_mib": [29.0] * 20,
        "stdio_open_files": [10.0] * 20,
        **series,
    }
    return [
        Sample(
            at=float(i),
            rss_mib=steady["rss_mib"][i],
            open_files=int(steady["open_files"][i]),
            tasks=int(steady["tasks"][i]),
            in_flight=0,
            calls=100,
            p50_ms=0.5,
            p99_ms=2.0,
            stdio_rss_mib=steady["stdio_rss_mib"][i],
            stdio_open_files=int(steady["stdio_open_files"][i]),
            latencies=[0.002] * 100,
        )
        for i in range(20)
    ]


def tally() -> Tally:
    done = Counter({name: 10 for name in [*SCENARIOS, *STDIO]})
    return Tally(done=done)


def judge(
    run: list[Sample],
    *,
    after: tuple[int, int] = IDLE,
    figures: dict[str, float] | None = None,
    counted: Tally | None = None,
    ended: Ended | None = None,
) -> list[str]:
    return verdict(
        run,
        WARM,
        IDLE,
        (*after, figures or {"mcplite_calls_in_flight": 0, "mcplite_promises_pending": 0}),
        counted or tally(),
        ended or Ended([], None, 0, 0.05),
        8.0,
    )


def test_a_steady_run_holds() -> None:
    assert judge(samples()) == []


@pytest.mark.parametrize("field", ["rss_mib", "stdio_rss_mib"])
def test_memory_that_keeps_growing_after_warm_up_fails(field: str) -> None:
    growing = [30.0 + i for i in range(20)]  # a MiB a sample
    failures = judge(samples(**{field: growing}))
    assert any(field in failure and "grew" in failure for failure in failures), failures


def test_memory_that_grows_only_during_warm_up_holds() -> None:
    warming = [30.0 + min(i, WARM) * 2 for i in range(20)]
    assert judge(samples(rss_mib=warming)) == []


@pytest.mark.parametrize(("field", "name"), [("open_files", "open_files"), ("tasks", "tasks")])
def test_files_or_tasks_climbing_under_load_fail(field: str, name: str) -> None:
    climbing = [18.0 + i * 2 for i in range(20)]
    failures = judge(samples(**{field: climbing}))
    assert any(failure.startswith(name) for failure in failures), failures


def test_tasks_or_files_left_after_the_load_fail() -> None:
    failures = judge(samples(), after=(IDLE[0] + 1, IDLE[1] + 2))
    assert any("tasks after the load" in failure for failure in failures), failures
    assert any("open files after the load" in failure for failure in failures), failures


def test_a_call_or_promise_still_running_after_the_load_fails() -> None:
    busy = {"mcplite_calls_in_flight": 1.0, "mcplite_promises_pending": 0.0}
    assert any("not idle" in failure for failure in judge(samples(), figures=busy))


def test_latency_that_doubles_over_the_run_fails() -> None:
    run = samples()
    for late in run[-4:]:
        late.latencies = [0.020] * 100  # 20 ms where it was 2 ms
    assert any("p99" in failure for failure in judge(run))


def test_bad_answers_transport_failures_and_error_lines_each_fail() -> None:
    counted = tally()
    counted.malformed.append("lite_call: echo: got something else")
    counted.failed.append("grpc_call: RpcError")
    ended = Ended(["Traceback (most recent call last):"], None, 0, 0.05)
    failures = judge(samples(), counted=counted, ended=ended)
    assert [f.split(" ", 2)[1] for f in failures] == ["malformed", "transport", "ERROR"]


def test_a_server_that_died_or_a_slow_stdio_exit_fails() -> None:
    assert any("exited" in f for f in judge(samples(), ended=Ended([], -9, 0, 0.05)))
    assert any("stdio ended" in f for f in judge(samples(), ended=Ended([], None, 0, 1.5)))
    assert any("stdio ended" in f for f in judge(samples(), ended=Ended([], None, 1, 0.1)))


def test_a_scenario_that_never_completed_fails() -> None:
    counted = tally()
    del counted.done["mcp_task"]
    assert any("mcp_task" in f for f in judge(samples(), counted=counted))
