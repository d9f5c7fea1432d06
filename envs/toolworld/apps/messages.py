"""The messages app: contacts (name -> email), a received inbox and a sent outbox."""

from __future__ import annotations

from typing import Any

from coevolve.envs.toolworld.apps.base import App, ToolError, check_text, lookup, next_id, shown

PREVIEW_WORDS = 3


def preview(text: str) -> str:
    """The first few words of a message: enough to recognise it, not to answer from it."""
    words = text.split()
    return " ".join(words[:PREVIEW_WORDS]) + (" ..." if len(words) > PREVIEW_WORDS else "")


class MessagesApp(App):
    """Contacts, inbox (id -> {from, text}) and outbox (id -> {to, text})."""

    name = "messages"
    TOOLS = (
        "list_contacts",
        "get_contact",
        "add_contact",
        "send_message",
        "list_inbox",
        "read_message",
        "delete_message",
    )

    @classmethod
    def empty_state(cls) -> dict[str, Any]:
        return {"contacts": {}, "inbox": {}, "outbox": {}}

    def _contact_name(self, name: str) -> str:
        """The stored spelling of a contact name (matched case-insensitively)."""
        for known in self.state["contacts"]:
            if known.lower() == name.strip().lower():
                return known
        known = ", ".join(sorted(self.state["contacts"])) or "none"
        raise ToolError(f"unknown contact {shown(name)}; known: {known}")

    def list_contacts(self) -> list[dict[str, Any]]:
        """List all contacts with their email addresses."""
        return [{"name": name, **info} for name, info in sorted(self.state["contacts"].items())]

    def get_contact(self, name: str) -> dict[str, Any]:
        """Look up one contact by name.

        Args:
            name: The contact's name, e.g. "Alice".
        """
        known = self._contact_name(name)
        return {"name": known, **self.state["contacts"][known]}

    def add_contact(self, name: str, email: str) -> dict[str, Any]:
        """Add a new contact.

        Args:
            name: The new contact's name.
            email: Their email address, e.g. "alice@mail.com".
        """
        name = check_text(name, "name")
        if any(known.lower() == name.lower() for known in self.state["contacts"]):
            raise ToolError(f"contact {shown(name)} already exists")
        if "@" not in email:
            raise ToolError(f"email must contain '@', got {shown(email)}")
        self.state["contacts"][name] = {"email": email.strip()}
        return {"name": name, "added": True}

    def send_message(self, to: str, text: str) -> dict[str, Any]:
        """Send a message to a contact.

        Args:
            to: Name of the contact, e.g. "Alice".
            text: The message text.
        """
        name = self._contact_name(to)
        message_id = next_id("OUT", self.state["outbox"])
        self.state["outbox"][message_id] = {"to": name, "text": check_text(text, "text")}
        return {"message_id": message_id, "to": name, "sent": True}

    def list_inbox(self, sender: str = "") -> list[dict[str, Any]]:
        """List received messages (id, sender and the first words), optionally only from one sender.

        Args:
            sender: Only list messages from this contact; empty lists all.
        """
        wanted = sender.strip().lower()
        return [
            {"message_id": mid, "from": msg["from"], "preview": preview(msg["text"])}
            for mid, msg in sorted(self.state["inbox"].items())
            if not wanted or msg["from"].lower() == wanted
        ]

    def read_message(self, message_id: str) -> dict[str, Any]:
        """Read the full text of a received message.

        Args:
            message_id: Id of the message, e.g. "IN-2".
        """
        message = lookup(self.state["inbox"], message_id, "message")
        return {"message_id": message_id, **message}

    def delete_message(self, message_id: str) -> dict[str, Any]:
        """Delete a received message.

        Args:
            message_id: Id of the message, e.g. "IN-2".
        """
        lookup(self.state["inbox"], message_id, "message")
        del self.state["inbox"][message_id]
        return {"message_id": message_id, "deleted": True}
