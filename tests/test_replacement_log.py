"""The workspace's replacements reach the log as a high-water mark, not as a flood."""

import logging

import overlay_runs

from sglang_overlay.observe import MIB, ReplacementLog

default_process = overlay_runs.fixture("default_process")


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def records_of(caplog, level):
    return [r for r in caplog.records if r.name == "sglang_overlay" and r.levelno == level]


def test_info_only_when_the_size_passes_its_high_water_mark(caplog):
    log = ReplacementLog("DSV4 sparse-prefill workspace", clock=Clock())
    with caplog.at_level(logging.DEBUG, logger="sglang_overlay"):
        for size in (64, 32, 64, 96, 96, 48, 128):
            log.replaced("old", "new", int(size * MIB))
    infos = [r.getMessage() for r in records_of(caplog, logging.INFO)]
    assert [m.split("high-water now ")[1] for m in infos] == ["64.0 MiB", "96.0 MiB", "128.0 MiB"]
    assert len(records_of(caplog, logging.DEBUG)) == 4


def test_thrashing_warns_at_most_once_a_minute(caplog):
    clock = Clock()
    log = ReplacementLog("DSV4 sparse-prefill workspace", clock=clock, thrash_per_minute=100)
    with caplog.at_level(logging.INFO, logger="sglang_overlay"):
        for _ in range(3):  # three minutes of 1,000 replacements each
            for _ in range(1000):
                log.replaced("a", "b", 1)
                clock.now += 0.05
            clock.now += 10
    warnings = records_of(caplog, logging.WARNING)
    assert len(warnings) == 3
    assert "101 DSV4 sparse-prefill workspace replacements in the last minute" in (
        warnings[0].getMessage()
    )


def test_a_steady_rate_below_the_threshold_never_warns(caplog):
    clock = Clock()
    log = ReplacementLog("DSV4 sparse-prefill workspace", clock=clock, thrash_per_minute=100)
    with caplog.at_level(logging.INFO, logger="sglang_overlay"):
        for _ in range(500):  # 50 a minute for ten minutes
            log.replaced("a", "b", 1)
            clock.now += 1.2
    assert records_of(caplog, logging.WARNING) == []


# 0.5.23 replaces the buffer on every dtype switch: a q8/bf16 mix at a steady size. An
# observation of the shared default process, made while its workspace high-water mark is zero.
ALTERNATING_DTYPES = overlay_runs.observe(
    "default_process",
    "replacement_log",
    """
    import collections, logging
    import torch
    import {WORKSPACE_MODULE} as m
    levels = collections.Counter()
    class Count(logging.Handler):
        def emit(self, record):
            levels[record.levelname] += 1
    logger = logging.getLogger("sglang_overlay")
    count = Count()
    logger.addHandler(count); logger.setLevel(logging.DEBUG)
    try:
        workspace = m.SparsePrefillKVBuffer(torch.device("cpu"))
        for i in range(1000):
            workspace.get(64, torch.bfloat16 if i % 2 == 0 else torch.float8_e4m3fn)
    finally:  # what the process observes next logs as it would without this
        logger.removeHandler(count); logger.setLevel(logging.NOTSET)
    return levels
    """,
)


def test_alternating_dtypes_on_the_real_class_log_two_lines_not_a_thousand(default_process):
    counts = default_process.value(ALTERNATING_DTYPES)
    assert counts == {"INFO": 1, "DEBUG": 999, "WARNING": 1}
