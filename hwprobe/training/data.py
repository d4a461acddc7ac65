"""Token streams for training and evaluation: corpus → tokenizer → windows.

Training batches are windows at uniformly random offsets of the training
stream (a seeded ``numpy`` generator, so a seed fixes the batch sequence);
evaluation uses consecutive non-overlapping windows of the held-out stream,
so "the first n windows" is the same slice on every machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwprobe.training.corpus import Document, load_documents, split_documents
from hwprobe.training.plans import TrainPlan
from hwprobe.training.tokenizer import encode_documents, train_tokenizer


def _truncate(docs: list[Document], max_chars: int | None) -> list[Document]:
    if max_chars is None:
        return docs
    kept, total = [], 0
    for d in docs:
        if total >= max_chars:
            break
        kept.append(d if total + len(d.text) <= max_chars else Document(d.path, d.text[: max_chars - total]))
        total += len(kept[-1].text)
    return kept


@dataclass
class TokenData:
    tokenizer: object            # PreTrainedTokenizerFast
    train: np.ndarray            # int64 token ids, documents separated by EOS
    heldout: np.ndarray
    seq_len: int
    heldout_chars: int = 0

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    def sample_batch(self, rng: np.random.Generator, batch_size: int) -> np.ndarray:
        starts = rng.integers(0, len(self.train) - self.seq_len, size=batch_size)
        return np.stack([self.train[s : s + self.seq_len] for s in starts])

    def heldout_windows(self, n: int | None = None) -> np.ndarray:
        """The first ``n`` (default: all) non-overlapping held-out windows, shape (n, seq_len)."""
        total = len(self.heldout) // self.seq_len
        n = total if n is None else min(n, total)
        return self.heldout[: n * self.seq_len].reshape(n, self.seq_len)


def prepare(plan: TrainPlan, tokenizer=None) -> TokenData:
    """Load the pinned corpus, train (or reuse) the tokenizer on its training split, encode both splits.

    Complexity: linear in the corpus size (about 6.7 M characters; a few seconds).
    """
    train_docs, held_docs = split_documents(load_documents())
    train_docs = _truncate(train_docs, plan.max_train_chars)
    held_docs = _truncate(held_docs, plan.max_heldout_chars)
    if tokenizer is None:
        tokenizer = train_tokenizer((d.text for d in train_docs), plan.vocab_size)
    train = np.asarray(encode_documents(tokenizer, [d.text for d in train_docs]), dtype=np.int64)
    held = np.asarray(encode_documents(tokenizer, [d.text for d in held_docs]), dtype=np.int64)
    return TokenData(tokenizer, train, held, plan.seq_len, sum(len(d.text) for d in held_docs))
