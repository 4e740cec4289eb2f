"""Render a conversation into token ids turn by turn, without retokenizing.

The env manager keeps each episode as token ids: the prompt, then for every
turn the ids the model sampled and the ids of the env's reply. The reply's ids
are the chat template's *delta*: render a dummy conversation with and without
one more user message and keep the difference. So the ids the trainer sees are
exactly the ids the model saw, and the model's own tokens are never re-encoded
(re-encoding text can merge tokens differently and shift the logprobs).

For a ChatML template the pieces are::

    prompt:  <|im_start|>system\\n...<|im_end|>\\n<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n
    sampled: ...<|im_end|>                       (mask 1)
    close:   \\n                                  (mask 0; <|im_end|> too if the model did not write it)
    reply:   <|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n   (mask 0)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from agentgym.errors import ConfigError
from agentgym.rollout.tokenizers import tokenizer_id

__all__ = ["ChatRenderer"]

_PROBE_USER, _PROBE_ASSISTANT = "Probe question.", "Probe answer."
#: Replies kept rendered, and the longest one kept. Envs repeat their replies (an invalid
#: move's note, a board seen again, the same level across a group), so most turns hit; the
#: bounds keep an env that never repeats itself, or writes huge replies, from growing memory
#: (at most about 2,048 x 2,048 characters and their ids).
REPLY_CACHE_SIZE, REPLY_CACHE_MAX_CHARS = 2048, 2048
#: Awkward texts a splice must encode exactly as the template does before it is trusted.
_SPLICE_SAMPLES = ("", " x ", "\nLevel:\n#P_O#\n", "héllo  wörld\t", "<answer>Up</answer>", "12 || 3")
#: System prompts kept spliced (a run has one or a few: the env's instructions).
_SYSTEM_CACHE_SIZE = 16


class _Bounded(OrderedDict):
    """A least-recently-used mapping of at most ``size`` entries; safe to share between threads
    (an asynchronous run renders in its rollout thread)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self._lock = threading.Lock()

    def get_recent(self, key: Any) -> Any:
        with self._lock:
            value = self.get(key)
            if value is not None:
                self.move_to_end(key)
            return value

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            self[key] = value
            if len(self) > self.size:
                self.popitem(last=False)


