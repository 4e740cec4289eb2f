"""A trained reward model as a reward: an episode's conversation scored, in this process or behind a server.

    reward = RewardModelReward("runs/rm/final")           # the model of `agentgym train --trainer rm`, here
    reward = RewardModelReward("http://127.0.0.1:8200")   # or behind `python -m agentgym.rewards.server`
    reward.score([{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "4"}])  # -> 1.73
    env = RewardModelWrapper(agentgym.make("Math-LLM-v0"), reward)   # any env, its reward the model's
    env = agentgym.make("rm:Math-LLM-v0", reward_model="runs/rm/final")   # the same, by id (--env rm:ID)

``rm:ENV_ID`` is an env id wherever one is taken (a source of the registry, its entry point
:func:`reward_model_env`): ``agentgym train --env rm:Math-LLM-v0 -k reward_model=runs/rm/final``;
``-k reward_model_mode=add`` and ``-k reward_model_scale=S`` set the wrapper's mode and scale, and
every other ``-k`` goes to the env inside.

A conversation is rendered by the reward model's chat template (:func:`conversation_ids`) and
scored by its scalar head at the last token: the same numbers as ``--trainer rm`` computed in
training, where an episode is its conversation up to its last action (:func:`scored_conversation`:
the env's reply to the last action would tell the model the outcome). Scores are raw
Bradley-Terry logits, unbounded; only their differences carry meaning.

In this process the model runs under a lock (env steps of concurrent episodes run in threads).
Behind a server, requests are ``POST /score`` with a timeout and no retry of a request that may
have been served (see :mod:`agentgym.rewards.server`).
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Self, SupportsFloat

import gymnasium as gym

from agentgym.errors import AgentGymError, ConfigError, JudgeError, MissingDependencyError

__all__ = ["RewardModelReward", "RewardModelWrapper", "conversation_ids", "reward_model_env", "scored_conversation"]

_Messages = Sequence[Mapping[str, str]]


def scored_conversation(messages: _Messages) -> list[dict[str, str]]:
    """The messages up to and including the last assistant message (role and content only): what a
    reward model is asked about an episode. The env's reply after the last action is left out."""
    plain = [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]
    last = max((i for i, m in enumerate(plain) if m["role"] == "assistant"), default=len(plain) - 1)
    return plain[:last + 1]


def conversation_ids(tokenizer: Any, messages: _Messages) -> list[int]:
    """``messages`` rendered by ``tokenizer``'s chat template, as token ids (no generation prompt)."""
    return list(tokenizer.apply_chat_template([dict(m) for m in messages], tokenize=True, return_dict=False))


class _LocalModel:
    """A reward model folder loaded in this process: token ids in, scores out."""

    def __init__(self, folder: str, device: str) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.torch = torch
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(folder)
            model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=torch.float32)
        except (OSError, ValueError) as error:  # no such folder or hub id, or not a model transformers reads
            reason = _load_failure(folder, error)
            raise ConfigError(f"Cannot load the reward model {folder!r} ({reason}). Give the final/ folder of "
                              "`agentgym train --trainer rm`, a hub id, or http://HOST:PORT of "
                              "`python -m agentgym.rewards.server`.") from error
        if model.config.num_labels != 1:
            raise ConfigError(f"{folder!r} is not a reward model: its head has {model.config.num_labels} labels, "
                              "a reward model one (train one with `agentgym train --trainer rm`).")
        chosen = device if device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        self.device = torch.device(chosen)
        self.model = model.to(self.device).eval()
        self.pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
        self.lock = threading.Lock()

    def score(self, conversations: Sequence[_Messages], batch_size: int) -> list[float]:
        from agentgym.trainers.engines.base import right_padded

        ids = [conversation_ids(self.tokenizer, messages) for messages in conversations]
        scores: list[float] = []
        with self.lock, self.torch.no_grad():
            for start in range(0, len(ids), batch_size):
                input_ids, mask = right_padded(ids[start:start + batch_size], self.pad_id)
                logits = self.model(input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device)).logits
                scores += [float(x) for x in logits.squeeze(-1).float().cpu()]
        return scores


