"""`hwprobe models`: the MoE architectures hwprobe runs, their named configs and their tests."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser(
        "models",
        help="Supported MoE architectures, their named configs and what was tested",
        description="Every architecture whose experts use transformers' experts interface can be "
        "offloaded; this lists the ones with tiny test configs, whether a draft tree can be "
        "verified "
        "in one forward (record, live and calibrate need it), the named random-weight configs "
        "(--config NAME) and what the test suite checks for each.",
    )
    p.add_argument(
        "--markdown", action="store_true", help="print the table as Markdown (docs/hwprobe.md)"
    )
    p.set_defaults(func=run)


def rows() -> list[dict]:
    from hwprobe.architectures import ARCHITECTURES

    out = []
    for a in ARCHITECTURES.values():
        out.append(
            {
                "architecture": a.label,
                "model_type": a.model_type,
                "tree": "yes" if a.tree is None else "no: " + a.tree.split(":")[0],
                "attn": a.attn,
                "configs": ", ".join([f"tiny-{a.model_type}", *(f"{r}-<N>layers" for r in a.real)]),
                "tested": "; ".join(a.tested),
                "notes": a.notes,
            }
        )
    return out


def run(args) -> int:
    table = rows()
    cols = ["architecture", "model_type", "tree", "attn", "configs", "tested"]
    if args.markdown:
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for r in table:
            print("| " + " | ".join(r[c].replace("|", "/") for c in cols) + " |")
        return 0
    for r in table:
        print(f"{r['architecture']} ({r['model_type']})")
        print(f"    tree verification: {r['tree']}; attention: {r['attn']}")
        print(f"    configs: {r['configs']}")
        print(f"    tested: {r['tested']}")
        if r["notes"]:
            print(f"    notes: {r['notes']}")
    print(
        "Other architectures with transformers' experts interface load too (untested); "
        "others are refused."
    )
    return 0
