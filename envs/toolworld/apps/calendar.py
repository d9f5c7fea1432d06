"""The calendar app: events by id ("E-3") with a title, a date (YYYY-MM-DD) and a time (HH:MM)."""

from __future__ import annotations

from typing import Any

from coevolve.envs.toolworld.apps.base import App, check_date, check_text, check_time, lookup, next_id


class CalendarApp(App):
    """Events: id -> {title, date, time}."""

    name = "calendar"
    TOOLS = ("list_events", "find_events", "get_event", "create_event", "reschedule_event", "cancel_event")

    @classmethod
    def empty_state(cls) -> dict[str, Any]:
        return {"events": {}}

    def _listing(self, keep) -> list[dict[str, Any]]:
        rows = [{"event_id": eid, **event} for eid, event in self.state["events"].items() if keep(event)]
        return sorted(rows, key=lambda row: (row["date"], row["time"], row["event_id"]))

    def list_events(self, date: str = "") -> list[dict[str, Any]]:
        """List calendar events, optionally only those on one date.

        Args:
            date: Only list events on this date (YYYY-MM-DD); empty lists all events.
        """
        if date:
            check_date(date)
        return self._listing(lambda event: not date or event["date"] == date)

    def find_events(self, title: str) -> list[dict[str, Any]]:
        """Find events whose title contains a text (case-insensitive).

        Args:
            title: Text to look for in event titles, e.g. "Dentist".
        """
        needle = check_text(title, "title").lower()
        return self._listing(lambda event: needle in event["title"].lower())

    def get_event(self, event_id: str) -> dict[str, Any]:
        """Show one event.

        Args:
            event_id: Id of the event, e.g. "E-3".
        """
        return {"event_id": event_id, **lookup(self.state["events"], event_id, "event")}

    def create_event(self, title: str, date: str, time: str) -> dict[str, Any]:
        """Add an event to the calendar.

        Args:
            title: Title of the event, e.g. "Dentist".
            date: Day of the event, YYYY-MM-DD.
            time: Start time, HH:MM (24 hours).
        """
        event = {"title": check_text(title, "title"), "date": check_date(date), "time": check_time(time)}
        event_id = next_id("E", self.state["events"])
        self.state["events"][event_id] = event
        return {"event_id": event_id, **event}

    def reschedule_event(self, event_id: str, date: str, time: str) -> dict[str, Any]:
        """Move an event to a new date and time.

        Args:
            event_id: Id of the event, e.g. "E-3".
            date: New day, YYYY-MM-DD.
            time: New start time, HH:MM.
        """
        event = lookup(self.state["events"], event_id, "event")
        event.update(date=check_date(date), time=check_time(time))
        return {"event_id": event_id, **event}

    def cancel_event(self, event_id: str) -> dict[str, Any]:
        """Cancel (delete) an event.

        Args:
            event_id: Id of the event, e.g. "E-3".
        """
        lookup(self.state["events"], event_id, "event")
        del self.state["events"][event_id]
        return {"event_id": event_id, "cancelled": True}
