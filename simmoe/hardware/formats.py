"""Expert weight formats (``data/formats.toml``): bytes per weight from each storage type's block layout.

A format names the storage type of each expert tensor (gate and up, down,
biases); a type is its block struct, fields × bits, so bits per weight are
computed, never typed in (Q8_0: 16 + 32 · 8 = 272 bits per 32 weights = 8.5).
GGUF formats follow llama.cpp's quantize rules where they matter to experts:
the _M mixes store the down projection of some layers wider (``use_more_bits``),
and a row whose length is not a multiple of the type's block falls back to a
type with 32-weight blocks (DeepSeek-V2-Lite's expert width 1408 under Q4_K is
Q5_0).  :func:`expert_bytes` gives one expert's bytes in a format from the
model catalogue's geometry (docs/models-and-gpus.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from simmoe.hardware.catalogue_io import DATA_DIR, CatalogueError, check_name, integer, read_tables, string

FORMATS_FILE = DATA_DIR / "formats.toml"


@dataclass(frozen=True)
class BlockType:
    """One storage type: ``weights`` weights per block, stored as ``fields`` (name, count, bits each)."""

    key: str
    weights: int
    fields: tuple[tuple[str, int, int], ...]
    source: str
    fallback: str = ""          # the GGUF type used when a row is not a multiple of ``weights``

    @property
    def block_bits(self) -> int:
        return sum(count * bits for _, count, bits in self.fields)

    @property
    def block_bytes(self) -> float:
        return self.block_bits / 8

    @property
    def bits_per_weight(self) -> float:
        return self.block_bits / self.weights

    @property
    def bytes_per_weight(self) -> float:
        return self.block_bits / 8 / self.weights


@dataclass(frozen=True)
class WeightFormat:
    """What a user picks for the experts: the storage type of each expert tensor."""

    key: str
    name: str
    gate_up: BlockType
    down: BlockType
    biases: BlockType
    gguf: bool
    source: str
    down_more_bits: BlockType | None = None
    down_first_eighth_without_imatrix: BlockType | None = None
    fallbacks: tuple[tuple[str, BlockType], ...] = ()   # (type, the type a row it cannot split falls back to)
    last_resort: BlockType | None = None                 # F16, where a fallback cannot split a row either


def use_more_bits(layer: int, n_layers: int) -> bool:
    """llama.cpp's rule for the layers whose ffn_down an _M mix stores wider (src/llama-quant.cpp)."""
    eighth = n_layers // 8
    return layer < eighth or layer >= 7 * n_layers // 8 or (layer - eighth) % 3 == 2


def _block_from_table(key: str, t: object, origin: str) -> BlockType:
    where = f"{origin}: block {key!r}"
    if not isinstance(t, dict):
        raise CatalogueError(f"{where}: must be a table")
    unknown = sorted(set(t) - {"weights", "fields", "source", "fallback"})
    if unknown:
        raise CatalogueError(f"{where}: unknown field {unknown[0]!r}")
    raw = t.get("fields")
    if not isinstance(raw, list) or not raw:
        raise CatalogueError(f"{where}: field 'fields' must be a list of [name, count, bits]")
    fields = []
    for f in raw:
        ok = (isinstance(f, list) and len(f) == 3 and isinstance(f[0], str)
              and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in f[1:]))
        if not ok:
            raise CatalogueError(f"{where}: each field is [name, count > 0, bits > 0], got {f!r}")
        fields.append((f[0], f[1], f[2]))
    fallback = t.get("fallback", "")
    if not isinstance(fallback, str):
        raise CatalogueError(f"{where}: field 'fallback' must be a block name")
    return BlockType(key, integer(t, "weights", where), tuple(fields), string(t, "source", where), fallback)


def _format_from_table(key: str, t: object, blocks: dict[str, BlockType], origin: str) -> WeightFormat:
    where = f"{origin}: format {key!r}"
    if not isinstance(t, dict):
        raise CatalogueError(f"{where}: must be a table")
    optional = ("down_more_bits", "down_first_eighth_without_imatrix")
    unknown = sorted(set(t) - {"name", "gate_up", "down", "biases", "gguf", "source", *optional})
    if unknown:
        raise CatalogueError(f"{where}: unknown field {unknown[0]!r}")

    def block(name: str) -> BlockType:
        b = string(t, name, where)
        if b not in blocks:
            raise CatalogueError(f"{where}: field {name!r} names an unknown block {b!r}; known: {', '.join(blocks)}")
        return blocks[b]

    if not isinstance(t.get("gguf"), bool):
        raise CatalogueError(f"{where}: field 'gguf' must be true or false")
    extra = {name: block(name) for name in optional if name in t}
    used = [block("gate_up"), block("down"), *extra.values()]
    fallbacks = tuple((b.key, blocks[b.fallback]) for b in used if b.fallback)
    return WeightFormat(key, string(t, "name", where), block("gate_up"), block("down"), block("biases"),
                        t["gguf"], string(t, "source", where), **extra, fallbacks=fallbacks,
                        last_resort=blocks.get("f16"))


_FORMATS: dict[str, tuple[dict[str, BlockType], dict[str, WeightFormat]]] = {}


