"""The test harness: the program the code env runs in the sandbox, once per submission.

Standard library only, and runs on any Python 3.8+: the sandbox's interpreter
is not agentgym's. It reads one JSON payload on stdin::

    {"nonce": "...", "code": "<the submission>", "mode": "function" | "stdio",
     "entry_point": "two_sum", "setup": "", "test_timeout": 2.0, "budget": 10.0,
     "report_limit": 60000,
     "tests": [{"kind": "call", "input": [[2, 7], 9], "show": true}, ...]}

and prints one line, ``MARKER + nonce + " " + JSON``, the report.

Each test runs in a forked child: the child executes the submission (so its
top-level code runs once per test, with fresh globals), then the test, and
writes its result to a private pipe; its stdout and stderr go to another pipe
and its stdin is the test's input. So a test that loops, crashes, exits or
floods stdout ends that test only (killed after ``test_timeout``; all tests
share ``budget`` seconds), and the submission never writes to the harness's
own stdout, where the report goes.

The harness never holds an expected value except inside ``assert`` tests: a
child reports what the code produced (``repr`` of the returned value, or the
normalised stdout, with a SHA-256 of each for outputs too long to send back)
and the env compares outside the sandbox.
"""

from __future__ import annotations

import builtins
import json
import linecache
import os
import select
import signal
import sys
import time
import traceback

try:  # the interpreter's own SHA-256: importing hashlib loads OpenSSL (~10 ms a run)
    from _sha256 import sha256
except ImportError:
    try:
        from _sha2 import sha256  # Python 3.12+
    except ImportError:
        from hashlib import sha256

__all__ = ["FILENAME", "MARKER", "canonical", "main", "normalize_output"]

#: Start of the report line; the run's nonce follows it.
MARKER = "@@agentgym-harness-report@@"
#: The file name the submission runs as (it appears in tracebacks).
FILENAME = "solution.py"
_RESULT_CAP = 4 << 20  # bytes kept of a child's result message
_OUTPUT_CAP = 1 << 20  # bytes a child may print before it is stopped
_TEXT_KEEP = 20_000  # characters of a returned value's repr or an error sent back
_POLL_SECONDS = 0.002
_QUIET_SECONDS = 0.05  # a silent child is checked for having exited this often
_FORK_RETRIES = (0.01, 0.05, 0.2)
# Shortening steps for the report's text fields until it fits report_limit.
_FIELD_CAPS = (8000, 2000, 500, 120, 0)


def normalize_output(text: str) -> str:
    """Stdout as compared: its whitespace-separated tokens, joined by single spaces.

    Like most judges, the env ignores how the output is spaced and split into lines.
    """
    return " ".join(text.split())


def canonical(value: object) -> object:
    """The form of ``value`` whose ``repr`` is hashed when the value is too long to send back.

    Tuples become lists; dicts and sets become sorted lists of item texts, so
    that equal values hash alike whatever their order. Floats stay exact.
    """
    if isinstance(value, (list, tuple)):
        return [canonical(item) for item in value]
    if isinstance(value, dict):
        pairs = [(repr(canonical(key)), repr(canonical(item))) for key, item in value.items()]
        return ["<dict>", sorted(pairs)]
    if isinstance(value, (set, frozenset)):
        return ["<set>", sorted(repr(canonical(item)) for item in value)]
    return value


def _sha256(text: str) -> str:
    return sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# -- the child: runs the submission and one test ----------------------------------


def _format_error(exc: BaseException) -> str:
    """The exception with only the submission's and the test's frames (not the harness's)."""
    trace = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    frames = [frame for frame in trace.stack if frame.filename in (FILENAME, "<test>")]
    trace.stack = traceback.StackSummary.from_list(frames)
    trace.__cause__ = trace.__context__ = None
    return "".join(trace.format())


def _entry(namespace: dict, name: str):  # -> the callable to test
    function = namespace.get(name)
    if callable(function):
        return function
    # LeetCode-style starter code (APPS call-based problems): class Solution.
    holder = namespace.get("Solution")
    if isinstance(holder, type) and callable(getattr(holder, name, None)):
        return getattr(holder(), name)
    raise NameError(f"Your code does not define a function named {name!r}.")


def _describe_value(value: object) -> dict:
    text = repr(value)
    digest = _sha256(repr(canonical(value)))
    return {"repr": text[:_TEXT_KEEP], "length": len(text), "sha256": digest}


