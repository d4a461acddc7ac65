"""Held-out language-model loss and the unigram baseline it is judged against (nats per token)."""

from __future__ import annotations

import numpy as np


def lm_loss(model, windows: np.ndarray, batch_size: int = 16) -> float:
    """Mean next-token cross-entropy over all predicted positions of ``windows`` (n, T).

    Every window predicts T-1 tokens, so the mean of per-batch token means,
    weighted by batch size, is the mean over tokens.  Cost: n/batch forwards.
    """
    import torch

    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(windows), batch_size):
            x = torch.from_numpy(np.ascontiguousarray(windows[i : i + batch_size]))
            logits = model(input_ids=x).logits[:, :-1].float()
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
            total += float(loss)
            count += x[:, 1:].numel()
    return total / count


def unigram_loss(train: np.ndarray, heldout: np.ndarray, vocab_size: int) -> float:
    """Cross-entropy on ``heldout`` of the add-one-smoothed unigram distribution of ``train``.

    The best a model that ignores context can do (up to smoothing); O(len) time.
    """
    counts = np.bincount(train, minlength=vocab_size).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[heldout].mean())
