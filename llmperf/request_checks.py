"""A request's fields, checked in one place: `generate`, the engine and the server all call `check`.

A request is a prompt and five numbers: how many tokens to generate, the
sampling temperature, top-k, top-p and a seed. Each has a range outside of
which the loop would fail, or worse, go on with garbage:

- a NaN or infinite temperature turns every probability into NaN, and the
  sampler draws some token from them without a word (it does not read the
  values back: that would make the host wait for the device);
- a top-p of 0 or less keeps no token, and one above 1, or NaN, is not a
  probability;
- a seed outside 64 bits overflows `torch.Generator.manual_seed`;
- a prompt and an answer longer than the KV cache overflow it;
- a token id outside the vocabulary indexes past the embedding table.

So every caller checks the same way, before any work, and gets the same
message: `InvalidParameter`, a ValueError whose `param` names the field as
OpenAI's API spells it ("prompt", "max_tokens", "temperature", "top_k",
"top_p", "seed"). The messages name quantities in words, so that they read the
same from `generate(max_new_tokens=...)` as from a JSON body's "max_tokens".

No torch here: the server's protocol code imports this without the model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real

TEMPERATURE_MAX = 2.0  # OpenAI's documented range is 0..2; 0 means greedy
SEED_MIN, SEED_MAX = -2**63, 2**63 - 1  # what torch.Generator.manual_seed takes as a signed 64-bit seed


class InvalidParameter(ValueError):
    """A generation parameter out of its range. `param` is the field's name in OpenAI's API."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


def shown(value, width: int = 40) -> str:
    """`value` as a message quotes it: its repr, cut to `width` characters (a field can hold a megabyte)."""
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def whole_number(value, param: str, what: str) -> int:
    """`value` as an int if it is a whole number (not a bool, not a float), else InvalidParameter."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise InvalidParameter(param, f"{what} must be a whole number, got {shown(value)} ({type(value).__name__}).")
    return int(value)


def token_ids(prompt, param: str = "prompt") -> list[int]:
    """`prompt` as a list of Python ints, or InvalidParameter if it is not a sequence of whole numbers (a string,
    a float, a bool and a nested list are not token ids). Their range is `check`'s to judge."""
    if isinstance(prompt, (str, bytes)) or not isinstance(prompt, Sequence):
        raise InvalidParameter(param, f"The prompt must be a list of token ids (whole numbers), got "
                               f"{shown(prompt)} ({type(prompt).__name__}).")
    for i, t in enumerate(prompt):
        if isinstance(t, bool) or not isinstance(t, Integral):
            raise InvalidParameter(param, f"The prompt must be a list of token ids (whole numbers); item {i} is "
                                   f"{shown(t)} ({type(t).__name__}).")
    return [int(t) for t in prompt]


def check_text(text: str, param: str) -> None:
    """Refuse text that is not valid Unicode: a lone UTF-16 surrogate (JSON's "\\ud800" escape decodes to one)
    cannot be encoded as UTF-8, so no tokenizer can read it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidParameter(param, f"The text holds a lone UTF-16 surrogate ({text[e.start]!r} at character "
                               f"{e.start}), which is not a character. Send valid Unicode.") from None


def check(*, prompt_tokens: int, lowest_id: int, highest_id: int, max_tokens, temperature=0.0, top_k=None,
          top_p=1.0, seed=None, context: int, vocab_size: int, prompt_param: str = "prompt",
          length_param: str = "max_tokens") -> tuple[int, float, int | None, float, int | None]:
    """Check one request against a `context` of positions and a vocabulary of `vocab_size` ids.

    The prompt is given by its length and its lowest and highest token ids (all that is checked of it). Returns
    (max_tokens, temperature, top_k, top_p, seed) as plain Python numbers; raises InvalidParameter, naming the
    first field that is wrong, in the order prompt, max_tokens, temperature, top_k, top_p, seed. `prompt_param` and
    `length_param` are the names the caller's fields go by ("messages", "max_completion_tokens").
    """
    if prompt_tokens < 1:
        raise InvalidParameter(prompt_param, "The prompt is empty: the model needs at least one token to "
                               "condition on.")
    if lowest_id < 0 or highest_id >= vocab_size:
        raise InvalidParameter(prompt_param, f"Token ids must lie in [0, {vocab_size}); got ids from {lowest_id} "
                               f"to {highest_id}.")
    if prompt_tokens >= context:
        raise InvalidParameter(prompt_param, f"The prompt is {prompt_tokens} tokens long, which leaves no room for "
                               f"an answer in the context of {context} tokens. Shorten the prompt.")
    max_tokens = whole_number(max_tokens, length_param, "The number of new tokens asked for")
    if max_tokens < 1:
        raise InvalidParameter(length_param, f"The number of new tokens asked for must be at least 1, got "
                               f"{max_tokens}.")
    if prompt_tokens + max_tokens > context:
        raise InvalidParameter(length_param, f"The prompt ({prompt_tokens} tokens) and the {max_tokens} new tokens "
                               f"asked for come to {prompt_tokens + max_tokens} tokens, more than the context of "
                               f"{context} tokens. Shorten the prompt or ask for at most {context - prompt_tokens} "
                               "new tokens.")
    if isinstance(temperature, bool) or not isinstance(temperature, Real) or not (
            math.isfinite(temperature) and 0 <= temperature <= TEMPERATURE_MAX):
        raise InvalidParameter("temperature", f"temperature must be a number from 0 (greedy) to "
                               f"{TEMPERATURE_MAX:g}, got {shown(temperature)}.")
    if top_k is not None:
        top_k = whole_number(top_k, "top_k", "top_k")
        if top_k < 1:
            raise InvalidParameter("top_k", f"top_k must be at least 1 (or left out: every token), got {top_k}.")
    if isinstance(top_p, bool) or not isinstance(top_p, Real) or not (math.isfinite(top_p) and 0 < top_p <= 1):
        raise InvalidParameter("top_p", f"top_p must be a number above 0 and at most 1 (1: every token), got "
                               f"{shown(top_p)}.")
    if seed is not None:
        seed = whole_number(seed, "seed", "seed")
        if not SEED_MIN <= seed <= SEED_MAX:
            raise InvalidParameter("seed", f"seed must fit in a signed 64-bit integer, [-2**63, 2**63 - 1], "
                                   f"got {seed}.")
    return max_tokens, float(temperature), top_k, float(top_p), seed
