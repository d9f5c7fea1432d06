"""Two fixed example exchanges that teach the tool-call format in the chat prompt.

Each is user -> assistant tool call (rendered by `llm.toolcalls.render_tool_call`) -> tool result ->
assistant final answer. The tool results are produced by running the calls on a tiny fixed world, so the
examples always match the real tools.
"""

from __future__ import annotations

from typing import Any

from envs.toolworld.templates import call
from envs.toolworld.tools import ToolCatalog
from envs.toolworld.world import World
from llm.toolcalls import render_tool_call


def demo_world() -> World:
    return World(
        {
            "bank": {"accounts": {"CHK-7": {"label": "checking", "balance": 310.25}}, "transfers": {}},
            "messages": {"contacts": {"Bob": {"email": "bob@mail.com"}}, "inbox": {}, "outbox": {}},
        }
    )


def demonstrations(catalog: ToolCatalog) -> list[dict[str, str]]:
    """The chat messages of both exchanges, in order (8 messages)."""
    exchanges: list[tuple[str, Any, str]] = [
        (
            "What is the balance of account CHK-7?",
            call("get_balance", account_id="CHK-7"),
            "The balance of account CHK-7 is 310.25.",
        ),
        (
            "Send Bob the message 'See you at five'",
            call("send_message", to="Bob", text="See you at five"),
            "Done: I sent Bob the message 'See you at five'.",
        ),
    ]
    world, offered = demo_world(), catalog.names()
    messages: list[dict[str, str]] = []
    for user, tool_call, answer in exchanges:
        outcome = catalog.call(world.apps, tool_call, offered)
        messages += [
            {"role": "user", "content": user},
            {"role": "assistant", "content": render_tool_call(tool_call)},
            {"role": "tool", "content": outcome.content()},
            {"role": "assistant", "content": answer},
        ]
    return messages
