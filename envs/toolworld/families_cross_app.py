"""Task families that chain tools of two or three apps, with values flowing from one call to the next.

Train: save a message into a file (3 calls), pay an order and notify a contact (4 calls, 3 apps), cancel
an event and notify (3 calls). Held out: save a contact's email (2 calls), cancel an order and deposit the
refund (3 calls), and a two-turn invitation read from the inbox then booked and confirmed (4 calls).
"""

from __future__ import annotations

import random

from coevolve.envs.toolworld.apps.base import add_money
from coevolve.envs.toolworld.checker import money
from coevolve.envs.toolworld.state_builders import (
    EVENT_TITLES,
    bank_state,
    calendar_state,
    files_state,
    messages_state,
    money_amount,
    new_path,
    random_date,
    random_time,
    shop_state,
)
from coevolve.envs.toolworld.templates import Draft, Template, call, phrase

PAYMENT_NOTES = ("Payment sent", "Paid, thanks!", "Order paid", "The money is on its way")
CANCEL_NOTES = ("Sorry, I cannot make it", "I have to cancel, sorry", "Can we find another day?")
CONFIRM_NOTES = ("See you then", "Booked, see you then", "Sounds good")


def save_message(rng: random.Random) -> Draft:
    messages = messages_state(rng, 3, rng.randint(2, 3))
    files = files_state(rng, rng.randint(1, 2))
    message_id = rng.choice(sorted(messages["inbox"]))
    message = messages["inbox"][message_id]
    path = new_path(rng, files["files"])
    turn = phrase(
        rng,
        (
            "Save the message from {name} into the file {path}.",
            "Copy {name}'s message into a new file {path}.",
        ),
        name=message["from"],
        path=path,
    )
    solution = [
        call("list_inbox", sender=message["from"]),
        call("read_message", message_id=message_id),
        call("write_file", path=path, content=message["text"]),
    ]
    return Draft({"files": files, "messages": messages}, [turn], [solution], [[]])


def pay_order(rng: random.Random) -> Draft:
    shop, bank = shop_state(rng, 4, 3), bank_state(rng, 3)
    messages = messages_state(rng, 3, rng.randint(0, 1))
    order_id = rng.choice(sorted(shop["orders"]))
    total = shop["orders"][order_id]["total"]
    source, target = rng.sample(sorted(bank["accounts"]), 2)
    bank["accounts"][source]["balance"] = balance = add_money(total, money_amount(rng, 10, 900))
    name, note = rng.choice(sorted(messages["contacts"])), rng.choice(PAYMENT_NOTES)
    turn = phrase(
        rng,
        (
            "Transfer the total of order {o} from {a} to {b}, then send {name} the message '{note}' "
            "and tell me the new balance of {a}.",
            "Pay order {o}: move its total from {a} to {b}, message {name} '{note}', "
            "and tell me the balance of {a} afterwards.",
        ),
        o=order_id,
        a=source,
        b=target,
        name=name,
        note=note,
    )
    solution = [
        call("get_order", order_id=order_id),
        call("transfer", from_account=source, to_account=target, amount=total),
        call("send_message", to=name, text=note),
        call("get_balance", account_id=source),
    ]
    return Draft(
        {"messages": messages, "shop": shop, "bank": bank},
        [turn],
        [solution],
        [[money(add_money(balance, -total))]],
    )


def cancel_and_notify(rng: random.Random) -> Draft:
    calendar, messages = calendar_state(rng, 3), messages_state(rng, 3, rng.randint(0, 1))
    event_id = rng.choice(sorted(calendar["events"]))
    event = calendar["events"][event_id]
    name, note = rng.choice(sorted(messages["contacts"])), rng.choice(CANCEL_NOTES)
    turn = phrase(
        rng,
        (
            "Cancel '{title}' on {date} and send {name} the message '{note}'",
            "Remove my event '{title}' on {date}, then message {name}: '{note}'",
        ),
        title=event["title"],
        date=event["date"],
        name=name,
        note=note,
    )
    solution = [
        call("list_events", date=event["date"]),
        call("cancel_event", event_id=event_id),
        call("send_message", to=name, text=note),
    ]
    return Draft({"messages": messages, "calendar": calendar}, [turn], [solution], [[]])


