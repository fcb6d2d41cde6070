"""Synthetic text of a given length in tokens, for servers that take text only (the chat endpoint), counted
with a tokenizer, as AIPerf and guidellm size theirs.

Random token ids (`workloads.prompts`) are as long on any server, but only /completions takes ids; a chat message
is text, and how many tokens a text is depends on who counts. So the text is cut from a corpus and counted with a
tokenizer (`load_tokenizer`): a Hugging Face `tokenizer.json` (or a folder holding one), a GGUF file's, or by
default SmolLM2's, read from the metadata of the GGUF file the package already finds (`llmperf.tokenizer`: `gguf`
and `tokenizers` only, no torch). A prompt is then exactly as long as asked for that tokenizer; another model's
tokenizer counts it otherwise, and a chat template adds tokens of its own, which is why a run records both
counts, the client's and the server's `usage`.

The corpus, llmperf/bench/data/corpus.txt (15 KB, about 4,000 of SmolLM2's tokens), is Shakespeare's Sonnets 1 to
25 (first printed in 1609, in the public domain), in the spelling of the copy vLLM's benchmark ships
(benchmarks/sonnet.txt); AIPerf also draws its synthetic prompts from Shakespeare. Prose of any kind would do:
what matters is that it tokenizes as ordinary text does, which random ids decoded to text do not.

`Corpus.text(n)`: the corpus's tokens from a random place (wrapping round at its end), n of them, decoded. Text
decoded from a window of tokens can encode to a token more or fewer (a word cut at the window's edge joins
differently), so it is encoded again and trimmed or extended until it counts n, as vLLM's
`gen_prompt_decode_to_target_len` does, at most `TRIES` times (a miss by a token is then kept, and counted).

`Corpus.blocks`: a Mooncake trace names a prompt's blocks of 512 tokens by hash ids, so that two requests carrying
the same first k ids share their first k·512 tokens, which a prefix cache can reuse. Each id gets a block of its
own, drawn from the id, the same in every prompt that carries it.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "data" / "corpus.txt"
TRIES = 4  # re-encodings to bring a decoded window to its length
BLOCK = 512  # tokens per hash id in a Mooncake trace


@dataclass(frozen=True)
class Sizer:
    """A tokenizer as a load generator needs it: `encode` (text to ids, no special tokens added), `decode`, and
    `name`, which the run's JSON records ("SmolLM2-135M-Instruct (GGUF metadata)", or the file read)."""

    name: str
    encode: Callable[[str], list[int]]
    decode: Callable[[Sequence[int]], str]


def load_tokenizer(path: str | None = None) -> Sizer:
    """The tokenizer at `path`: a tokenizer.json, a folder holding one (a Hugging Face model's), or a .gguf file;
    None: SmolLM2's, from its bundled GGUF (read once per process: parsing the file's metadata takes seconds).
    ValueError saying what was found instead, naming the path."""
    if path is None:
        return _smollm2()
    where = Path(path)
    if where.is_dir():
        if not (where / "tokenizer.json").is_file():
            raise ValueError(f"--tokenizer {path}: this folder holds no tokenizer.json (a Hugging Face model's "
                             "folder has one; give the folder, or the file itself).")
        where = where / "tokenizer.json"
    elif not where.is_file():
        raise ValueError(f"--tokenizer {path}: no such file or folder. Give a tokenizer.json, a Hugging Face model "
                         "folder holding one, or a .gguf file.")
    if where.suffix.lower() == ".gguf":
        return _gguf(str(where), f"{where} (GGUF metadata)")
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(where))
    except Exception as err:  # the Rust library raises its own Exception subclass for any unreadable file
        raise ValueError(f"--tokenizer {path}: not a tokenizer.json the `tokenizers` library reads ({err}).") from None
    return Sizer(str(where), lambda text: tok.encode(text, add_special_tokens=False).ids, tok.decode)


@functools.lru_cache(maxsize=1)
def _smollm2() -> Sizer:
    from ..tokenizer import smollm2_gguf_path

    try:
        path = smollm2_gguf_path()
    except (ModuleNotFoundError, FileNotFoundError) as err:
        raise ValueError(f"Synthetic text is counted with a tokenizer, by default SmolLM2's, which is not here: "
                         f"{err}\nOr give one: --tokenizer PATH (a tokenizer.json).") from None
    return _gguf(path, "SmolLM2-135M-Instruct (its GGUF file's metadata)")


def _gguf(path: str, name: str) -> Sizer:
    from ..tokenizer import Tokenizer

    try:
        tok = Tokenizer.from_gguf(path)
    except (KeyError, ValueError, OSError) as err:
        raise ValueError(f"--tokenizer {path}: no tokenizer could be read from this GGUF file ({err!r}).") from None
    return Sizer(name, tok.encode, tok.decode)


class Corpus:
    """The corpus's text as token ids of one tokenizer, and prompts cut from it (the module's docstring)."""

    def __init__(self, sizer: Sizer, text: str | None = None):
        self.sizer = sizer
        self.ids = sizer.encode(CORPUS.read_text(encoding="utf-8") if text is None else text)
        if len(self.ids) < 2:
            raise ValueError("The corpus must be at least two tokens long.")
        self._blocks: dict[tuple[int, int], list[int]] = {}

    def window(self, n: int, rng: random.Random) -> list[int]:
        """n of the corpus's token ids in a row, from a random place, wrapping round at its end."""
        start = rng.randrange(len(self.ids))
        return [self.ids[(start + i) % len(self.ids)] for i in range(n)]

    def text(self, n: int, rng: random.Random) -> str:
        """Text that encodes to n tokens (to within a token where `TRIES` re-encodings did not settle)."""
        if n < 1:
            raise ValueError(f"A prompt is at least 1 token long, got {n}.")
        ids = self.window(n, rng)
        for _ in range(TRIES):
            text = self.sizer.decode(ids)
            again = self.sizer.encode(text)
            if len(again) == n:
                break
            ids = again[:n] if len(again) > n else again + self.window(n - len(again), rng)
        return text

    def blocks(self, hash_ids: Sequence[int], n: int, rng: random.Random, seed: int = 0) -> str:
        """A prompt of n tokens whose k-th block of `BLOCK` tokens is hash_ids[k]'s (drawn from the id and `seed`,
        the same wherever the id appears), cut at n; past the last block, tokens of its own from `rng`."""
        ids: list[int] = []
        for h in hash_ids:
            if (seed, h) not in self._blocks:
                self._blocks[seed, h] = self.window(BLOCK, random.Random(f"{seed}/{h}"))
            ids += self._blocks[seed, h]
        ids = ids[:n] + (self.window(n - len(ids), rng) if n > len(ids) else [])
        return self.sizer.decode(ids)
