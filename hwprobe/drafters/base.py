"""The drafter interface: anything that proposes the top-k children of pool nodes."""

from __future__ import annotations

from hwprobe.pool import Pool


class Drafter:
    """Base class.  ``context`` is prompt + output so far; its last token is the root."""

    name = "drafter"

    def start(self, prompt: list[int]) -> None:
        """A new request begins (reset per-request state)."""

    def observe(self, context: list[int], target_output=None) -> None:
        """The target committed up to ``context``; ``target_output`` is its last forward (features)."""

    def children(self, context: list[int], pool: Pool, frontier: list[int], k: int):
        """For each node in ``frontier`` (-1 = root): ``(tokens, probabilities)``, most probable first."""
        raise NotImplementedError
