"""schemathesis hooks for ``test_service_schema.py`` (loaded through ``SCHEMATHESIS_HOOKS``).

Two rules of ``POST /run`` are not written in its JSON Schema: two file names
may not collide, one a file and the other below it (``"a"`` and ``"a/b"``),
and no file may be the code's own (``main.py`` for python, ``main.sh`` for
bash). The service refuses such a body with a 422 that its schema lists; this
hook keeps schemathesis from sending them as schema-valid bodies it expects
to be run.
"""

from __future__ import annotations

import posixpath
from typing import Any

import schemathesis

from agentgym.sandbox.protocol import CODE_FILES


def _collide(names: list[str]) -> bool:
    normal = {posixpath.normpath(name) for name in names}
    return any(posixpath.dirname(name) and any(
        parent in normal for parent in _parents(name)) for name in normal)


def _parents(name: str) -> list[str]:
    parents = []
    while (name := posixpath.dirname(name)) not in ("", "/"):
        parents.append(name)
    return parents


@schemathesis.hook
def filter_body(context: Any, body: Any) -> bool:
    """Drop bodies whose file names collide (see this module's docstring)."""
    files = body.get("files") if isinstance(body, dict) else None
    if not isinstance(files, dict):
        return True
    names = [name for name in files if isinstance(name, str)]
    code_file = CODE_FILES.get(body.get("language", "python"))
    return not (_collide(names) or code_file in {posixpath.normpath(name) for name in names})
