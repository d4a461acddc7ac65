"""`simmoe replay --prefetch POLICY` and `--timeline FILE`: the options, their checks, the timeline file.

Kept apart from :mod:`simmoe.cli.replay`, which calls :func:`add_arguments`
and :func:`setup`; the replay itself is the engine's, for every setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
    from simmoe.replay import plugins

    # every registered name (entry-point metadata only: no policy module is imported for --help)
    p.add_argument("--prefetch", default="none", metavar="POLICY",
                   help=f"copy predicted experts ahead of the forward: {plugins.known('prefetch')} (default none), "
                        "an installed plugin's name or module:Name (predictions from --route-accuracy's "
                        "predictor; docs/prefetch.md)")
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

    def finish(self, configs, out, meta: dict) -> None:
        """Say why the time saved is null without its baseline; write the timeline (the baseline left out)."""
        if self.policy != "none" and not self.paired:
            meta["time_saved"] = "not computed (--no-time-saved): saved_ms_per_token and saved_pct are null"
        if self.timeline is None:
            return
        from simmoe.replay.timeline import write_timeline

        processes = []
        for cfg, res in zip(configs[1:], out[1:], strict=True):
            label = (f"{cfg.selector} ({cfg.slots} slots, {cfg.cache if cfg.cache_active else 'no'} cache, "
                     f"prefetch {self.policy}" + (f", batch {cfg.batch})" if cfg.batch > 1 else ")"))
            processes.append((label, getattr(res, "timeline", None) or []))
        write_timeline(self.timeline, processes,
                       {"source": "simmoe replay (event model)", "time_unit": "ms from the replay's start",
                        **{k: meta[k] for k in ("trace", "synthetic") if k in meta},
                        "prefetch": self.policy, "requests": configs[0].requests})


def setup(args, names, base, profile) -> PrefetchRun | None:
    """Check ``--prefetch`` / ``--timeline`` (one line, exit 2); None when neither is asked for."""
    from simmoe.replay.prefetch_policies import check_prefetch

    policy = check_prefetch(args.prefetch)
    if policy == "none" and args.timeline is None:
        return None
    if args.timeline is not None:
        if args.requests is None:
            raise SimmoeError("--timeline needs --requests N: a timeline holds a few hundred events per "
                              "cycle, so keep it to a few requests")
        if Path(args.timeline).is_dir():
            raise SimmoeError(f"--timeline {args.timeline}: is a folder, not a file")
        if profile.resident:
            raise SimmoeError(f"--timeline: profile {profile.name} is resident (no copies); the timeline "
                              "model covers offloaded experts")
        if base.timing != "event":
            raise SimmoeError(f"--timeline needs --timing event, got {base.timing}")
    return PrefetchRun(policy, args.timeline, paired=not args.no_time_saved)
