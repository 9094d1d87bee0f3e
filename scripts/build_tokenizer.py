"""Rebuild the shipped tokenizer and prompt corpus from Python's own standard library.

The training text is the docstrings and comments of the standard library of the
Python that runs this script, so it exists on every machine without a download.
Outputs (committed, so nobody needs to run this):
  streamlab/assets/tokenizer.json  byte-level BPE, 8192 tokens, <|endoftext|> = 0
  streamlab/assets/prompts.jsonl   prompts cut from the same text, for demos,
                                   benchmarks and scenarios

Run: python scripts/build_tokenizer.py
"""

from __future__ import annotations

import ast
import io
import json
import re
import sys
import sysconfig
import tokenize
from pathlib import Path

from tokenizers import ByteLevelBPETokenizer

VOCAB_SIZE = 8192
EOS = "<|endoftext|>"
ASSETS = Path(__file__).resolve().parent.parent / "streamlab" / "assets"
SKIP_DIRS = {"test", "tests", "idlelib", "lib2to3", "site-packages", "__pycache__", "turtledemo"}
MAX_CORPUS_CHARS = 12_000_000


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in root.rglob("*.py") if not SKIP_DIRS.intersection(p.relative_to(root).parts)]
    return sorted(files)


def docstrings(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    return [d for n in nodes if (d := ast.get_docstring(n))]


def comments(source: str) -> list[str]:
    out: list[str] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                text = tok.string.lstrip("#").strip()
                if len(text) > 20:
                    out.append(text)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return out


def corpus() -> list[str]:
    texts: list[str] = []
    total = 0
    for path in stdlib_files():
        source = path.read_text(encoding="utf-8", errors="replace")
        for text in docstrings(source) + comments(source):
            texts.append(text)
            total += len(text)
            if total >= MAX_CORPUS_CHARS:
                return texts
    return texts


def prompts(texts: list[str], count: int = 256) -> list[str]:
    """Single-paragraph prose of 60-400 characters, deduplicated, in corpus order."""
    seen: set[str] = set()
    out: list[str] = []
    for text in texts:
        for para in re.split(r"\n\s*\n", text):
            flat = " ".join(para.split())
            if 60 <= len(flat) <= 400 and flat.isascii() and flat[0].isupper() and flat not in seen:
                seen.add(flat)
                out.append(flat)
    step = max(1, len(out) // count)
    return out[::step][:count]


def main() -> int:
    texts = corpus()
    print(f"corpus: {len(texts)} texts, {sum(map(len, texts)):,} chars from Python {sys.version.split()[0]}")
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(texts, vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=[EOS], show_progress=False)
    ASSETS.mkdir(parents=True, exist_ok=True)
    tok.save(str(ASSETS / "tokenizer.json"))
    chosen = prompts(texts)
    with open(ASSETS / "prompts.jsonl", "w", encoding="utf-8") as f:
        for text in chosen:
            f.write(json.dumps({"text": text}) + "\n")
    print(f"wrote tokenizer ({tok.get_vocab_size()} tokens) and {len(chosen)} prompts to {ASSETS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