def _load_failure(folder: str, error: Exception) -> str:
    """Why ``folder`` did not load, in a few words: a path that is not there and cannot be a hub id
    (``runs/rm/final``) is said so, rather than by the hub's complaint about its name."""
    if not Path(folder).exists() and not _HUB_ID.match(folder):
        return "there is no such folder"
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


#: a hub model's id: NAME or OWNER/NAME
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


class RewardModelReward:
    """Scores conversations with a reward model: a folder (or hub id) loaded here, or a server's URL.

    Args:
        model: a reward model folder (``OUT/final`` of ``--trainer rm``) or hub id, run in this process;
            or ``http://HOST:PORT`` of ``python -m agentgym.rewards.server``.
        api_key: the server's bearer token, if it wants one.
        timeout: seconds a server request may take.
        device: where a model in this process runs: auto (the GPU when torch sees one), cpu, cuda.
        batch_size: conversations per forward pass.
    """

    def __init__(self, model: str, *, api_key: str | None = None, timeout: float = 60.0, device: str = "auto",
                 batch_size: int = 8) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigError(f"model must be a reward model folder or a server URL, got {model!r}.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be an integer >= 1, got {batch_size!r}.")
        self.model = model
        self.url = model.rstrip("/") if model.startswith(("http://", "https://")) else None
        self.timeout = float(timeout)
        self.batch_size = batch_size
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._local = None if self.url else _LocalModel(model, device)
        self._client: Any = None
        self._lock = threading.Lock()

    def score(self, messages: _Messages) -> float:
        """The score of one conversation (a list of ``{"role", "content"}`` messages), as it is given."""
        return self.score_many([messages])[0]

    def __call__(self, messages: _Messages) -> float:
        return self.score(messages)

    def score_many(self, conversations: Sequence[_Messages]) -> list[float]:
        """The scores of several conversations, in order."""
        conversations = [[{"role": str(m["role"]), "content": str(m["content"])} for m in c] for c in conversations]
        if self._local is not None:
            return self._local.score(conversations, self.batch_size)
        return self._post(conversations)

    async def ascore(self, messages: _Messages) -> float:
        """:meth:`score` from asyncio (in a worker thread: the model's forward pass, or the request)."""
        return await asyncio.to_thread(self.score, messages)

    def _post(self, conversations: list[list[dict[str, str]]]) -> list[float]:
        httpx = _httpx()
        with self._lock:  # one client, shared by the threads that score (it is thread-safe)
            if self._client is None:
                self._client = httpx.Client(timeout=self.timeout, headers=self._headers, trust_env=False)
            client = self._client
        try:
            response = client.post(f"{self.url}/score", json={"conversations": conversations})
        except httpx.HTTPError as error:
            raise JudgeError(f"The reward model server at {self.url} did not answer: {type(error).__name__}: "
                             f"{error}. Is it up (python -m agentgym.rewards.server)?") from error
        if response.status_code != 200:
            raise JudgeError(f"The reward model server at {self.url} refused the request ({response.status_code}): "
                             f"{response.text[:300]}")
        scores = response.json().get("scores")
        if not isinstance(scores, list) or len(scores) != len(conversations):
            raise JudgeError(f"The reward model server at {self.url} answered without a score for each conversation.")
        return [float(score) for score in scores]

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _httpx() -> Any:
    # httpx2: the HTTP client the rollout extra already has (openai's; agentgym's policies use it too).
    try:
        import httpx2
    except ImportError as error:
        raise MissingDependencyError("RewardModelReward talks to its server with httpx2, which is not installed: "
                                     f"{MissingDependencyError.install_hint('rollout', 'httpx2')}.") from error
    return httpx2