def load_format_file(path: str | Path | None = None) -> tuple[dict[str, BlockType], dict[str, WeightFormat]]:
    """The block types and the formats of a format file (the shipped one by default), in file order."""
    p = Path(path) if path is not None else FORMATS_FILE
    if path is None and str(p) in _FORMATS:
        return _FORMATS[str(p)]
    block_tables, format_tables = read_tables(p, "weight format", ("blocks", "formats"))
    blocks = {k: _block_from_table(k, t, str(p)) for k, t in block_tables.items()}
    for b in blocks.values():
        if b.fallback and b.fallback not in blocks:
            raise CatalogueError(f"{p}: block {b.key!r}: fallback {b.fallback!r} is not a block of the file")
    formats = {k: _format_from_table(k, t, blocks, str(p)) for k, t in format_tables.items()}
    if not formats:
        raise CatalogueError(f"{p}: holds no format")
    if path is None:
        _FORMATS[str(p)] = (blocks, formats)
    return blocks, formats


def load_formats(path: str | Path | None = None) -> dict[str, WeightFormat]:
    return load_format_file(path)[1]


def format_names() -> list[str]:
    return list(load_formats())


def load_format(name: str) -> WeightFormat:
    """A shipped weight format by key (``q4_k_m``; case-insensitive); an unknown one is one line."""
    check_name(name, "weight format", CatalogueError)
    formats = load_formats()
    if name.lower() in formats:
        return formats[name.lower()]
    raise CatalogueError(f"unknown weight format {name!r}; known: {', '.join(formats)}")


def tensor_type(fmt: WeightFormat, role: str, layer: int, n_layers: int, row: int, *,
                imatrix: bool = True) -> BlockType:
    """The type ``fmt`` stores one expert tensor in: ``role`` "gate_up" or "down", decoder ``layer`` of
    ``n_layers``, rows of ``row`` weights (a GGUF row not a multiple of the block falls back, as llama.cpp)."""
    if role == "gate_up":
        t = fmt.gate_up
    elif role == "down":
        t = fmt.down
        if fmt.down_more_bits is not None and use_more_bits(layer, n_layers):
            t = fmt.down_more_bits
        if fmt.down_first_eighth_without_imatrix is not None and not imatrix and layer < n_layers // 8:
            t = fmt.down_first_eighth_without_imatrix
    else:
        raise ValueError(f"role must be 'gate_up' or 'down', not {role!r}")
    if not fmt.gguf or row % t.weights == 0:
        return t
    fallback = dict(fmt.fallbacks).get(t.key)
    if fallback is not None and row % fallback.weights == 0:
        return fallback
    if fmt.last_resort is None:
        raise CatalogueError(f"format {fmt.key!r}: a row of {row} weights splits into no block of {t.key} "
                             "or its fallback, and the file describes no f16 block")
    return fmt.last_resort      # llama.cpp's last resort for a row no block divides


def _tensor_bytes(rows: int, row: int, t: BlockType) -> float:
    if row % t.weights:
        raise CatalogueError(f"a row of {row} weights does not split into {t.key} blocks of {t.weights}")
    return rows * (row // t.weights) * t.block_bytes


def expert_bytes(model, fmt: WeightFormat | str, layer: int, *, imatrix: bool = True) -> int:
    """Bytes of one routed expert of decoder ``layer`` of ``model`` (a catalogue ``ModelSpec``) in ``fmt``.

    Gate and up are [width × hidden] (rows of ``hidden`` weights), down is
    [hidden × width]; a dense model's "expert" is its MLP.  Biases, where the
    model has them, are stored in the format's bias type.  ``imatrix``: whether
    a GGUF file was quantized with an importance matrix (IQ4_XS's first layers).
    """
    f = load_format(fmt) if isinstance(fmt, str) else fmt
    if not 0 <= layer < model.decoder_layers:
        raise CatalogueError(f"layer {layer} is outside {model.key}'s {model.decoder_layers} decoder layers")
    width = model.intermediate_size if model.dense else model.moe_intermediate_size
    h, n = model.hidden_size, model.decoder_layers
    gate_up = tensor_type(f, "gate_up", layer, n, h, imatrix=imatrix)
    down = tensor_type(f, "down", layer, n, width, imatrix=imatrix)
    total = 2 * _tensor_bytes(width, h, gate_up) + _tensor_bytes(h, width, down)
    if model.expert_bias and not model.dense:
        total += (2 * width + h) * f.biases.bytes_per_weight
    return int(round(total))


def expert_bytes_by_layer(model, fmt: WeightFormat | str, *, imatrix: bool = True) -> tuple[int, ...]:
    """:func:`expert_bytes` for each MoE layer of ``model``, in trace layer order."""
    return tuple(expert_bytes(model, fmt, layer, imatrix=imatrix) for layer in model.moe_layers)


def mean_expert_bytes(model, fmt: WeightFormat | str, *, imatrix: bool = True) -> float:
    """One expert's bytes in ``fmt`` averaged over the MoE layers (the _M mixes differ by layer)."""
    per_layer = expert_bytes_by_layer(model, fmt, imatrix=imatrix)
    return sum(per_layer) / len(per_layer)
