"""The engine's public API (every module's __all__ is checked in tests/test_exports.py)."""

from __future__ import annotations


def test_the_engine_api() -> None:
    from agentgym.serve import engine, launch, process

    assert set(engine.__all__) == {"BaseEngine", "Engine", "EngineConfig", "Generation", "WeightUpdate",
                                   "cancel_sequences", "resolve_device"}
    assert set(process.__all__) == {"EngineProcess"}
    assert set(launch.__all__) == {"BuiltinServer", "default_torch_threads", "free_port", "serve_builtin",
                                   "stop_when_parent_exits", "wait_for_health", "PARENT_PID_ENV"}