class ChatRenderer:
    """Token ids of a conversation's pieces under a tokenizer's chat template."""

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError(
                "The tokenizer has no chat template; agentgym needs one to render turns. "
                "Use an instruct/chat model or set tokenizer.chat_template."
            )
        self.tokenizer = tokenizer
        self.eos_id: int = tokenizer.eos_token_id
        #: what the rows this renderer makes record as their ``tokenizer``
        self.tokenizer_id = str(tokenizer_id(tokenizer))
        # A fast tokenizer's Rust core encodes one text without the batch machinery
        # (a thread-pool hop per call) that ``tokenizer.encode`` goes through.
        self._rust = getattr(tokenizer, "backend_tokenizer", None)
        self._base = self._render(self._probe(with_reply=False), generation_prompt=False)
        self._turn_suffix = self._after_last_eos(self._base)
        self._splice = self._splice_template()
        self._replies: _Bounded = _Bounded(REPLY_CACHE_SIZE)
        self._systems: _Bounded = _Bounded(_SYSTEM_CACHE_SIZE)

    @classmethod
    def for_model(cls, model: str) -> ChatRenderer:
        """The renderer of ``model``'s tokenizer: 'tiny', a local folder or a hub id.

        Imports ``transformers`` only when called, so the rollout core stays quick to import.
        """
        from transformers import AutoTokenizer

        from agentgym.models import resolve_model

        try:
            tokenizer = AutoTokenizer.from_pretrained(resolve_model(model))
        except OSError as exc:  # not a folder, not on the hub, or the hub out of reach
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigError(f"found no tokenizer for model {model!r}: give 'tiny', a local model folder or a "
                              f"hub id (with a network, or already in the cache). ({first_line})") from exc
        return cls(tokenizer)

    def _render(self, messages: list[dict[str, str]], *, generation_prompt: bool) -> list[int]:
        # Render, then encode as apply_chat_template(tokenize=True) does (no special
        # tokens added), through the quicker single-text path.
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=generation_prompt, tokenize=False
        )
        return self._encode(text)

    @staticmethod
    def _probe(*, with_reply: bool, reply: str = "") -> list[dict[str, str]]:
        messages = [
            {"role": "system", "content": "Probe."},
            {"role": "user", "content": _PROBE_USER},
            {"role": "assistant", "content": _PROBE_ASSISTANT},
        ]
        if with_reply:
            messages.append({"role": "user", "content": reply})
        return messages

    def _after_last_eos(self, ids: list[int]) -> list[int]:
        if self.eos_id not in ids:
            raise ConfigError("The chat template never writes the tokenizer's eos token after a turn.")
        last = len(ids) - 1 - ids[::-1].index(self.eos_id)
        return ids[last + 1 :]

    def prompt_ids(self, system: str, user: str) -> list[int]:
        """The first prompt: instructions, the task, the assistant header.

        The instructions are rendered once per distinct system prompt (a run's are fixed);
        each episode then encodes only its own task (see :meth:`_system_splice`).
        """
        splice = self._systems.get_recent(system)
        if splice is None:
            splice = self._system_splice(system)
            self._systems.put(system, splice)
        if splice is False:
            return self._render_prompt(system, user)
        head_ids, before, after = splice
        return head_ids + self._encode(before + user + after)

    def _render_prompt(self, system: str, user: str) -> list[int]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return self._render(messages, generation_prompt=True)

    def _system_splice(self, system: str) -> tuple[list[int], str, str] | bool:
        """How to encode a prompt under ``system`` by splicing the task's text, or False.

        As :meth:`_splice_template` does for replies: the text before the task is cut at its
        last special token (nothing merges across one), the ids before the cut (the system
        prompt, the bulk of the tokens) are kept, and the splice is used only if it gives the
        template's very ids on awkward tasks.
        """
        split = self._split_at(lambda text: [{"role": "system", "content": system},
                                             {"role": "user", "content": text}])
        if split is None:
            return False
        head_ids, before, after = split
        for sample in _SPLICE_SAMPLES:
            if head_ids + self._encode(before + sample + after) != self._render_prompt(system, sample):
                return False
        return split

    def _split_at(self, messages: Any) -> tuple[list[int], str, str] | None:
        """The template's text around the one place ``messages(text)`` puts ``text``: the ids of what
        comes before its last special token (nothing merges across one), the text from there to the
        place, and the text after it. None when the template does not show the text once."""
        marker = "\x00agentgym-splice\x00"
        rendered = self.tokenizer.apply_chat_template(messages(marker), add_generation_prompt=True, tokenize=False)
        if rendered.count(marker) != 1:
            return None
        before, after = rendered.split(marker)
        cut = max((before.rfind(token) for token in self._special_texts()), default=-1)
        head, before = (before[:cut], before[cut:]) if cut > 0 else ("", before)
        return (self._encode(head) if head else []), before, after

    def close_turn_ids(self, sampled: list[int]) -> list[int]:
        """Ids that end an assistant turn after ``sampled`` (eos if missing, then the suffix)."""
        ending = [] if sampled and sampled[-1] == self.eos_id else [self.eos_id]
        return ending + self._turn_suffix

    def _splice_template(self) -> tuple[str, str, list[int]] | None:
        """How to encode a reply by splicing text, if that reproduces the template exactly.

        Rendering the jinja template for every reply costs ~100 us; encoding the
        text around the reply costs a fraction of that. The text before the reply
        is cut at its last special token (a tokenizer never merges across one), so
        only the reply's own turn is encoded; the ids before the cut are the
        ``head``. Used only if it gives the very same ids as the template on
        awkward samples. Returns (text before the reply, after it, the ids of
        the reply-less conversation past the head: what a reply's encoding starts with).
        """
        split = self._split_at(lambda text: self._probe(with_reply=True, reply=text))
        if split is None:
            return None
        head_ids, before, after = split
        if head_ids != self._base[: len(head_ids)]:
            return None
        for sample in _SPLICE_SAMPLES:
            exact = self._render(self._probe(with_reply=True, reply=sample), generation_prompt=True)
            if head_ids + self._encode(before + sample + after) != exact:
                return None
        return before, after, self._base[len(head_ids) :]

    def _special_texts(self) -> list[str]:
        """The text of every added (special) token, e.g. ``<|im_start|>``."""
        added = getattr(self.tokenizer, "added_tokens_decoder", None) or {}
        return [str(getattr(token, "content", token)) for token in added.values()]

    def _encode(self, text: str) -> list[int]:
        if self._rust is not None:
            return self._rust.encode(text, add_special_tokens=False).ids
        return self.tokenizer.encode(text, add_special_tokens=False)

    def reply_ids(self, observation: str) -> list[int]:
        """Ids of the env's reply as the next user turn, up to the assistant header
        (each distinct reply is encoded once, within the cache's bounds)."""
        cached = self._replies.get_recent(observation)
        if cached is not None:
            return list(cached)
        ids = self._reply_ids(observation)
        if len(observation) <= REPLY_CACHE_MAX_CHARS:
            self._replies.put(observation, tuple(ids))
        return ids

    def _reply_ids(self, observation: str) -> list[int]:
        if self._splice is not None:
            before, after, base = self._splice
            full = self._encode(before + observation + after)
        else:
            full = self._render(self._probe(with_reply=True, reply=observation), generation_prompt=True)
            base = self._base
        if full[: len(base)] != base:
            raise ConfigError(
                "The chat template renders earlier turns differently once a turn is added "
                "(e.g. it strips reasoning from past turns); token-in/token-out needs a "
                "template that only appends. Use --chat-mode for such models."
            )
        return full[len(base) :]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)
