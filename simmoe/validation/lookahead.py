"""Lookahead's simulation against a live lookahead run: mean accepted tokens per cycle on the same requests.

The simulator's Lookahead drafter (:class:`simmoe.drafters.builtin.Lookahead`)
assumes its acceptance: synthetic traces carry no text.  Here its three
acceptance parameters are set from text instead — counted on the outputs of
a live run (``hwprobe``'s lookahead check measures them by retrieving the
branches at every output position of the committed text, not only where the
live run drafted) — and a synthetic trace of the same requests (same number,
same output lengths) is replayed; its Mat is compared with the live run's.

From the counts over every output position with a next token:

* ``hit``: the share where the best branch's first token is the next token;
* ``spread``: the other branches' first tokens hold the next token in a
  share ``o`` of the positions the best branch missed; the generator gives
  further branch i a share ``spread`` of what is left, so
  ``o = 1 − (1 − spread)^(branches − 1)``, solved for ``spread``;
* ``follow``: where a branch's first j tokens are the text, the share where
  its token j + 1 is too (a branch that ends early counts as a miss).

The workload's easy and hard stretches, which scale every rate by the
position's predictability, are read off the text's runs of right and wrong
best branches (:func:`text_workload`), or left at
:class:`~simmoe.synth.SynthParams`' defaults (``workload="default"``, which
misses how repetition clusters: docs/closed-loop.md).  Nothing here is
fitted to the live acceptance.  Everything the simulation gives is from
synthetic traces.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from simmoe.errors import SimmoeError

# Mat does not depend on timing; any physical profile of the synthetic geometry serves (Lookahead's cost needs one)
PROFILE = "qwen3-30b-a3b@a100-sxm4-80gb"
FLOOR = 1e-3    # the drafter's rates must lie in (0, 1]: a share never observed is set just above 0
REPLICA_SEEDS = 100_003   # seeds of one replica's length groups stay apart from the next replica's


@dataclass(frozen=True)
class TextCounts:
    """What the text says about the branches, counted over output positions (module docstring)."""

    positions: int        # output positions with a next token
    hits: int             # ... where the best branch's first token is it
    others: int           # ... where another branch's first token is it
    follow_trials: int    # branch tokens j + 1 asked for, the first j being the text
    follow_hits: int      # ... that are the text too
    hit_runs: int = 0     # maximal runs of consecutive positions whose best branch is right (per request)
    miss_runs: int = 0    # ... and of those where it is not

    def __post_init__(self):
        if not (0 <= self.hits + self.others <= self.positions and 0 <= self.follow_hits <= self.follow_trials):
            raise SimmoeError(f"lookahead text counts are inconsistent: {self}")

    def __add__(self, other: TextCounts) -> TextCounts:
        return TextCounts(*(a + b for a, b in zip(self.as_tuple(), other.as_tuple())))

    def as_tuple(self) -> tuple[int, ...]:
        return (self.positions, self.hits, self.others, self.follow_trials, self.follow_hits, self.hit_runs,
                self.miss_runs)


def _check_positions(counts: TextCounts) -> None:
    if counts.positions < 1:   # e.g. every output a single token (an end of text at once)
        raise SimmoeError("lookahead text counts: no output position with a next token")


def lookahead_params(counts: TextCounts, branches: int) -> dict[str, float]:
    """``hit``, ``spread``, ``follow`` measured from ``counts`` (module docstring), each in (0, 1]."""
    _check_positions(counts)
    hit = counts.hits / counts.positions
    missed = counts.positions - counts.hits
    share = counts.others / missed if missed else 0.0
    spread = 1.0 - (1.0 - share) ** (1.0 / (branches - 1)) if branches > 1 and share < 1.0 else share
    follow = counts.follow_hits / counts.follow_trials if counts.follow_trials else 0.0
    return {"hit": max(hit, FLOOR), "spread": max(spread, FLOOR), "follow": max(follow, FLOOR)}


# the text's own stretches: a position is easy where the best branch is right, so the stretches' hit rates are
# 1 and 0, set just inside the generator's open interval
TEXT_EASY, TEXT_HARD = 0.99, 0.01
WORKLOADS = ("text", "default")


def text_workload(counts: TextCounts) -> dict[str, float]:
    """The generator's stretch parameters read off the text's runs of right and wrong best branches.

    The generator's stretches are a two-state chain with mean easy stretch
    2·S·π and hard stretch 2·S·(1 − π) (:func:`simmoe.synth.draft.stretches`);
    with the runs as stretches, π is the share of positions in right runs
    and S half the sum of the mean run lengths.
    """
    _check_positions(counts)
    pi = counts.hits / counts.positions
    easy = counts.hits / counts.hit_runs if counts.hit_runs else 0.0
    hard = (counts.positions - counts.hits) / counts.miss_runs if counts.miss_runs else 0.0
    return {"easy_share": pi, "stretch_tokens": max(1.0, (easy + hard) / 2.0),
            "easy_confidence": TEXT_EASY, "hard_confidence": TEXT_HARD}


@dataclass(frozen=True)
class Simulated:
    """The simulated Mat and its spread over replicas."""

    mat: float
    mat_se: float            # standard error over the replicas' Mat
    replicas: int
    cycles: int
    params: dict
    workload: dict


def simulate_mat(counts: TextCounts, output_lens: list[int], *, branches: int, branch_length: int,
                 draft_tokens: int, replicas: int = 32, seed: int = 0, workload: str = "text") -> Simulated:
    """Mat of synthetic Lookahead traces of the given requests, their acceptance set from ``counts``.

    Every request is synthesized ``replicas`` times (independent streams),
    replayed with selector ``eagle3`` (the K = ``draft_tokens`` nodes of
    highest path probability, as the live check verifies); Mat is 1 +
    accepted per cycle over all cycles.  ``workload``: ``text``, the
    stretches of :func:`text_workload`; ``default``, SynthParams' own (a
    workload whose predictability does not come from this text).
    O(replicas · tokens · pool nodes).
    """
    import simmoe.drafters as drafters
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import ReplayConfig, replay
    from simmoe.synth import SynthParams, generate

    if replicas < 1 or not output_lens or min(output_lens) < 1:
        raise SimmoeError("lookahead simulation: give at least one request of at least one token and replicas >= 1")
    if workload not in WORKLOADS:
        raise SimmoeError(f"lookahead simulation: unknown workload {workload!r} (known: {', '.join(WORKLOADS)})")
    params = lookahead_params(counts, branches)
    stretch = text_workload(counts) if workload == "text" else {}
    drafter = drafters.build("lookahead", {"branches": branches, "branch_length": branch_length,
                                           "draft_tokens": draft_tokens, **params})
    profile = load_profile(PROFILE)
    config = ReplayConfig(selector="eagle3", slots=0, cache="none", hardware=profile.name)
    per_rep = []   # (cycles, accepted) of each replica
    for r in range(replicas):
        cycles = accepted = 0
        for n, count in sorted(Counter(int(x) for x in output_lens).items()):
            # equal lengths exactly: one log-normal draw of sigma 0 per request, scaled to the total
            synth = SynthParams(num_requests=count, total_output_tokens=n * count, limit_tokens=100_000,
                                output_len_sigma=0.0, pool=drafter.pool_shape()).with_(**stretch)
            # a seed per (replica, length): independent streams (a question set has too few questions for all)
            # Mat reads no routes: the pool nodes' routes are left out (5 times faster, the same pools and verdicts)
            trace = generate(synth, seed=seed + REPLICA_SEEDS * r + n, drafter=drafter, node_routes=False)
            if not (trace.requests.output_len == n).all():
                raise SimmoeError(f"lookahead simulation: could not synthesize requests of {n} tokens")
            acc = np.asarray(replay(trace, config, profile).cycles["accepted"])
            cycles, accepted = cycles + len(acc), accepted + int(acc.sum())
        per_rep.append((cycles, accepted))
    mats = np.array([1.0 + a / c for c, a in per_rep])
    total_c, total_a = sum(c for c, _ in per_rep), sum(a for _, a in per_rep)
    se = float(mats.std(ddof=1) / np.sqrt(replicas)) if replicas > 1 else float("nan")
    return Simulated(mat=1.0 + total_a / total_c, mat_se=se, replicas=replicas, cycles=total_c, params=params,
                     workload=stretch)
