"""Example exchanges that teach the tool-call format in the chat prompt, one per app.

Each is user -> assistant tool call (rendered by `llm.toolcalls.render_tool_call`) -> tool result ->
assistant final answer. The tool results come from running the calls on a small fixed world, so the
examples always match the real tools.

An episode shows the examples of the apps its task involves (then others, up to `count`): a ~135M
model copies the shape of a nearby example far more reliably than it follows a description, and an
example from the same app teaches it which tool names exist there. The examples are fixed and never
solve a task of any split (different names, accounts, files), so they do not leak answers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from coevolve.envs.toolworld.templates import call
from coevolve.envs.toolworld.tools import ToolCatalog
from coevolve.envs.toolworld.world import World
from coevolve.llm.toolcalls import render_tool_call


def demo_world() -> World:
    return World(
        {
            "bank": {"accounts": {"CHK-7": {"label": "checking", "balance": 310.25}}, "transfers": {}},
            "messages": {"contacts": {"Bob": {"email": "bob@mail.com"}}, "inbox": {}, "outbox": {}},
            "files": {"files": {"/docs/todo.txt": "buy stamps"}},
            "calendar": {"events": {}},
            "shop": {"catalog": {"P-9": {"name": "desk lamp", "price": 24.5, "stock": 3}}, "cart": {},
                     "orders": {"ORD-3": {"items": {"P-9": 1}, "total": 24.5, "status": "shipped"}}},
        }
    )


# app -> (user message, the call that answers it, the final answer)
EXCHANGES: dict[str, tuple[str, Any, str]] = {
    "bank": ("What is the balance of account CHK-7?", call("get_balance", account_id="CHK-7"),
             "The balance of account CHK-7 is 310.25."),
    "messages": ("Send Bob the message 'See you at five'", call("send_message", to="Bob", text="See you at five"),
                 "Done: I sent Bob the message 'See you at five'."),
    "files": ("What does the file /docs/todo.txt say?", call("read_file", path="/docs/todo.txt"),
              "The file /docs/todo.txt says: buy stamps."),
    "calendar": ("Add 'Dentist' to my calendar on 2025-03-04 at 09:30.",
                 call("create_event", title="Dentist", date="2025-03-04", time="09:30"),
                 "Done: 'Dentist' is on your calendar on 2025-03-04 at 09:30."),
    "shop": ("What is the status of order ORD-3?", call("get_order", order_id="ORD-3"),
             "Order ORD-3 is shipped."),
}


def demonstrations(catalog: ToolCatalog, apps: Iterable[str] = (), count: int = 2) -> list[dict[str, str]]:
    """Chat messages of `count` exchanges: those of `apps` first, then the others in a fixed order."""
    order = [a for a in dict.fromkeys(apps) if a in EXCHANGES] + [a for a in EXCHANGES if a not in apps]
    world, offered = demo_world(), catalog.names()
    messages: list[dict[str, str]] = []
    for app in order[:count]:
        user, tool_call, answer = EXCHANGES[app]
        outcome = catalog.call(world.apps, tool_call, offered)
        messages += [
            {"role": "user", "content": user},
            {"role": "assistant", "content": render_tool_call(tool_call)},
            {"role": "tool", "content": outcome.content()},
            {"role": "assistant", "content": answer},
        ]
    return messages