def contact_email_note(rng: random.Random) -> Draft:
    messages, files = (
        messages_state(rng, rng.randint(3, 4), rng.randint(0, 1)),
        files_state(rng, rng.randint(1, 2)),
    )
    name, path = rng.choice(sorted(messages["contacts"])), new_path(rng, files["files"])
    turn = phrase(
        rng,
        (
            "Write {name}'s email address into the file {path}.",
            "Save the email address of {name} in a new file {path}.",
        ),
        name=name,
        path=path,
    )
    solution = [
        call("get_contact", name=name),
        call("write_file", path=path, content=messages["contacts"][name]["email"]),
    ]
    return Draft({"files": files, "messages": messages}, [turn], [solution], [[]])


def cancel_order_refund(rng: random.Random) -> Draft:
    shop, bank = shop_state(rng, 4, 3), bank_state(rng, rng.randint(2, 3))
    order_id = rng.choice(sorted(shop["orders"]))
    shop["orders"][order_id]["status"] = "placed"
    total = shop["orders"][order_id]["total"]
    account = rng.choice(sorted(bank["accounts"]))
    turn = phrase(
        rng,
        (
            "Cancel order {o}, deposit its total into {acc}, and tell me the new balance of {acc}.",
            "Please cancel order {o}, put the refund (its total) into account {acc}, and tell me "
            "the balance of {acc}.",
        ),
        o=order_id,
        acc=account,
    )
    solution = [
        call("get_order", order_id=order_id),
        call("cancel_order", order_id=order_id),
        call("deposit", account_id=account, amount=total),
    ]
    answer = money(add_money(bank["accounts"][account]["balance"], total))
    return Draft({"shop": shop, "bank": bank}, [turn], [solution], [[answer]])


def invite_from_inbox(rng: random.Random) -> Draft:
    messages, calendar = messages_state(rng, 4, rng.randint(1, 2)), calendar_state(rng, rng.randint(1, 2))
    senders = {message["from"] for message in messages["inbox"].values()}
    name = rng.choice(sorted(set(messages["contacts"]) - senders))
    date, time = random_date(rng), random_time(rng)
    message_id = f"IN-{len(messages['inbox']) + 1}"
    messages["inbox"][message_id] = {"from": name, "text": f"Can we meet on {date}? Any time works for me."}
    taken = {event["title"] for event in calendar["events"].values()}
    title, note = rng.choice([t for t in EVENT_TITLES if t not in taken]), rng.choice(CONFIRM_NOTES)
    turns = [
        phrase(
            rng,
            (
                "Read the message from {name} and tell me which date they suggest.",
                "What date does {name} propose in their message?",
            ),
            name=name,
        ),
        phrase(
            rng,
            (
                "Add '{title}' to my calendar on that date at {time}, then send {name} the message '{note}'",
                "Book '{title}' on that date at {time} and message {name}: '{note}'",
            ),
            title=title,
            time=time,
            name=name,
            note=note,
        ),
    ]
    solution = [
        [call("list_inbox", sender=name), call("read_message", message_id=message_id)],
        [call("create_event", title=title, date=date, time=time), call("send_message", to=name, text=note)],
    ]
    return Draft({"messages": messages, "calendar": calendar}, turns, solution, [[date], []])


TRAIN = (
    Template("save_message", save_message),
    Template("pay_order", pay_order),
    Template("cancel_and_notify", cancel_and_notify),
)
HELDOUT = (
    Template("contact_email_note", contact_email_note),
    Template("cancel_order_refund", cancel_order_refund),
    Template("invite_from_inbox", invite_from_inbox),
)