class RewardModelWrapper(gym.Wrapper):
    """Any text env, its episodes scored by a reward model when they end.

    The wrapper keeps the conversation as the rollout manager does (the instructions, then each
    observation and action) and, on the step that ends the episode (terminated or truncated by the
    env), scores it up to the last action. ``mode="replace"``: that step's reward is ``scale`` times
    the score and every other step's is 0; ``"add"``: the env's rewards are kept and the scaled score
    is added at the end. ``info["reward_model_score"]`` holds the score; the env's own ``success``
    is left as it is. An episode the rollout manager cuts short (its turn budget, the context limit)
    never ends in the env: the manager calls :meth:`cut_short`, which scores it then.
    """

    def __init__(self, env: gym.Env, reward: RewardModelReward | str, *,
                 mode: Literal["replace", "add"] = "replace", scale: float = 1.0) -> None:
        super().__init__(env)
        if mode not in ("replace", "add"):
            raise ConfigError(f"mode must be replace or add, got {mode!r}.")
        self.reward = reward if isinstance(reward, RewardModelReward) else RewardModelReward(reward)
        self._owns_reward = not isinstance(reward, RewardModelReward)  # built here, so closed here
        self.mode, self.scale = mode, float(scale)
        self.messages: list[dict[str, str]] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        self.messages = [{"role": "system", "content": str(self.env.get_wrapper_attr("instructions"))},
                         {"role": "user", "content": str(observation)}]
        return observation, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.messages.append({"role": "assistant", "content": str(action)})
        if terminated or truncated:
            score = self.reward.score(self.messages)
            info = {**info, "reward_model_score": score}
            reward = self.scale * score + (float(reward) if self.mode == "add" else 0.0)
        else:
            self.messages.append({"role": "user", "content": str(observation)})
            reward = float(reward) if self.mode == "add" else 0.0
        return observation, reward, terminated, truncated, info

    def cut_short(self) -> float:
        """The episode was stopped by the rollout manager (its turn budget, the context limit), so
        ``step`` never saw it end: its score now, scaled, the reward to add to its last turn."""
        score = self.reward.score(scored_conversation(self.messages))
        return self.scale * score

    def close(self) -> None:
        if self._owns_reward:
            self.reward.close()
        super().close()


def reward_model_env(env: str, reward_model: str | None = None, *,
                     reward_model_mode: Literal["replace", "add"] = "replace", reward_model_scale: float = 1.0,
                     **env_kwargs: Any) -> RewardModelWrapper:
    """``env`` (an id, made with ``env_kwargs``) scored by ``reward_model`` (a folder or a server's URL): the
    entry point of ``rm:ENV_ID`` ids. The arguments of the wrapper are named ``reward_model_*`` so they
    cannot take one of the env's own. The episodes of a process share one :class:`RewardModelReward`
    of each model (loaded once)."""
    import agentgym
    from agentgym.registry import env_argument_error

    if not isinstance(reward_model, str) or not reward_model.strip():
        raise ConfigError(f"rm:{env} needs its reward model: -k reward_model=FOLDER (the final/ of "
                          "`agentgym train --trainer rm`) or -k reward_model=http://HOST:PORT "
                          f"(`python -m agentgym.rewards.server`), got {reward_model!r}.")
    if reward_model_mode not in ("replace", "add"):
        raise ConfigError(f"reward_model_mode must be replace (the model's score is the only reward) or add "
                          f"(it is added to the env's), got {reward_model_mode!r}.")
    if isinstance(reward_model_scale, bool) or not isinstance(reward_model_scale, int | float):
        raise ConfigError(f"reward_model_scale must be a number, got {reward_model_scale!r}.")
    try:
        inner = agentgym.make(env, **env_kwargs)
    except AgentGymError:
        raise  # an unknown id says what was meant; the env's own errors name the fix
    except (TypeError, ValueError) as exc:  # an argument the env does not take, a value it cannot use
        raise env_argument_error(env, env_kwargs, exc) from exc
    with _SHARED_LOCK:
        reward = _SHARED.get(reward_model)
        if reward is None:
            try:
                reward = _SHARED[reward_model] = RewardModelReward(reward_model)
            except BaseException:
                inner.close()
                raise
    return RewardModelWrapper(inner, reward, mode=reward_model_mode, scale=reward_model_scale)


#: the rewards of :func:`reward_model_env`, by model, for the life of the process
_SHARED: dict[str, RewardModelReward] = {}
_SHARED_LOCK = threading.Lock()
