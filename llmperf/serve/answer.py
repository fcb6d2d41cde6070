"""One answer as it is generated: token ids in, text out, and the OpenAI-shaped objects that carry it.

Text is what the tokenizer decodes from the answer's ids, special tokens left out (an end-of-sequence token,
or <|im_start|> when `ignore_eos` lets the model go on, has no text), cut before the first stop string. It is
decoded incrementally, as vLLM and TGI do: each token decodes only the few ids since the last whole character,
so a token costs the same at the end of a long answer as at its start. While the answer streams, two kinds of
text are held back, because a later token can still change them:

- a character whose bytes are not all there yet (the decoder shows U+FFFD until they are);
- an ending that could be the start of a stop string: with stop " Paris", a sent " Par" could not be taken
  back when "is" arrives.

Held text waits whole, with the rest of its token's text, so a stream has at most one chunk per token (a
client that counts chunks never counts more than the tokens). The chunks a streaming client joins are exactly
the text of the whole answer, for chat and completions alike, and no chunk ever holds text past a stop string.
"""

from __future__ import annotations

import time
import uuid

from .protocol import Parsed


class Answer:
    """What has been generated for one request, as text, and the chunks and bodies that carry it."""

    def __init__(self, parsed: Parsed, tokenizer, model_name: str):
        self.parsed, self.tokenizer, self.model_name, self.chat = parsed, tokenizer, model_name, parsed.chat
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.ids: list[int] = []  # the answer's tokens that make its text (a stopping token is not one)
        self.n_tokens = 0  # tokens generated for this answer, a stopping token included
        self.text = ""  # the text of ids[:read], which ends on a whole character
        self.prefix, self.read = 0, 0  # ids[prefix:read] decode to the end of `text`: the next decode's context
        self.sent_text = ""  # text already handed to the client: always the start of the final text
        self.stopped = False  # a stop string or a stopping token was reached

    def add(self, token: int) -> str:
        """Take one token; return the text that may be sent now ("" while some is held back)."""
        self.n_tokens += 1
        if token in self.parsed.stop_ids:
            self.stopped = True
            return self._release(final=True)
        self.ids.append(token)
        return self._release(final=False)

    def flush(self) -> str:
        """At the end of the answer, the text still held back (a character whose bytes never completed goes
        out as U+FFFD, as a decoder shows it), so that no generated text is swallowed."""
        return self._release(final=True)

    def _decode(self, final: bool) -> None:
        """Add to `text` the text of the ids since `read`, unless it ends in the middle of a character (then it
        waits for the next token), or `final` (then the unfinished character goes out as U+FFFD)."""
        decode = self.tokenizer.decode
        known = decode(self.ids[self.prefix:self.read], skip_special_tokens=True)
        whole = decode(self.ids[self.prefix:], skip_special_tokens=True)  # starts with `known`
        if whole.endswith("\ufffd") and not final:
            return
        self.text += whole[len(known):]
        self.prefix, self.read = self.read, len(self.ids)

    def _release(self, final: bool) -> str:
        self._decode(final)
        text = self.text
        cut = min((at for at in (text.find(s) for s in self.parsed.stop) if at != -1), default=-1)
        if cut != -1:  # a stop string: the text ends before it, and so does the request
            text, self.stopped, final = text[:cut], True, True
        if not final and self._unsettled(text):
            return ""  # the new text waits, whole, for the token that settles it: at most one chunk per token
        delta = text[len(self.sent_text):]
        self.sent_text += delta
        return delta

    def _unsettled(self, text: str) -> int:
        """How many characters at the end of `text` could be the start of a stop string (the longest such)."""
        return max((next((k for k in range(min(len(s) - 1, len(text)), 0, -1) if text.endswith(s[:k])), 0)
                    for s in self.parsed.stop), default=0)

    def finish_reason(self) -> str:
        return "stop" if self.stopped else "length"

    def usage(self) -> dict:
        p, n = len(self.parsed.prompt_ids), self.n_tokens
        return {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n}

    def _shell(self, kind: str) -> dict:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model_name}

    def chunk(self, delta: str, finish_reason: str | None) -> dict:
        if self.chat:
            choice = {"index": 0, "delta": {"role": "assistant", "content": delta} if delta else {},
                      "finish_reason": finish_reason, "logprobs": None}
            return {**self._shell("chat.completion.chunk"), "choices": [choice]}
        choice = {"index": 0, "text": delta, "finish_reason": finish_reason, "logprobs": None}
        return {**self._shell("text_completion"), "choices": [choice]}

    def usage_chunk(self) -> dict:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._shell(kind), "choices": [], "usage": self.usage()}

    def whole(self) -> dict:
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": self.sent_text},
                      "finish_reason": self.finish_reason(), "logprobs": None}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": self.sent_text, "finish_reason": self.finish_reason(), "logprobs": None}
            kind = "text_completion"
        return {**self._shell(kind), "choices": [choice], "usage": self.usage()}
