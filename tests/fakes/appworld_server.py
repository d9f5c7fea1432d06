"""`FakeAppWorldServer`: a stand-in for `appworld serve environment`, for tests without AppWorld or its data.

It speaks the documented HTTP API (answers wrapped as `{"output": ...}`, FastAPI-style `{"detail": ...}`
errors, one world at a time) over three scripted tasks. `/execute` recognises a few literal code strings
and `apis.supervisor.complete_task(...)` with a string-literal answer (matched by a regular expression);
it never runs anything. `/evaluate` returns AppWorld's report shape {success, difficulty, num_tests,
passes, failures}.

    with FakeAppWorldServer() as fake:
        env = AppWorldEnv(base_url=fake.url, split_tasks={"dev": list(FAKE_TASKS)})

Test knobs: `fail[path] = status` answers that path with an error; `stall[path] = seconds` delays it;
`requests` records (method, path, body) of every request.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SUPERVISOR = {
    "first_name": "Joyce",
    "last_name": "Weaver",
    "email": "joyce-weav@gmail.com",
    "phone_number": "3155673041",
}


@dataclass(frozen=True)
class FakeTask:
    task_id: str
    instruction: str
    answer: str | None
    """The expected answer of a question task; None for a task that asks for a change."""


FAKE_TASKS = {
    task.task_id: task
    for task in (
        FakeTask("a1b2c3d_1", "What is the title of the song I liked last on Spotify?", "Blue Train"),
        FakeTask("a1b2c3d_2", "How many unread emails do I have from my manager?", "3"),
        FakeTask("e4f5a6b_1", "Decline all pending Venmo payment requests from Ann.", None),
    )
}
FAILED = 'Execution failed. Traceback:\n  File "<python-input>", line 1, in <module>\n'
SNIPPETS = {
    "print('hello')": "hello",
    "print(apis.api_docs.show_app_descriptions())": '[{"name": "spotify"}, {"name": "venmo"}]',
    "print(1 / 0)": FAILED + "ZeroDivisionError: division by zero",
    "print('x' * 5000)": "x" * 5000,
}
DECLINE = "apis.venmo.decline_payment_requests(sender='Ann')"
_COMPLETE = re.compile(
    r"""^apis\.supervisor\.complete_task\(\s*(?:answer\s*=\s*(?P<q>["'])(?P<answer>[^"'\\]*)(?P=q)\s*)?\)$"""
)


@dataclass
class _World:
    task: FakeTask
    completed: bool = False
    answer: str | None = None
    declined: bool = False
    executions: list[str] = field(default_factory=list)


class FakeAppWorldServer:
    """The fake server on a free loopback port, served from a daemon thread; `stop()` shuts it down."""

    def __init__(self) -> None:
        self.fail: dict[str, int] = {}
        self.stall: dict[str, float] = {}
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self.world: _World | None = None
        self._saved: dict[str, _World] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.fake = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="fake-appworld",
            daemon=True,
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeAppWorldServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes stalled handlers
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeAppWorldServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the API -----------------------------------------------------------------------------------

    def handle(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        """(status, JSON answer) of one request; the HTTP plumbing lives in `_Handler`."""
        with self._lock:
            self.requests.append((method, path, body))
        if path in self.stall:
            self._stopping.wait(self.stall[path])
        if path in self.fail:
            return self.fail[path], {"detail": f"scripted failure of {path}"}
        with self._lock:
            if method == "GET":
                return self._get(path)
            return self._post(path, body)

    def _get(self, path: str) -> tuple[int, Any]:
        if path == "/":
            return 200, {"message": "Welcome to AppWorld Server! (fake)"}
        if path.startswith("/tasks/"):
            task = FAKE_TASKS.get(path.removeprefix("/tasks/"))
            if task is None:
                return 500, "Internal Server Error"
            return 200, {"output": _task_dict(task)}
        if path == "/api_docs":
            return 200, {"spotify": {}, "gmail": {}, "venmo": {}}
        return 404, {"detail": "Not Found"}

    def _post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        if path == "/initialize":
            task = FAKE_TASKS.get(body.get("task_id", ""))
            if task is None:
                return 500, "Internal Server Error"
            self.world = _World(task)
            return 200, {"output": _task_dict(task)}
        if path == "/close_all":
            self.world = None
            return 200, {"output": None}
        if self.world is None:
            return 400, {"detail": "AppWorld has not been initialized."}
        if body.get("task_id") != self.world.task.task_id:
            detail = (
                f"The active task world is {self.world.task.task_id}. "
                f"But you have requested to operate on {body.get('task_id')}"
            )
            return 400, {"detail": detail}
        return self._world_call(path, body, self.world)

    def _world_call(self, path: str, body: dict[str, Any], world: _World) -> tuple[int, Any]:
        if path == "/execute":
            return 200, {"output": self._execute(world, str(body.get("code", "")))}
        if path == "/task_completed":
            return 200, {"output": world.completed}
        if path == "/evaluate":
            report = _report(world)
            if body.get("report"):  # AppWorld's printable report instead of the dict
                return 200, {"output": f"Num Passed Tests : {len(report['passes'])}"}
            return 200, {"output": report}
        if path == "/close":
            self.world = None
            return 200, {"output": None}
        if path == "/save_state":
            saved = replace(world, executions=list(world.executions))
            self._saved[str(body.get("state_id"))] = saved
            return 200, {"output": None}
        if path == "/load_state":
            saved = self._saved.get(str(body.get("state_id")))
            if saved is None:
                return 500, "Internal Server Error"
            self.world = replace(saved, executions=list(saved.executions))
            return 200, {"output": None}
        return 404, {"detail": "Not Found"}

    @staticmethod
    def _execute(world: _World, code: str) -> str:
        """The scripted output of a known snippet; anything else 'fails' as AppWorld would report it."""
        world.executions.append(code)
        code = code.strip()
        if world.completed:
            return FAILED + "Exception: The task has already been completed."
        if code in SNIPPETS:
            return SNIPPETS[code]
        if code == DECLINE:
            world.declined = True
            return "Execution successful."
        match = _COMPLETE.match(code)
        if match:
            world.completed, world.answer = True, match.group("answer")
            return "Execution successful."
        return FAILED + "NameError: the fake AppWorld server knows no such snippet (it runs no code)"


def _task_dict(task: FakeTask) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "instruction": task.instruction,
        "supervisor": dict(SUPERVISOR),
        "datetime": "2023-05-18T12:00:00",
    }


def _report(world: _World) -> dict[str, Any]:
    """AppWorld's `TestTracker.to_dict()` shape for three scripted tests."""
    task = world.task
    if task.answer is not None:
        goal = ("assert the answer matches", world.answer == task.answer)
    else:
        goal = ("assert Ann's payment requests are declined", world.declined)
    tests = [
        ("assert the task was marked complete with apis.supervisor.complete_task", world.completed),
        goal,
        ("assert no other database changes", task.answer is None or not world.declined),
    ]
    passes = [{"requirement": r, "label": "no_op_fail"} for r, ok in tests if ok]
    failures = [
        {"requirement": r, "trace": f"```python\n{r}\n```\n----------\nAssertionError", "label": "no_op_fail"}
        for r, ok in tests
        if not ok
    ]
    return {
        "success": not failures,
        "difficulty": 1,
        "num_tests": len(tests),
        "passes": passes,
        "failures": failures,
    }


class _Handler(BaseHTTPRequestHandler):
    """JSON in, JSON out; an unparsable body is a 422 as FastAPI answers it."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(*self.server.fake.handle("GET", self.path, {}))  # type: ignore[attr-defined]

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._answer(422, {"detail": "body is not JSON"})
            return
        if not isinstance(body, dict):
            self._answer(422, {"detail": "body must be a JSON object"})
            return
        self._answer(*self.server.fake.handle("POST", self.path, body))  # type: ignore[attr-defined]

    def _answer(self, status: int, payload: Any) -> None:
        if isinstance(payload, str):
            data, kind = payload.encode(), "text/plain"
        else:
            data, kind = json.dumps(payload).encode(), "application/json"
        try:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence request logs
        return
