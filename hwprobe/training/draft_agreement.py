"""Greedy-draft agreement of the drafter with the target, per draft position.

For each held-out prefix the drafter greedily drafts a chain of ``depth``
tokens; one target forward over prefix + chain gives the target's greedy
token at every chain position.  Chain position j is accepted when it and all
before it equal the target's greedy tokens (greedy verification, lossless).
Reported per position j: the conditional acceptance α_j = P(accept j |
accepted j−1) and the unconditional P(accept j); their product structure is
what a speculative tree's acceptance model needs (SpecFit §3).  Also the
teacher-forced top-1 agreement on the real text, which ignores chaining.

Cost: depth drafter forwards + one target forward per batch of prefixes
(no KV cache: the models are tiny and prefixes short).
"""

from __future__ import annotations

import numpy as np


def greedy_chain(drafter, prefixes, depth: int):
    """Drafter's greedy continuation, shape (n, depth)."""
    import torch

    x = prefixes
    with torch.no_grad():
        for _ in range(depth):
            nxt = drafter(input_ids=x).logits[:, -1].argmax(-1, keepdim=True)
            x = torch.cat([x, nxt], dim=1)
    return x[:, prefixes.shape[1]:]


def draft_agreement(target, drafter, windows: np.ndarray, *, prefix_len: int = 96,
                    depth: int = 8, batch_size: int = 16) -> dict:
    """Agreement statistics on ``windows`` (n, T ≥ prefix_len); one prefix per window."""
    import torch

    target.eval()
    drafter.eval()
    accepted_rows, forced = [], []
    with torch.no_grad():
        for i in range(0, len(windows), batch_size):
            w = torch.from_numpy(np.ascontiguousarray(windows[i : i + batch_size]))
            prefix = w[:, :prefix_len]
            chain = greedy_chain(drafter, prefix, depth)
            t_logits = target(input_ids=torch.cat([prefix, chain], 1)).logits
            # Target's greedy token at chain position j is predicted from position prefix_len-1+j.
            t_greedy = t_logits[:, prefix_len - 1 : prefix_len - 1 + depth].argmax(-1)
            match = (t_greedy == chain).numpy()
            accepted_rows.append(np.cumprod(match, axis=1).astype(bool))
            # Teacher-forced: both models on the real text.
            d_top = drafter(input_ids=w).logits.argmax(-1)
            t_top = target(input_ids=w).logits.argmax(-1)
            forced.append((d_top == t_top).float().mean().item() * w.numel())
    accepted = np.concatenate(accepted_rows)                       # (n, depth)
    p_accept, alpha, mean_accepted = acceptance_per_level(accepted)
    return {
        "prefixes": int(len(accepted)),
        "prefix_len": prefix_len,
        "depth": depth,
        "p_accept": p_accept.tolist(),
        "alpha": alpha.tolist(),
        "mean_accepted": mean_accepted,
        "teacher_forced_top1": float(sum(forced) / windows.size),
    }


def acceptance_per_level(accepted: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """From accepted[i, j] (chain i accepted through level j): P(accept j), α_j = P(j | j−1), mean length."""
    depth = accepted.shape[1] if accepted.ndim == 2 else 0
    p_accept = accepted.mean(0) if len(accepted) else np.zeros(depth)
    prev = np.concatenate([[1.0], p_accept[:-1]])
    alpha = np.where(prev > 0, p_accept / np.maximum(prev, 1e-12), 0.0)
    return p_accept, alpha, float(accepted.sum(1).mean()) if len(accepted) else float("nan")
