"""simmoe.interrupt: the first Ctrl-C interrupts, a swallowed one comes back, an acknowledged one stays quiet."""

from __future__ import annotations

import signal
import time

import pytest

from simmoe.interrupt import RETRY_S, acknowledge, checkpoint, interrupt_once, requested


def _spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_a_swallowed_interruption_is_raised_again():
    previous = signal.getsignal(signal.SIGINT)
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
            _spin(5 * RETRY_S)                  # and so does the watchdog, unprompted
            pytest.fail("the swallowed interruption did not come back")
    assert time.monotonic() - t0 < 3 * RETRY_S + 0.5
    # after an interruption SIGINT stays ignored: the process is on its way out
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    signal.signal(signal.SIGINT, previous)


def test_after_acknowledge_repeated_ctrl_c_is_ignored():
    previous = signal.getsignal(signal.SIGINT)
    cleaned = False
    with interrupt_once():
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            acknowledge()
            for _ in range(3):                  # more Ctrl-Cs during the cleanup: ignored
                signal.raise_signal(signal.SIGINT)
            _spin(3 * RETRY_S)
            checkpoint()
            cleaned = True
    assert cleaned
    signal.signal(signal.SIGINT, previous)


def test_without_an_interruption_the_handler_comes_back():
    previous = signal.getsignal(signal.SIGINT)
    with interrupt_once():
        assert signal.getsignal(signal.SIGINT) is not previous
        checkpoint()
    assert signal.getsignal(signal.SIGINT) is previous and not requested()