def _run_test(namespace: dict, payload: dict, test: dict) -> dict:
    kind = test["kind"]
    if kind == "stdio":
        return {"status": "ok"}
    if payload.get("setup"):
        setup = compile(payload["setup"], "<setup>", "exec")
        exec(setup, namespace)  # noqa: S102 - the problem's own setup
    if kind == "call":
        value = _entry(namespace, payload["entry_point"])(*test["input"])
    elif kind == "expr":
        value = eval(compile(test["input"], "<test>", "eval"), namespace)
    else:
        try:
            exec(compile(test["input"], "<test>", "exec"), namespace)  # noqa: S102 - an assert test
        except AssertionError:
            return {"status": "failed"}
        return {"status": "ok"}
    return {"status": "ok", "value": _describe_value(value)}


def _stream(fd: int, mode: str):  # -> a text stream on fd
    # The child's own streams on its new fds, open for its whole (short) life.
    return open(fd, mode, encoding="utf-8", errors="replace", closefd=False)


def _child(code: object, payload: dict, test: dict, stdin_fd: int, out_w: int, res_w: int) -> None:
    try:
        os.setpgid(0, 0)  # its own group, so a timeout kills whatever it spawned too
    except OSError:
        pass  # the parent's own setpgid call got there first
    os.dup2(stdin_fd, 0)
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    sys.stdin = sys.__stdin__ = _stream(0, "r")
    sys.stdout = sys.__stdout__ = _stream(1, "w")
    sys.stderr = sys.__stderr__ = _stream(2, "w")
    sys.argv = [FILENAME]
    stdio = payload["mode"] == "stdio"
    namespace = {"__name__": "__main__" if stdio else "solution", "__file__": FILENAME,
                 "__builtins__": builtins}
    try:
        exec(code, namespace)  # noqa: S102 - running the submission is the point
        result = _run_test(namespace, payload, test)
    except SystemExit as exc:
        normal = stdio and exc.code in (None, 0)
        result = {"status": "ok"} if normal else {
            "status": "error", "error": f"The code called exit({exc.code!r})."}
    except BaseException as exc:  # noqa: BLE001 - whatever the submission raises is a result
        try:
            result = {"status": "error", "error": _format_error(exc)[-_TEXT_KEEP:]}
        except BaseException:  # noqa: BLE001 - even its traceback may fail to print
            result = {"status": "error", "error": f"{type(exc).__name__} (unprintable)"}
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # the submission closed or broke its own streams
    try:
        data = json.dumps(result).encode()
    except (TypeError, ValueError, RecursionError, OverflowError):
        data = json.dumps({"status": "error", "error": "The result could not be encoded."}).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(res_w, view):]


# -- the parent: forks a child per test and collects what it did ------------------


def _stdin_fd(text: str) -> int:
    data = text.encode("utf-8", "surrogatepass")
    try:
        fd = os.memfd_create("stdin")
    except (AttributeError, OSError):  # no memfd here: an unlinked file in the work dir
        import tempfile

        fd, path = tempfile.mkstemp(dir=".")
        os.unlink(path)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _collect(pid: int, out_r: int, res_r: int, timeout: float) -> dict:
    """Read the child's output and result until it exits, floods or runs out of time."""
    deadline = time.monotonic() + timeout
    buffers = {out_r: bytearray(), res_r: bytearray()}
    caps = {out_r: _OUTPUT_CAP, res_r: _RESULT_CAP}
    open_fds, stop, exit_code = [out_r, res_r], None, None

    def read(ready: list) -> None:
        nonlocal stop
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.remove(fd)
            elif len(buffers[fd]) + len(chunk) > caps[fd]:
                stop = "output_limit"
            else:
                buffers[fd] += chunk

    while open_fds and stop is None and exit_code is None:
        left = deadline - time.monotonic()
        if left <= 0:
            stop = "timeout"
            break
        ready = select.select(open_fds, [], [], min(left, _QUIET_SECONDS))[0]
        read(ready)
        if not ready:  # quiet: has the child ended while a process it spawned holds the pipes?
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                exit_code = _exit_code(status)
                while open_fds and stop is None:  # what it wrote before it ended
                    ready = select.select(open_fds, [], [], 0)[0]
                    if not ready:
                        break
                    read(ready)
    while stop is None and exit_code is None:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            exit_code = _exit_code(status)
        elif time.monotonic() >= deadline:
            stop = "timeout"
        else:
            time.sleep(_POLL_SECONDS)
    return {"stop": stop, "exit": exit_code, "out": bytes(buffers[out_r]),
            "result": bytes(buffers[res_r])}


