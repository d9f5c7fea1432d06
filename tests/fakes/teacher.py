"""Scripted fakes for the data-evolution stages: a teacher with canned replies and an oracle engine.

- `OracleEngine` (a fake `Engine`): reads each prompt, finds which known task it is about (by the text
  of its user turns) and replies as an agent that knows the reference solution: one `<tool_call>` per
  reply, then "Done." with the turn's answers. `solve="never"` makes it give up instead; `"alternate"`
  solves every other episode of a task (so GRPO groups hold successes and failures: boundary signals).
  With `explore_unknown`, a request it does not know (unguided exploration, an exploration's follow-up
  turn, a synthesized task) gets one call of each offered tool that needs no argument, then a reply that
  quotes the last result.
- `ScriptedTeacher` (a fake `stages.teacher.Teacher`): reflections and abstractions come from scripted
  lists (cycled; malformed replies welcome) or, by default, from `valid_reflection` / `abstract_from_calls`,
  which build well-formed replies from the prompt; exploration episodes run on an `OracleEngine`.

Neither samples anything: they exist so tests can drive every outcome with the real tool world.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from coevolve.agents.teacher import TeacherSettings
from coevolve.core import ToolCall
from coevolve.envs.base import Task
from coevolve.llm.chat import ChatFormat
from coevolve.llm.engine import Completion, SamplingParams
from coevolve.llm.toolcalls import render_tool_call

GIVE_UP = "I cannot help with that."
_CALLS = re.compile(r"OBSERVED CALLS \(JSON\):\n(.*)\n")
_ASSISTANT = "<|im_start|>assistant\n"
_USER_TURN = re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.DOTALL)
_TOOL_RESULT = re.compile(
    r"<tool_response>(.*?)</tool_response>|<\|im_start\|>tool\n(.*?)<\|im_end\|>", re.DOTALL
)
_NO_ARGUMENT_TOOL = re.compile(r"^(\w+)\((?:\w+\?: [^,)]+(?:, )?)*\)", re.MULTILINE)


class OracleEngine:
    """Fake engine replaying the reference solutions of `tasks` (see the module docstring)."""

    def __init__(
        self,
        tokenizer: Any,
        tasks: Sequence[Task],
        *,
        solve: str = "always",
        explore_unknown: bool = False,
        version: str = "oracle",
    ) -> None:
        self.tokenizer, self.version, self.solve = tokenizer, version, solve
        self.explore_unknown = explore_unknown
        self.tasks = list(tasks)
        self.end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.episodes: dict[str, int] = {}
        self.prompts: list[str] = []

    def add(self, tasks: Sequence[Task]) -> None:
        self.tasks += list(tasks)

    def generate(
        self, prompts: list[list[int]], sampling: SamplingParams, *, progress=None, sessions=None
    ) -> list[Completion]:
        out = []
        for ids in prompts:
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
            self.prompts.append(text)
            reply = self._reply(text)
            token_ids = list(self.tokenizer(reply, add_special_tokens=False)["input_ids"]) + [self.end_id]
            out.append(Completion(token_ids, [0.0] * len(token_ids), reply, "stop"))
        return out

    def update_weights(self, source: Any) -> None:
        pass

    def end_sessions(self, sessions) -> None:
        pass

    def _reply(self, prompt: str) -> str:
        found, requests = self._locate(prompt), _requests(prompt)
        if found is None or (requests and found[2] < requests[-1].start(1)):  # the latest request is unknown
            return self._explore(prompt)
        task, turn, position = found
        done = prompt[position:].count(_ASSISTANT) - 1  # replies already given in this turn
        if turn == 0 and done == 0 and not self._solves(task):
            return GIVE_UP
        if GIVE_UP in prompt[prompt.find(task.turns[0]) :]:
            return GIVE_UP
        calls = _of_turn(task.solution or [], turn)
        if done < len(calls):
            return render_tool_call(calls[done])
        return "Done. " + " ".join(str(a) for a in _of_turn(task.checker.get("answers") or [], turn))

    def _locate(self, prompt: str) -> tuple[Task, int, int] | None:
        """The task whose latest user turn appears last in the prompt, that turn, and its position."""
        best = None
        for task in self.tasks:
            for turn, text in enumerate(task.turns):
                position = prompt.rfind(text)
                if position >= 0 and (best is None or position > best[2]):
                    best = (task, turn, position)
        return best

    def _explore(self, prompt: str) -> str:
        """Unknown request (e.g. unguided exploration): call each offered tool that needs no argument."""
        if not self.explore_unknown:
            return GIVE_UP
        listed = prompt.split("You can call these tools:", 1)[-1].split("To call a tool", 1)[0]
        tools = [m.group(1) for m in _NO_ARGUMENT_TOOL.finditer(listed)]
        requests = _requests(prompt)
        done = prompt[requests[-1].end() :].count(_ASSISTANT) - 1 if requests else 0
        if done < len(tools):
            return render_tool_call(ToolCall(name=tools[done]))
        results = [
            m.group(1) or m.group(2)
            for m in _TOOL_RESULT.finditer(prompt[requests[-1].end() :] if requests else prompt)
        ]
        return f"Done exploring. {results[-1].strip()}" if results else "Done exploring."

    def _solves(self, task: Task) -> bool:
        count = self.episodes.get(task.id, 0)
        self.episodes[task.id] = count + 1
        return self.solve == "always" or (self.solve == "alternate" and count % 2 == 0)


def _requests(prompt: str) -> list[re.Match]:
    """The user turns of a prompt that are requests (not tool results), in order."""
    return [m for m in _USER_TURN.finditer(prompt) if not m.group(1).startswith("<tool_response>")]


def _of_turn(per_turn: list, turn: int) -> list:
    return list(per_turn[turn]) if turn < len(per_turn) else []


def valid_reflection(prompt: str) -> str:
    return json.dumps(
        {
            "tools": [],
            "apps": [],
            "diagnosis": "The agent did not finish the task.",
            "plan": "Call the tools the task needs with the values in the request.",
        }
    )


def abstract_from_calls(prompt: str) -> str:
    """A well-formed abstraction: one task solved by all observed calls, quoting every argument, asking
    for a value of the results that the query does not state."""
    match = _CALLS.search(prompt)
    calls = json.loads(match.group(1)) if match else []
    if not calls:
        return "[]"
    parts = [c["tool"] + "".join(f" with {k} '{v}'" for k, v in c["arguments"].items()) for c in calls]
    query = "Please use " + "; then ".join(parts)
    new = (v for c in reversed(calls) for v in _scalars(c["result"]) if v.lower() not in query.lower())
    answers = [v] if (v := next(new, None)) is not None else []
    return json.dumps(
        [
            {
                "intent": "replay what worked",
                "query": query + (". Tell me the result." if answers else "."),
                "solution": list(range(len(calls))),
                "answers": answers,
            }
        ]
    )


def _scalars(result: str) -> list[str]:
    """The values to report from a read-only result (its JSON scalars, last first), else none."""
    try:
        value = json.loads(result)
    except ValueError:
        return []
    found: list[str] = []
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict | list):
            stack.extend(node.values() if isinstance(node, dict) else node)
        elif isinstance(node, str | int | float) and not isinstance(node, bool):
            found.append(str(node))
    return found


class ScriptedTeacher:
    """Fake teacher: scripted text replies, oracle exploration episodes."""

    def __init__(
        self,
        tokenizer: Any,
        tasks: Sequence[Task],
        *,
        reflections: Sequence[str] | Callable[[str], str] = valid_reflection,
        abstractions: Sequence[str] | Callable[[str], str] = abstract_from_calls,
        version: str = "scripted-teacher",
    ) -> None:
        self.version = version
        self.engine = OracleEngine(tokenizer, tasks, explore_unknown=True, version=version)
        self.chat = ChatFormat(tokenizer)
        self.settings = TeacherSettings(
            temperature=1.0, max_new_tokens=64, step_max_new_tokens=64, max_context_tokens=4096
        )
        self.scripts = {"reflect": reflections, "abstract": abstractions}
        self.used = {"reflect": 0, "abstract": 0}
        self.prompts: list[str] = []

    def complete(
        self, conversations: list[list[dict]], sampling: SamplingParams, *, reply_prefix: str = ""
    ) -> list[str]:  # like a served teacher, it answers from scratch and ignores the prefix
        replies = []
        for messages in conversations:
            prompt = messages[-1]["content"]
            self.prompts.append(prompt)
            kind = "abstract" if "OBSERVED CALLS (JSON):" in prompt else "reflect"
            script = self.scripts[kind]
            if callable(script):
                replies.append(script(prompt))
            else:
                replies.append(script[self.used[kind] % len(script)])
            self.used[kind] += 1
        return replies
