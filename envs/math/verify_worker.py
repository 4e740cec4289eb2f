"""The child process behind :func:`agentgym.envs.math.verify.check_answer` in threads.

Reads one JSON request a line (``{"answer", "reference", "timeout"}``) on
stdin and writes one :class:`~agentgym.envs.math.verify.Verdict` a line on
stdout. It runs the check in its own main thread, where math-verify's
``signal.alarm`` time limit works. It starts by writing ``{"ready": true}``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict

__all__ = ["main"]


def main() -> None:
    """Serve requests until stdin closes."""
    import math_verify  # noqa: F401 - imported before "ready", so the first answer is quick

    from agentgym.envs.math.verify import check_answer_here

    # Replies go to a private copy of stdout; anything a library prints goes to stderr.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        verdict = check_answer_here(request["answer"], request["reference"], request["timeout"])
        out.write(json.dumps(asdict(verdict)) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
