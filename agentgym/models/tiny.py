"""A tiny causal LM built locally: no model hub, no downloads.

``resolve_model("tiny")`` (:mod:`agentgym.models.resolve`) returns a folder holding a randomly initialised
Llama-config model and a byte-level BPE tokenizer trained here (with
``tokenizers``) on text the built-in games produce, with a ChatML chat
template; a game grid is one token per cell. It is built once into the cache (``$AGENTGYM_CACHE`` or
``~/.cache/agentgym``) and reused. Sizes: ``tiny`` (hidden 128, 2 layers),
or ``tiny-<hidden>x<layers>``, e.g. ``tiny-256x4``. Heads are always 64 wide:
vLLM's CPU attention rejects a head_dim of 16.

Why Llama: transformers 5.x reloads a folder whose config says ``qwen2`` with
Qwen's own tokenizer class, which changes the token ids.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agentgym.errors import ConfigError

__all__ = [
    "build_tiny_model",
    "cache_root",
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "tiny_spec",
    "TinySpec",
]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_NAME = re.compile(r"^tiny(?:-(\d+)x(\d+))?$")
_HEAD_DIM = 64
# Characters the tokenizer never merges with a neighbour: symbols (but the tag characters of
# <answer>...</answer>) and capitals not starting a word. A game's grid row "#_PX_#" is then
# six tokens, one per cell, so a cell's column is its position: with BPE merging rows into
# tokens ("#_#__#" was one token) a small model from scratch could not tell where the player is.
_ONE_TOKEN_EACH = r"[^\sA-Za-z0-9<>/|']|[A-Z](?![a-z])"
_FORMAT_VERSION = 3  # bump when the recipe changes, so old caches are not reused


@dataclass(frozen=True, slots=True)
class TinySpec:
    """Shape of a tiny model."""

    hidden_size: int = 128
    num_layers: int = 2
    vocab_size: int = 1024
    max_positions: int = 4096
    seed: int = 0

    @property
    def folder_name(self) -> str:
        return (f"tiny-h{self.hidden_size}-l{self.num_layers}-v{self.vocab_size}"
                f"-p{self.max_positions}-s{self.seed}-f{_FORMAT_VERSION}")


def tiny_spec(name: str) -> TinySpec | None:
    """The spec a ``tiny`` name asks for, or None when ``name`` is not a tiny name."""
    match = _NAME.match(name)
    if match is None:
        return None
    if match.group(1) is None:
        return TinySpec()
    hidden, layers = int(match.group(1)), int(match.group(2))
    if hidden % _HEAD_DIM or not 64 <= hidden <= 4096 or not 1 <= layers <= 64:
        raise ConfigError(
            f"{name!r}: the hidden size must be a multiple of 64 between 64 and 4096 and "
            f"layers between 1 and 64, e.g. 'tiny-256x4'."
        )
    return TinySpec(hidden_size=hidden, num_layers=layers)


def cache_root() -> Path:
    """agentgym's cache folder: ``$AGENTGYM_CACHE``, or ``~/.cache/agentgym`` when unset or empty."""
    return Path(os.environ.get("AGENTGYM_CACHE") or Path.home() / ".cache" / "agentgym")


def build_tiny_model(folder: Path, spec: TinySpec = TinySpec()) -> Path:
    """Train the tokenizer, initialise the model, save both into ``folder``.

    Written to a temporary folder and renamed, so a crash or a second process
    building at the same time never leaves a half-written model behind.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=folder.parent))
    try:
        tokenizer = _train_tokenizer(spec.vocab_size)
        tokenizer.save_pretrained(staging)
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=spec.hidden_size,
            intermediate_size=spec.hidden_size * 4,
            num_hidden_layers=spec.num_layers,
            num_attention_heads=spec.hidden_size // _HEAD_DIM,
            num_key_value_heads=spec.hidden_size // _HEAD_DIM,
            head_dim=_HEAD_DIM,
            max_position_embeddings=spec.max_positions,
            tie_word_embeddings=True,
            bos_token_id=tokenizer.convert_tokens_to_ids("<|im_start|>"),
            eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
            pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        )
        torch.manual_seed(spec.seed)
        model = LlamaForCausalLM(config)
        model.generation_config.eos_token_id = config.eos_token_id
        model.generation_config.pad_token_id = config.pad_token_id
        _save_quietly(model, staging)
        try:
            staging.rename(folder)
        except OSError:  # another process finished first: keep its copy
            if not (folder / "config.json").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _save_quietly(model, folder: Path) -> None:
    """``save_pretrained`` without its "Writing model shards" bar: a model built on first use would
    otherwise print it into the output of whichever command asked for ``tiny`` (a one-line error too)."""
    from transformers.utils import logging

    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        model.save_pretrained(folder)
    finally:
        if shown:
            logging.enable_progress_bar()


def _train_tokenizer(vocab_size: int):  # -> PreTrainedTokenizerFast
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = _corpus()
    # A rare symbol (√, a box on a target) would stay several byte tokens: each non-ASCII
    # character the games write is a token of its own, inside the vocabulary size.
    symbols = sorted({char for text in corpus for char in text if not char.isascii()})
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_ONE_TOKEN_EACH), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(symbols),
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    tokenizer.add_tokens([AddedToken(char, normalized=False) for char in symbols])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


def _corpus() -> list[str]:
    """Text the tokenizer learns from: every game's instructions and a few episodes."""
    import numpy as np

    import agentgym

    texts = []
    rng = np.random.default_rng(0)
    for info in agentgym.list_envs(family="games"):
        env = agentgym.make(info.id).unwrapped
        texts.append(env.instructions)
        for seed in range(20):
            texts.append(env.reset(seed=seed)[0])
            for _ in range(3):
                action = env.random_action(rng)
                texts.append(action)
                observation, _, terminated, truncated, _ = env.step(action)
                texts.append(observation)
                if terminated or truncated:
                    break
    return texts
