"""The pinned training corpus: Python standard-library source, shipped xz-compressed.

The text is a fixed list of modules from CPython 3.11's standard library
(``corpus/manifest.json`` names each file by its path relative to the stdlib
folder, with its sha256).  Shipping the text itself (``corpus/stdlib.txt.xz``)
makes training identical on every machine whatever Python it runs; the
manifest lets ``python -m hwprobe.training.corpus build`` rebuild that file
from a local stdlib and fail, naming the file, where the local copy differs.

Documents are whole source files.  The held-out split is by file (a file is
held out when the first byte of sha256(path) is below ``HELDOUT_BYTE_BELOW``),
so held-out loss measures text the model never saw, not overlapping windows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from simmoe.atomicio import write_bytes_atomic

CORPUS_DIR = Path(__file__).parent / "corpus"
MANIFEST_PATH = CORPUS_DIR / "manifest.json"
TEXT_PATH = CORPUS_DIR / "stdlib.txt.xz"

# Packages taken whole (their test folders excepted), in addition to every
# top-level module but those in ``_SKIP_TOP_LEVEL``.
_PACKAGES = ("asyncio", "collections", "concurrent", "email", "http", "importlib",
             "json", "logging", "unittest", "urllib")
# Generated, machine-specific or not prose-like source.
_SKIP_TOP_LEVEL = ("_sysconfigdata", "antigravity.py", "this.py", "__hello__.py")
# About 1 file in 16 is held out.
HELDOUT_BYTE_BELOW = 16
# Separates documents in the shipped text; never occurs in the sources.
_SEPARATOR = "\n\x00\x1e FILE "


class CorpusError(Exception):
    """The shipped corpus or the local stdlib does not match the manifest."""


@dataclass(frozen=True)
class Document:
    path: str   # relative to the stdlib folder, e.g. "asyncio/tasks.py"
    text: str

    @property
    def heldout(self) -> bool:
        return is_heldout(self.path)


def is_heldout(path: str) -> bool:
    return hashlib.sha256(path.encode()).digest()[0] < HELDOUT_BYTE_BELOW


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def select_stdlib_files(stdlib: Path) -> list[str]:
    """The fixed selection rule, applied to a stdlib folder (used once, to write the manifest)."""
    chosen = []
    for p in sorted(stdlib.glob("*.py")):
        if not p.name.startswith(_SKIP_TOP_LEVEL):
            chosen.append(p.name)
    for pkg in _PACKAGES:
        for p in sorted((stdlib / pkg).rglob("*.py")):
            rel = p.relative_to(stdlib).as_posix()
            if "/test" not in "/" + rel.split("/", 1)[1]:
                chosen.append(rel)
    return chosen


def _pack(docs: list[Document]) -> bytes:
    return "".join(f"{_SEPARATOR}{d.path}\n{d.text}" for d in docs).encode("utf-8")


def _unpack(data: bytes) -> list[Document]:
    docs = []
    for chunk in data.decode("utf-8").split(_SEPARATOR)[1:]:
        path, _, text = chunk.partition("\n")
        docs.append(Document(path, text))
    return docs


def load_manifest(path: Path = MANIFEST_PATH) -> dict:
    if not path.is_file():
        raise CorpusError(f"corpus manifest missing: {path}")
    return json.loads(path.read_text())


def load_documents(text_path: Path = TEXT_PATH, manifest_path: Path = MANIFEST_PATH) -> list[Document]:
    """The shipped corpus, checked against the manifest (whole-file and per-document sha256)."""
    manifest = load_manifest(manifest_path)
    if not text_path.is_file():
        raise CorpusError(f"corpus text missing: {text_path} "
                          "(rebuild it: python -m hwprobe.training.corpus build)")
    packed = lzma.decompress(text_path.read_bytes())
    if _sha256(packed) != manifest["packed_sha256"]:
        raise CorpusError(f"{text_path} does not match {manifest_path} (sha256 of the text differs)")
    docs = _unpack(packed)
    expected = [(f["path"], f["sha256"]) for f in manifest["files"]]
    got = [(d.path, _sha256(d.text.encode())) for d in docs]
    if got != expected:
        raise CorpusError(f"{text_path}: documents differ from {manifest_path}")
    return docs


def split_documents(docs: list[Document]) -> tuple[list[Document], list[Document]]:
    """(train, heldout), each in manifest order."""
    return [d for d in docs if not d.heldout], [d for d in docs if d.heldout]


def _write_atomic(path: Path, data: bytes) -> None:
    write_bytes_atomic(path, data)


def build(stdlib: Path, *, write_manifest: bool = False) -> Path:
    """Write ``stdlib.txt.xz`` from a local stdlib.

    With ``write_manifest`` the selection rule is applied afresh and the
    manifest rewritten (done once, when the corpus was pinned); otherwise the
    files the manifest names are read and every sha256 checked.
    """
    if write_manifest:
        paths = select_stdlib_files(stdlib)
        expected = None
    else:
        manifest = load_manifest()
        paths = [f["path"] for f in manifest["files"]]
        expected = {f["path"]: f["sha256"] for f in manifest["files"]}
    docs = []
    for rel in paths:
        f = stdlib / rel
        if not f.is_file():
            raise CorpusError(f"{f}: missing from this Python's standard library")
        raw = f.read_bytes()
        if expected is not None and _sha256(raw) != expected[rel]:
            raise CorpusError(f"{f}: differs from the pinned corpus (sha256 mismatch); "
                              f"the manifest was made from Python {manifest['python']}")
        docs.append(Document(rel, raw.decode("utf-8")))
    packed = _pack(docs)
    CORPUS_DIR.mkdir(parents=True, exist_ok=True)
    _write_atomic(TEXT_PATH, lzma.compress(packed, preset=9 | lzma.PRESET_EXTREME))
    if write_manifest:
        manifest = {
            "python": sys.version.split()[0],
            "rule": "top-level *.py except " + ", ".join(_SKIP_TOP_LEVEL)
                    + "; whole packages " + ", ".join(_PACKAGES) + " without test folders",
            "heldout_rule": f"sha256(path)[0] < {HELDOUT_BYTE_BELOW}",
            "packed_sha256": _sha256(packed),
            "files": [{"path": d.path, "sha256": _sha256(d.text.encode()),
                       "chars": len(d.text), "heldout": d.heldout} for d in docs],
        }
        _write_atomic(MANIFEST_PATH, (json.dumps(manifest, indent=1) + "\n").encode())
    return TEXT_PATH


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hwprobe.training.corpus",
                                 description="Check or rebuild the pinned stdlib corpus.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="rebuild stdlib.txt.xz from this Python's stdlib (hash-checked)")
    b.add_argument("--stdlib", type=Path, default=Path(sysconfig.get_paths()["stdlib"]))
    b.add_argument("--write-manifest", action="store_true",
                   help="re-pin: apply the selection rule and rewrite the manifest")
    sub.add_parser("check", help="verify the shipped text against the manifest; print sizes")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "build":
            print(build(args.stdlib, write_manifest=args.write_manifest))
        docs = load_documents()
    except CorpusError as exc:
        print(f"corpus: error: {exc}", file=sys.stderr)
        return 2
    train, held = split_documents(docs)
    print(f"{len(docs)} files, {sum(len(d.text) for d in docs)} chars; train {len(train)} files, "
          f"held-out {len(held)} files; {TEXT_PATH.name} {TEXT_PATH.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
