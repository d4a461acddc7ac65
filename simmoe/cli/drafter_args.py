"""The drafter options of `simmoe synth` and `simmoe replay` (docs/synthetic-traces.md, "Drafters")."""

from __future__ import annotations

HELP = {
    "synth": ("the drafter whose pools the trace holds: eagle3 (default: the presets' EAGLE-3 tree), mtp, llama-chain, "
              "dflash, lookahead, or module:Name; named in the trace's metadata, so a replay charges its drafting",
              "a drafter parameter (repeatable), e.g. heads=2 for mtp, draft_max=8 for llama-chain"),
    "replay": ("the trace's drafter, whose drafting the replay charges (default: the one its metadata names, else "
               "eagle3); another is refused",
               "a cost parameter of the drafter (repeatable), e.g. draft_model=NAME for llama-chain"),
}


def add_drafter_arguments(p, command: str) -> None:
    """``--drafter NAME`` and ``--drafter-param KEY=VALUE`` (repeatable)."""
    name, param = HELP[command]
    p.add_argument("--drafter", default=None, metavar="NAME", help=name)
    p.add_argument("--drafter-param", action="append", default=None, metavar="KEY=VALUE", help=param)


def replay_profile(trace, profile, args):
    """The profile whose drafting is the trace's drafter's, with ``--drafter``'s check and ``--drafter-param``."""
    from simmoe.drafters import parse_params, profile_for_trace

    return profile_for_trace(trace, profile, args.drafter, parse_params(args.drafter_param))
