"""`simmoe replay --prefetch POLICY` and `--timeline FILE`: the options, their checks, the run.

Kept apart from :mod:`simmoe.cli.replay`, which calls :func:`add_arguments`
and :func:`setup`; without these options (and without a selector that
selects from the cache state) ``simmoe replay`` runs exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simmoe.errors import SimmoeError

COLUMNS = {
    "prefetched_per_token": ("prefetch\n/token", "{:.1f}", "--prefetch: prefetch copies per output token"),
    "useful_per_token": ("useful\n/token", "{:.1f}",
                         "--prefetch: prefetched experts a forward used before they left the cache, per token"),
    "wasted_per_token": ("wasted\n/token", "{:.1f}",
                         "--prefetch: prefetched experts evicted or dropped unused, per output token"),
    "saved_ms_per_token": ("saved\nms/token", "{:.2f}",
                           "--prefetch: decode time saved per decoded token against the same replay "
                           "without prefetch"),
}
PREFETCH_COLUMNS = tuple(COLUMNS)


def add_arguments(p) -> None:
    from simmoe.replay.prefetch_policies import PREFETCH_POLICIES

    p.add_argument("--prefetch", default="none", metavar="POLICY",
                   help="copy predicted experts ahead of the forward: " + ", ".join(PREFETCH_POLICIES)
                        + " (default none; predictions from --route-accuracy's predictor; docs/prefetch.md)")
    p.add_argument("--no-time-saved", action="store_true",
                   help="--prefetch: skip the replay without prefetch that gives the time saved (about halves "
                        "the extra work; the saved column shows –)")
    p.add_argument("--timeline", metavar="FILE",
                   help="write the event model's timeline of every selector (Chrome trace-event JSON for "
                        "Perfetto or chrome://tracing); needs --requests N")


@dataclass
class PrefetchRun:
    """What ``simmoe replay`` does differently with ``--prefetch`` / ``--timeline``."""

    policy: str
    timeline: str | None
    paired: bool = True
    columns: tuple = PREFETCH_COLUMNS
    results: list = field(default_factory=list)

    def replay_all(self, trace, configs, profiles, *, workers=1, on_done=None, progress=None):
        """``simmoe.replay.engine.replay_all``'s contract; ``configs[0]`` is the AR baseline (no prefetch)."""
        from simmoe.replay.prefetch import replay_all_prefetch

        policies = ["none"] + [self.policy] * (len(configs) - 1)
        out = replay_all_prefetch(trace, configs, profiles, policies, workers=workers,
                                  timeline=self.timeline is not None, paired=self.paired,
                                  on_done=on_done, progress=progress)
        self.results = out
        return out

    def finish(self, configs, out, meta: dict) -> None:
        """Write the timeline (every selector's replay, the baseline left out)."""
        if self.timeline is None:
            return
        from simmoe.replay.timeline import write_timeline

        processes = []
        for cfg, res in zip(configs[1:], out[1:], strict=True):
            label = (f"{cfg.selector} ({cfg.slots} slots, {cfg.cache if cfg.cache_active else 'no'} cache, "
                     f"prefetch {self.policy})")
            processes.append((label, getattr(res, "timeline", None) or []))
        write_timeline(self.timeline, processes,
                       {"source": "simmoe replay (event model)", "time_unit": "ms from the replay's start",
                        **{k: meta[k] for k in ("trace", "synthetic") if k in meta},
                        "prefetch": self.policy, "requests": configs[0].requests})


def setup(args, names, base, profile, trace, batch: int) -> PrefetchRun | None:
    """Check ``--prefetch`` / ``--timeline`` (one line, exit 2); None when the default replay applies."""
    from pathlib import Path

    from simmoe.replay.prefetch_policies import check_prefetch
    from simmoe.replay.selectors import SELECTORS

    policy = check_prefetch(args.prefetch)
    coupled = any(SELECTORS[n].uses_residency for n in names)
    if policy == "none" and args.timeline is None and not coupled:
        return None
    from simmoe.replay.prefetch import check_prefetch_setting
    if args.timeline is not None:
        if args.requests is None:
            raise SimmoeError("--timeline needs --requests N: a timeline holds a few hundred events per "
                              "cycle, so keep it to a few requests")
        if Path(args.timeline).is_dir():
            raise SimmoeError(f"--timeline {args.timeline}: is a folder, not a file")
        if batch > 1:
            raise SimmoeError(f"--timeline is not combined with --batch {batch}")
        if profile.resident:
            raise SimmoeError(f"--timeline: profile {profile.name} is resident (no copies); the timeline "
                              "model covers offloaded experts")
    check_prefetch_setting(policy, profile=profile, config=base, selectors=names, batch=batch, trace=trace)
    if args.timeline is not None and base.timing != "event":
        raise SimmoeError(f"--timeline needs --timing event, got {base.timing}")
    return PrefetchRun(policy, args.timeline, paired=not args.no_time_saved)
