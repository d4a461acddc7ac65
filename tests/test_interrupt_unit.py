"""simmoe.interrupt: the first signal interrupts, a swallowed one comes back, an acknowledged one stays quiet,
a deferred one waits for its checkpoint, and SIGTERM is handled as Ctrl-C is (exit 143)."""

from __future__ import annotations

import signal
import time

import pytest

import simmoe.interrupt as interrupt
from simmoe.interrupt import (
    Terminated,
    acknowledge,
    checkpoint,
    deferred,
    exit_status,
    interrupt_once,
    pause_point,
    requested,
    what,
)

RETRY_S = 0.05    # the watchdog's period in these tests (0.3 s in the command lines)


@pytest.fixture(autouse=True)
def _fast_watchdog_and_handlers_back(monkeypatch):
    monkeypatch.setattr(interrupt, "RETRY_S", RETRY_S)
    previous = {s: signal.getsignal(s) for s in interrupt.SIGNALS}
    yield
    for s, h in previous.items():
        signal.signal(s, h)


def _spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_a_swallowed_interruption_is_raised_again():
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with interrupt_once():
            try:
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                pass                            # what a library that swallows it does
            assert requested()
            with pytest.raises(KeyboardInterrupt):
                checkpoint()                    # the pooled loops raise it again at once
            _spin(40 * RETRY_S)                 # and so does the watchdog, unprompted
            pytest.fail("the swallowed interruption did not come back")
    assert time.monotonic() - t0 < 20 * RETRY_S
    # after an interruption both signals stay ignored: the process is on its way out
    assert signal.getsignal(signal.SIGINT) == signal.getsignal(signal.SIGTERM) == signal.SIG_IGN


def test_after_acknowledge_repeated_signals_are_ignored():
    cleaned = False
    with interrupt_once():
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            acknowledge()
            for s in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):   # more during the cleanup: ignored
                signal.raise_signal(s)
            _spin(3 * RETRY_S)
            checkpoint()
            cleaned = True
    assert cleaned


def test_without_an_interruption_the_handlers_come_back():
    previous = {s: signal.getsignal(s) for s in interrupt.SIGNALS}
    with interrupt_once():
        assert all(signal.getsignal(s) is not h for s, h in previous.items())
        checkpoint()
    assert {s: signal.getsignal(s) for s in interrupt.SIGNALS} == previous and not requested()


def test_sigterm_is_terminated_exit_143_and_sigint_130():
    with pytest.raises(Terminated) as term, interrupt_once():
        signal.raise_signal(signal.SIGTERM)
    assert isinstance(term.value, KeyboardInterrupt)            # every Ctrl-C cleanup handles it
    assert (exit_status(term.value), what(term.value)) == (143, "terminated")
    with pytest.raises(KeyboardInterrupt) as ctrl_c, interrupt_once():
        signal.raise_signal(signal.SIGINT)
    assert not isinstance(ctrl_c.value, Terminated)
    assert (exit_status(ctrl_c.value), what(ctrl_c.value)) == (130, "interrupted")


@pytest.mark.parametrize("sig", interrupt.SIGNALS)
def test_a_deferred_signal_is_raised_at_the_block_end_as_what_it_was(sig):
    steps = []
    with pytest.raises(KeyboardInterrupt) as exc, interrupt_once():
        with deferred():
            signal.raise_signal(sig)
            steps.append("noted, not raised")
            _spin(3 * RETRY_S)                      # the watchdog's retries are noted too
            steps.append("still running")
        steps.append("not reached")
    assert steps == ["noted, not raised", "still running"]
    assert isinstance(exc.value, Terminated) == (sig == signal.SIGTERM)


def test_a_deferred_block_that_does_not_act_leaves_the_signal_to_a_checkpoint():
    with pytest.raises(KeyboardInterrupt), interrupt_once():
        with deferred(act=False):
            signal.raise_signal(signal.SIGINT)
        assert requested()                          # the block ended without raising
        checkpoint()
        pytest.fail("checkpoint did not raise")


def test_an_interruption_python_can_only_print_is_silenced_and_comes_back(monkeypatch):
    import sys

    printed = []
    monkeypatch.setattr(sys, "unraisablehook", printed.append)   # stands for "Exception ignored in ..."

    class RaisesWhenCollected:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)      # lands in __del__, where Python can only print it

    with pytest.raises(KeyboardInterrupt), interrupt_once():
        RaisesWhenCollected()
        assert requested()
        _spin(40 * RETRY_S)
        pytest.fail("the interruption raised in __del__ did not come back")
    assert printed == []
    with interrupt_once():                          # any other unraisable exception is passed on
        class Fails:
            def __del__(self):
                raise ValueError("not ours")
        Fails()
    assert [type(u.exc_value) for u in printed] == [ValueError]


def test_a_pause_point_waits_only_when_named(tmp_path, monkeypatch):
    ready = tmp_path / "ready"
    pause_point("anywhere")                         # no variable: returns at once
    monkeypatch.setenv(interrupt.PAUSE_ENV, f"elsewhere:{ready}")
    pause_point("here")
    assert not ready.exists()
    monkeypatch.setenv(interrupt.PAUSE_ENV, f"here:{ready}")
    monkeypatch.setattr(interrupt, "PAUSE_MAX_S", 0.05)
    pause_point("here")                             # no signal: gives up after PAUSE_MAX_S
    assert ready.exists()
    monkeypatch.setattr(interrupt, "PAUSE_MAX_S", 60.0)
    with pytest.raises(KeyboardInterrupt), interrupt_once(), deferred():
        signal.raise_signal(signal.SIGINT)          # noted: the pause returns at once
        t0 = time.monotonic()
        pause_point("here")
        assert time.monotonic() - t0 < 1.0


def test_a_dead_worker_names_its_exit_code_or_signal():
    from simmoe.errors import SimmoeError
    from simmoe.replay.workers import WorkerDied

    assert str(WorkerDied(0, 3)) == "a worker process died (exit code 3)"
    assert str(WorkerDied(None, -9)) == "a worker process died (exit code -9, SIGKILL)"
    assert isinstance(WorkerDied(0, 3), SimmoeError)
