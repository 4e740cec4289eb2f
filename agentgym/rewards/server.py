"""A reward model behind HTTP, for trainers and envs in other processes.

    python -m agentgym.rewards.server --model runs/rm/final             # http://127.0.0.1:8200
    python -m agentgym.rewards.server --model runs/rm/final --host 0.0.0.0 --api-key KEY

Routes:

* ``POST /score``: ``{"conversations": [[{"role": ..., "content": ...}, ...], ...]}`` ->
  ``{"scores": [...], "model": ...}``, a score a conversation in order, each rendered by the
  model's chat template as it is given (:class:`~agentgym.rewards.model.RewardModelReward`
  is the client, and its ``score`` what the model computes in process). At most
  :data:`MAX_CONVERSATIONS` a request; a malformed body is a 422.
* ``GET /health``: ``{"status": "ok", "model": ...}``.

With ``--api-key`` every route wants ``Authorization: Bearer KEY``; binding anything but
loopback without one is refused. The model runs in a worker thread, never on the event loop,
one forward pass at a time.
"""

from __future__ import annotations

import argparse
import hmac
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from agentgym.asgi import ServerThread
from agentgym.errors import ConfigError, MissingDependencyError
from agentgym.net import is_loopback
from agentgym.rewards.model import RewardModelReward

__all__ = ["DEFAULT_PORT", "MAX_CONVERSATIONS", "ChatMessage", "RewardModelServer", "ScoreReply", "ScoreRequest", "create_app",
           "main"]

DEFAULT_PORT = 8200
#: conversations one request may hold
MAX_CONVERSATIONS = 256


class ChatMessage(BaseModel):
    role: str
    content: str


class ScoreRequest(BaseModel):
    conversations: list[list[ChatMessage]] = Field(min_length=1, max_length=MAX_CONVERSATIONS)


class ScoreReply(BaseModel):
    scores: list[float]
    model: str


def _require_packages() -> None:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as error:
        raise MissingDependencyError("The reward model server needs FastAPI and uvicorn: "
                                     f"{MissingDependencyError.install_hint('serve')}.") from error


def create_app(reward: RewardModelReward, *, api_key: str | None = None) -> Any:
    """The FastAPI app serving ``reward`` (a model in this process)."""
    _require_packages()
    from fastapi import Depends, FastAPI, Header, HTTPException
    from fastapi.concurrency import run_in_threadpool

    if reward.url is not None:
        raise ConfigError("The reward model server serves a model folder, not another server's URL.")

    def authorised(authorization: str = Header(default="")) -> None:
        if api_key is not None and not hmac.compare_digest(authorization.encode(), f"Bearer {api_key}".encode()):
            raise HTTPException(status_code=401, detail="Send 'Authorization: Bearer KEY' with the server's key.")

    app = FastAPI(title="agentgym reward model", dependencies=[Depends(authorised)])

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok", "model": reward.model}

    @app.post("/score")
    async def score(body: ScoreRequest) -> ScoreReply:
        conversations = [[message.model_dump() for message in conversation] for conversation in body.conversations]
        scores = await run_in_threadpool(reward.score_many, conversations)
        return ScoreReply(scores=scores, model=reward.model)

    return app


class RewardModelServer(ServerThread):
    """The server in a thread of this process, on a loopback port; a context manager (tests, notebooks).

        with RewardModelServer(RewardModelReward("runs/rm/final")) as server:
            RewardModelReward(server.url).score(messages)
    """

    def __init__(self, reward: RewardModelReward, *, port: int | None = None, api_key: str | None = None,
                 host: str = "127.0.0.1") -> None:
        _require_packages()
        import uvicorn

        from agentgym.serve.launch import free_port

        self.port = port or free_port(host)
        config = uvicorn.Config(create_app(reward, api_key=api_key), host=host, port=self.port, log_level="warning",
                                access_log=False, lifespan="off", timeout_graceful_shutdown=2)
        super().__init__(config, name="agentgym-reward-model", what="The reward model server",
                         url=f"http://{host}:{self.port}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agentgym.rewards.server``: serve a reward model until Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m agentgym.rewards.server", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="A reward model folder (OUT/final of --trainer rm) or hub id.")
    parser.add_argument("--host", default="127.0.0.1", help="Interface to bind (anything but loopback needs "
                                                             "--api-key).")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="TCP port.")
    parser.add_argument("--api-key", default=None, help="Require 'Authorization: Bearer KEY'.")
    parser.add_argument("--device", default="auto", help="auto (the GPU when torch sees one), cpu or cuda.")
    args = parser.parse_args(argv)
    if not 1 <= args.port <= 65535:
        parser.error(f"--port must be between 1 and 65535, got {args.port}.")
    if not is_loopback(args.host) and not args.api_key:
        parser.error(f"refusing to bind {args.host} without --api-key: anyone who can reach it could use it.")
    _require_packages()
    import uvicorn

    try:
        reward = RewardModelReward(args.model, device=args.device)
    except (ConfigError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"Serving the reward model {args.model} at http://{args.host}:{args.port}", file=sys.stderr)
    uvicorn.run(create_app(reward, api_key=args.api_key), host=args.host, port=args.port, log_level="warning",
                access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
