"""The lines ``simmoe replay`` prints about where a trace comes from (synthetic first)."""

from __future__ import annotations


def provenance_text(trace, path, requests: int | None = None) -> str:
    """A few lines (each under 100 columns) naming where the trace comes from; synthetic first.

    ``requests``: the replay's ``--requests N``; fewer than the trace holds shows "N of M requests".
    """
    import textwrap

    prov = trace.meta.get("provenance", {}) or {}
    g = trace.geometry
    shape = trace.pool_shape
    kind = prov.get("kind", "unknown")

    def short(v) -> str:
        text = str(v)
        return text if len(text) <= 60 else text[:57] + "..."

    # long free text (notes, lists of fitted figures) stays in the trace: `simmoe inspect` shows it
    details = ", ".join(f"{k}={short(v)}" for k, v in prov.items()
                        if k not in ("kind", "note", "fitted_to"))
    if prov.get("fitted_to"):
        details += f"{', ' if details else ''}fitted to {len(prov['fitted_to'])} published figure set(s)"
    lines = []
    if trace.is_synthetic:
        lines.append("[bold reverse yellow] SYNTHETIC trace [/] simulated from a synthetic trace, "
                     "not from recorded routes")
    lines.append(f"trace {path}: {kind}")
    if details:
        lines += textwrap.wrap(details, width=96, initial_indent="  ", subsequent_indent="    ")
    lines.append(f"  {_requests_text(trace, requests)}; "
                 f"{g.name or 'model ?'}: {g.num_layers} layers x {g.num_experts} experts, top-{g.top_k}")
    of = f" of drafter {trace.meta['drafter']['name']}" if (trace.meta or {}).get("drafter") else ""
    lines.append(f"  pools{of}: top-{shape.expand_topk} expansion, depth {shape.depth}, "
                 f"<= {shape.max_nodes} nodes, K = {shape.K}")
    return "\n".join(lines)


def _requests_text(trace, requests: int | None) -> str:
    M, P = len(trace.requests), trace.num_positions
    if requests is None or requests >= M:
        return f"{M} requests, {P:,} positions"
    return f"{requests} of {M} requests, {int(trace.requests.output_len[:requests].sum()):,} positions"