def _exit_code(status: int) -> int:
    """os.waitstatus_to_exitcode, which Python 3.8 lacks: the code, or -signal."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _kill(pid: int, reap: bool) -> None:
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, signal.SIGKILL)
        except OSError:
            pass  # already gone, or its group was never made
    if reap:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _fork() -> int:
    """os.fork, retried a few times: the process limit may be briefly reached."""
    for delay in _FORK_RETRIES:
        try:
            return os.fork()
        except BlockingIOError:  # EAGAIN: too many processes right now
            time.sleep(delay)
    return os.fork()


def _run_one(code: object, payload: dict, test: dict, timeout: float) -> dict:
    try:
        stdin_fd = _stdin_fd(test["input"] if test["kind"] == "stdio" else "")
        out_r, out_w = os.pipe()
        res_r, res_w = os.pipe()
        sys.stdout.flush()
        pid = _fork()
    except OSError as exc:
        return {"status": "error", "error": f"The test could not be started: {exc}."}
    if pid == 0:
        try:
            os.close(out_r)
            os.close(res_r)
            _child(code, payload, test, stdin_fd, out_w, res_w)
        finally:
            os._exit(0)
    for fd in (stdin_fd, out_w, res_w):
        os.close(fd)
    try:
        os.setpgid(pid, pid)  # also here: the kill below must not race the child's own call
    except OSError:
        pass
    seen = _collect(pid, out_r, res_r, timeout)
    os.close(out_r)
    os.close(res_r)
    _kill(pid, reap=seen["exit"] is None)
    return _verdict(payload, test, seen, timeout)


def _verdict(payload: dict, test: dict, seen: dict, timeout: float) -> dict:
    output = seen["out"].decode("utf-8", "replace")
    result = {"output": output}
    if seen["stop"] == "timeout":
        return {**result, "status": "timeout", "error": f"Timed out after {timeout:g} s."}
    if seen["stop"] == "output_limit":
        return {**result, "status": "error",
                "error": f"The code printed more than {_OUTPUT_CAP} bytes and was stopped."}
    try:
        message = json.loads(seen["result"].decode("utf-8", "replace"))
    except ValueError:
        code = seen["exit"]
        why = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        if payload["mode"] == "stdio" and code == 0:
            message = {"status": "ok"}  # os._exit(0) after printing: a normal end for a program
        else:
            message = {"status": "error", "error": f"The process ended without a result ({why})."}
    result.update(message)
    if payload["mode"] == "stdio" and result.get("status") == "ok":
        del result["output"]  # the value is the output
        result["value"] = {"repr": output[:_TEXT_KEEP], "length": len(output),
                           "sha256": _sha256(normalize_output(output))}
    return result


# -- the report -------------------------------------------------------------------


def _shorten(results: list, cap: int, shown: list) -> list:
    short = []
    for result, show in zip(results, shown):
        item = {"status": result.get("status")}
        value = result.get("value")
        if value is not None:
            text = value["repr"]
            item["value"] = {**value, "repr": text if len(text) <= cap else text[:cap]}
        if show:
            for key in ("error", "output"):
                if result.get(key):
                    text = result[key]
                    cut = text[:cap // 2] + " [...] " + text[-cap // 2:] if cap else ""
                    item[key] = text if len(text) <= cap else cut
        short.append(item)
    return short


def _emit(nonce: str, report: dict, results: list, shown: list, limit: int) -> None:
    for cap in _FIELD_CAPS:
        report["results"] = _shorten(results, cap, shown)
        line = f"{MARKER}{nonce} {json.dumps(report)}"
        if len(line.encode()) + 2 <= limit or cap == 0:
            break
    sys.stdout.write("\n" + line + "\n")
    sys.stdout.flush()


def main() -> None:
    """Run the payload read from stdin and print the report."""
    payload = json.loads(sys.stdin.read())
    nonce, tests = payload["nonce"], payload["tests"]
    shown = [bool(test.get("show")) for test in tests]
    source = payload["code"]
    try:
        code = compile(source, FILENAME, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as exc:
        error = "".join(traceback.format_exception_only(type(exc), exc))
        _emit(nonce, {"compile_error": error}, [], [], payload["report_limit"])
        return
    # Tracebacks of the submission show its lines; the children inherit this cache.
    linecache.cache[FILENAME] = (len(source), None, source.splitlines(True), FILENAME)
    deadline = time.monotonic() + payload["budget"]
    results = []
    for test in tests:
        left = deadline - time.monotonic()
        if left <= 0.01:
            results.append({"status": "not_run", "error": "Not run: the time budget was spent."})
            continue
        results.append(_run_one(code, payload, test, min(payload["test_timeout"], left)))
    _emit(nonce, {"compile_error": None}, results, shown, payload["report_limit"])


if __name__ == "__main__":
    main()
