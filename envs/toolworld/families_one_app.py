"""Task families that stay inside one app: one-call lookups and actions, and short chains.

The one-call families (balance, file lookup, message, event, order status, transfer, note) give a small
model a foothold; the chains (cart total, copy file, reschedule, buy, balance then transfer over two
turns) need 2-3 dependent calls. `move_file` is held out from training.
"""

from __future__ import annotations

import random

from coevolve.envs.toolworld.apps.base import add_money
from coevolve.envs.toolworld.apps.shop import order_total
from coevolve.envs.toolworld.checker import money
from coevolve.envs.toolworld.state_builders import (
    EVENT_TITLES,
    MESSAGE_TEXTS,
    NOTE_TEXTS,
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


def bank_balance(rng: random.Random) -> Draft:
    bank = bank_state(rng, rng.randint(2, 4))
    account = rng.choice(sorted(bank["accounts"]))
    turn = phrase(
        rng,
        (
            "What is the balance of account {a}?",
            "How much money is in account {a}?",
            "Check the balance of {a} for me.",
        ),
        a=account,
    )
    return Draft(
        {"bank": bank},
        [turn],
        [[call("get_balance", account_id=account)]],
        [[money(bank["accounts"][account]["balance"])]],
    )


def file_lookup(rng: random.Random) -> Draft:
    files = files_state(rng, rng.randint(2, 4))
    path = rng.choice(sorted(files["files"]))
    label, _, value = files["files"][path].partition(": ")
    turn = phrase(
        rng,
        (
            "What is the {label} in the file {path}?",
            "Read {path} and tell me the {label}.",
            "Open the file {path}. What is the {label}?",
        ),
        label=label,
        path=path,
    )
    return Draft({"files": files}, [turn], [[call("read_file", path=path)]], [[value]])


def send_message(rng: random.Random) -> Draft:
    messages = messages_state(rng, rng.randint(2, 4), rng.randint(0, 2))
    name, text = rng.choice(sorted(messages["contacts"])), rng.choice(MESSAGE_TEXTS)
    turn = phrase(
        rng,
        ("Send {name} the message '{text}'", "Message {name}: '{text}'", "Text {name} saying '{text}'"),
        name=name,
        text=text,
    )
    return Draft({"messages": messages}, [turn], [[call("send_message", to=name, text=text)]], [[]])


def create_event(rng: random.Random) -> Draft:
    calendar = calendar_state(rng, rng.randint(1, 3))
    taken = {event["title"] for event in calendar["events"].values()}
    title = rng.choice([t for t in EVENT_TITLES if t not in taken])
    date, time = random_date(rng), random_time(rng)
    turn = phrase(
        rng,
        (
            "Add '{title}' to my calendar on {date} at {time}.",
            "Schedule '{title}' for {date} at {time}.",
            "Create a calendar event '{title}' on {date} at {time}.",
        ),
        title=title,
        date=date,
        time=time,
    )
    return Draft(
        {"calendar": calendar}, [turn], [[call("create_event", title=title, date=date, time=time)]], [[]]
    )


def order_status(rng: random.Random) -> Draft:
    shop = shop_state(rng, 4, 3)
    order = rng.choice(sorted(shop["orders"]))
    turn = phrase(
        rng,
        (
            "What is the status of order {o}?",
            "Check order {o} and tell me its status.",
            "Look up order {o}. What is its status?",
        ),
        o=order,
    )
    return Draft(
        {"shop": shop}, [turn], [[call("get_order", order_id=order)]], [[shop["orders"][order]["status"]]]
    )


def transfer_funds(rng: random.Random) -> Draft:
    bank = bank_state(rng, rng.randint(2, 4))
    source, target = rng.sample(sorted(bank["accounts"]), 2)
    amount = money_amount(rng, 5, min(500, bank["accounts"][source]["balance"]))
    turn = phrase(
        rng,
        (
            "Transfer {amt} from {a} to {b}.",
            "Move {amt} from account {a} to account {b}.",
            "Please transfer {amt} from {a} to {b}.",
        ),
        amt=money(amount),
        a=source,
        b=target,
    )
    solution = [call("transfer", from_account=source, to_account=target, amount=amount)]
    return Draft({"bank": bank}, [turn], [solution], [[]])


def write_note(rng: random.Random) -> Draft:
    files = files_state(rng, rng.randint(1, 3))
    path, text = new_path(rng, files["files"]), rng.choice(NOTE_TEXTS)
    turn = phrase(
        rng,
        (
            "Create the file {path} with the text '{text}'.",
            "Write '{text}' into a new file {path}.",
            "Save a note at {path} saying '{text}'.",
        ),
        path=path,
        text=text,
    )
    return Draft({"files": files}, [turn], [[call("write_file", path=path, content=text)]], [[]])


def cart_total(rng: random.Random) -> Draft:
    shop = shop_state(rng, 4, 1)
    items = {pid: rng.randint(1, 3) for pid in rng.sample(sorted(shop["catalog"]), 2)}
    (p1, q1), (p2, q2) = items.items()
    turn = phrase(
        rng,
        (
            "Add {q1} of {p1} and {q2} of {p2} to my cart, then tell me the cart total.",
            "Put {q1} x {p1} and {q2} x {p2} in the cart and tell me the total.",
        ),
        p1=p1,
        q1=q1,
        p2=p2,
        q2=q2,
    )
    solution = [
        call("add_to_cart", product_id=p1, quantity=q1),
        call("add_to_cart", product_id=p2, quantity=q2),
        call("view_cart"),
    ]
    return Draft({"shop": shop}, [turn], [solution], [[money(order_total(shop["catalog"], items))]])


def copy_file(rng: random.Random) -> Draft:
    files = files_state(rng, rng.randint(2, 4))
    source = rng.choice(sorted(files["files"]))
    target = new_path(rng, files["files"])
    turn = phrase(
        rng,
        ("Copy the content of {src} into a new file {dst}.", "Make a copy of {src} at {dst}."),
        src=source,
        dst=target,
    )
    solution = [
        call("read_file", path=source),
        call("write_file", path=target, content=files["files"][source]),
    ]
    return Draft({"files": files}, [turn], [solution], [[]])


def reschedule_event(rng: random.Random) -> Draft:
    calendar = calendar_state(rng, rng.randint(2, 4))
    event_id = rng.choice(sorted(calendar["events"]))
    event = calendar["events"][event_id]
    title, date, time = event["title"], event["date"], event["time"]
    while (date, time) == (event["date"], event["time"]):
        date, time = random_date(rng), random_time(rng)
    turn = phrase(
        rng,
        ("Move my event '{title}' to {date} at {time}.", "Reschedule '{title}' to {date} at {time}."),
        title=title,
        date=date,
        time=time,
    )
    solution = [
        call("find_events", title=title),
        call("reschedule_event", event_id=event_id, date=date, time=time),
    ]
    return Draft({"calendar": calendar}, [turn], [solution], [[]])


def buy_product(rng: random.Random) -> Draft:
    shop = shop_state(rng, 4, rng.randint(0, 2))
    product_id = rng.choice(sorted(shop["catalog"]))
    product, quantity = shop["catalog"][product_id], rng.randint(1, 3)
    turn = phrase(
        rng,
        (
            "Buy {q} x '{name}' and tell me the order total.",
            "Order {q} of the product '{name}', check out, and tell me the total.",
        ),
        q=quantity,
        name=product["name"],
    )
    solution = [
        call("search_products", query=product["name"]),
        call("add_to_cart", product_id=product_id, quantity=quantity),
        call("checkout"),
    ]
    return Draft(
        {"shop": shop}, [turn], [solution], [[money(order_total(shop["catalog"], {product_id: quantity}))]]
    )


def balance_then_transfer(rng: random.Random) -> Draft:
    bank = bank_state(rng, rng.randint(2, 3))
    source, target = rng.sample(sorted(bank["accounts"]), 2)
    balances = {aid: account["balance"] for aid, account in bank["accounts"].items()}
    amount = money_amount(rng, 5, min(300, balances[source]))
    turns = [
        phrase(rng, ("What is the balance of {a}?", "How much is in account {a}?"), a=source),
        phrase(
            rng,
            (
                "Now transfer {amt} from {a} to {b} and tell me the new balance of {b}.",
                "Move {amt} from {a} to {b}, then tell me the balance of {b}.",
            ),
            amt=money(amount),
            a=source,
            b=target,
        ),
    ]
    solution = [
        [call("get_balance", account_id=source)],
        [
            call("transfer", from_account=source, to_account=target, amount=amount),
            call("get_balance", account_id=target),
        ],
    ]
    answers = [[money(balances[source])], [money(add_money(balances[target], amount))]]
    return Draft({"bank": bank}, turns, solution, answers)


def move_file(rng: random.Random) -> Draft:
    files = files_state(rng, rng.randint(2, 4))
    source = rng.choice(sorted(files["files"]))
    target = new_path(rng, files["files"])
    turn = phrase(rng, ("Move the file {src} to {dst}.", "Rename {src} to {dst}."), src=source, dst=target)
    return Draft({"files": files}, [turn], [[call("move_file", source=source, destination=target)]], [[]])


TRAIN = (
    Template("bank_balance", bank_balance),
    Template("file_lookup", file_lookup),
    Template("send_message", send_message),
    Template("create_event", create_event),
    Template("order_status", order_status),
    Template("transfer_funds", transfer_funds),
    Template("write_note", write_note),
    Template("cart_total", cart_total),
    Template("copy_file", copy_file),
    Template("reschedule_event", reschedule_event),
    Template("buy_product", buy_product),
    Template("balance_then_transfer", balance_then_transfer),
)
HELDOUT = (Template("move_file", move_file),)
