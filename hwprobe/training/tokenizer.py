"""A small byte-level BPE tokenizer trained on the corpus's training split.

Byte-level, so any text encodes without unknown tokens; one special token,
``<|endoftext|>``, separates documents and serves as BOS, EOS and padding.
Saved as a plain ``PreTrainedTokenizerFast`` directory (``tokenizer.json`` +
``tokenizer_config.json``).  Training is deterministic for a given text
(the ``tokenizers`` BPE trainer breaks count ties by pair order).
"""

from __future__ import annotations

from collections.abc import Iterable

END_OF_TEXT = "<|endoftext|>"


def train_tokenizer(texts: Iterable[str], vocab_size: int):
    """A ``PreTrainedTokenizerFast`` with ``vocab_size`` entries (256 bytes, merges, 1 special)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=END_OF_TEXT,
        eos_token=END_OF_TEXT,
        pad_token=END_OF_TEXT,
        unk_token=None,
        model_max_length=1 << 20,
    )


def encode_documents(tokenizer, texts: Iterable[str]) -> list[int]:
    """One token stream: each document followed by ``<|endoftext|>``."""
    eos = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    stream: list[int] = []
    for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
        stream.extend(ids)
        stream.append(eos)
    return stream
