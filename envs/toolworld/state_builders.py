"""Random app states for task templates: a few plausible records per app, drawn from fixed pools.

Every builder takes the template's `random.Random`, so a task is a pure function of its seed. The
records a task does not ask about are its distractors. Pools are tuples (immutable module data).
"""

from __future__ import annotations

import random
from typing import Any

from coevolve.envs.toolworld.apps.shop import order_total

NAMES = (
    "Alice",
    "Bob",
    "Chen",
    "Dana",
    "Emeka",
    "Farah",
    "Gina",
    "Hugo",
    "Ines",
    "Jamal",
    "Kenji",
    "Lena",
    "Mona",
    "Nils",
    "Omar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sam",
    "Tariq",
)
DOMAINS = ("mail.com", "post.net", "inbox.org", "letters.io")
FOLDERS = ("notes", "work", "home", "travel", "school")
FILE_STEMS = ("todo", "ideas", "plan", "codes", "packing", "budget", "reading", "recipes", "keys", "goals")
SECRET_LABELS = (
    "door code",
    "wifi password",
    "locker number",
    "booking reference",
    "parking spot",
    "gym pin",
    "ticket number",
)
WORDS = (
    "tulip",
    "amber",
    "falcon",
    "cedar",
    "orbit",
    "maple",
    "delta",
    "coral",
    "pepper",
    "willow",
    "comet",
    "harbor",
)
NOTE_TEXTS = (
    "Buy milk and eggs",
    "Call the plumber on Monday",
    "Return the library books",
    "Pack the blue charger",
    "Water the plants",
    "Book a table for four",
    "Renew the passport",
    "Pay the phone bill",
    "Send the invoice",
    "Clean the fridge",
)
MESSAGE_TEXTS = (
    "Lunch at noon?",
    "Running ten minutes late",
    "Thanks for the help",
    "See you at the station",
    "Can you call me back?",
    "The report is ready",
    "Happy birthday!",
    "Meeting moved to Friday",
    "Payment sent",
    "I will be there at six",
)
INBOX_TEXTS = (
    "Please send me the slides from the workshop",
    "The parcel arrived at the front desk today",
    "Do not forget the team dinner on Thursday",
    "Your bike is ready to collect from the shop",
    "I left the spare key under the blue pot",
    "The train tickets are booked for both of us",
    "Could you water my plants while I am away",
)
EVENT_TITLES = (
    "Dentist",
    "Team sync",
    "Yoga class",
    "Budget review",
    "Piano lesson",
    "Car service",
    "Book club",
    "Haircut",
    "Project demo",
    "Parent meeting",
    "Tennis",
    "Vet visit",
)
PRODUCTS = (
    "Desk Lamp",
    "USB Cable",
    "Notebook",
    "Coffee Mug",
    "Water Bottle",
    "Phone Stand",
    "Backpack",
    "Headphones",
    "Umbrella",
    "Yoga Mat",
    "Candle",
    "Stapler",
)
ACCOUNT_KINDS = (
    ("CHK", "checking"),
    ("SAV", "savings"),
    ("BIZ", "business"),
    ("TRV", "travel"),
    ("GFT", "gifts"),
    ("EMG", "emergency"),
)
ORDER_STATUSES = ("placed", "shipped", "delivered")


def money_amount(rng: random.Random, low: float, high: float) -> float:
    """A random amount in [low, high] with cents."""
    return round(rng.randint(round(low * 100), round(high * 100)) / 100, 2)


def random_date(rng: random.Random) -> str:
    return f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def random_time(rng: random.Random) -> str:
    return f"{rng.randint(7, 19):02d}:{rng.choice(('00', '15', '30', '45'))}"


def secret_value(rng: random.Random) -> str:
    return f"{rng.choice(WORDS)}-{rng.randint(100, 9999)}"


def bank_state(rng: random.Random, n_accounts: int = 3) -> dict[str, Any]:
    """Accounts like CHK-4 with random balances; no transfers yet."""
    accounts = {
        f"{prefix}-{rng.randint(1, 9)}": {"label": label, "balance": money_amount(rng, 50, 5000)}
        for prefix, label in rng.sample(ACCOUNT_KINDS, n_accounts)
    }
    return {"accounts": accounts, "transfers": {}}


def files_state(rng: random.Random, n_files: int = 3) -> dict[str, Any]:
    """Files like /home/codes.txt holding one labelled secret each ("door code: maple-4821")."""
    paths = rng.sample([f"/{folder}/{stem}.txt" for folder in FOLDERS for stem in FILE_STEMS], n_files)
    labels = rng.sample(SECRET_LABELS, n_files)
    return {
        "files": {path: f"{label}: {secret_value(rng)}" for path, label in zip(paths, labels, strict=True)}
    }


def new_path(rng: random.Random, files: dict[str, Any]) -> str:
    """A path not used in `files`."""
    free = [
        f"/{folder}/{stem}.txt"
        for folder in FOLDERS
        for stem in FILE_STEMS
        if f"/{folder}/{stem}.txt" not in files
    ]
    return rng.choice(free)


def messages_state(rng: random.Random, n_contacts: int = 3, n_inbox: int = 2) -> dict[str, Any]:
    """Contacts with emails and an inbox with at most one message per sender."""
    names = rng.sample(NAMES, n_contacts)
    contacts = {name: {"email": f"{name.lower()}@{rng.choice(DOMAINS)}"} for name in names}
    senders = rng.sample(names, min(n_inbox, n_contacts))
    texts = rng.sample(INBOX_TEXTS, len(senders))
    inbox = {
        f"IN-{i + 1}": {"from": sender, "text": text}
        for i, (sender, text) in enumerate(zip(senders, texts, strict=True))
    }
    return {"contacts": contacts, "inbox": inbox, "outbox": {}}


def calendar_state(rng: random.Random, n_events: int = 3) -> dict[str, Any]:
    """Events with distinct titles at random dates and times."""
    titles = rng.sample(EVENT_TITLES, n_events)
    return {
        "events": {
            f"E-{i + 1}": {"title": title, "date": random_date(rng), "time": random_time(rng)}
            for i, title in enumerate(titles)
        }
    }


def shop_state(
    rng: random.Random, n_products: int = 4, n_orders: int = 2, statuses: tuple[str, ...] = ORDER_STATUSES
) -> dict[str, Any]:
    """A small catalog, an empty cart and a few past orders of catalog products."""
    ids = rng.sample(range(100, 1000), n_products)
    catalog = {
        f"P-{pid}": {"name": name, "price": money_amount(rng, 3, 80), "stock": rng.randint(3, 20)}
        for pid, name in zip(ids, rng.sample(PRODUCTS, n_products), strict=True)
    }
    orders = {}
    for number in sorted(rng.sample(range(5001, 6000), n_orders)):
        items = {pid: rng.randint(1, 3) for pid in rng.sample(sorted(catalog), rng.randint(1, 2))}
        orders[f"O-{number}"] = {
            "items": items,
            "total": order_total(catalog, items),
            "status": rng.choice(statuses),
        }
    return {"catalog": catalog, "cart": {}, "orders": orders}
