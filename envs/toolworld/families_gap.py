"""Gap families: tasks of the tools that no training family calls (the coverage experiment).

Every family here calls a tool of an app the training families already load (bank, files, messages,
shop, calendar), so an episode of a training task offers it, but no training family, no warm start and no
prompt example ever calls it, and no strategy without it solves the family's tasks (`gap_check`: every
covered tool call the task's world admits and every argument-free listing, scored by the task's checker). A static training set never shows these skills; CoEvolve's exploration can
find them (docs/experiments/learning-protocol.md, the coverage regime). They are the tool world's `gap`
splits (`gap-validation`, `gap-test`), drawn only from the families named by the environment option
`gap_families`, and never part of `train`, `test` or `validation`. None has the shape of a
`heldout-templates` family (move_file alone, or the multi-call cross-app chains), so that split stays the
test of new compositions.

`CANDIDATES` are the families a plan may name; `RETIRED` are the first coverage plan's families that
`gap_check` found solvable without their tool (a covered listing or lookup shows the answer, or
`write_file` rewrites the file), kept only so that plan's recorded runs still draw their splits.
"""

from __future__ import annotations

import random

from coevolve.envs.toolworld.checker import money
from coevolve.envs.toolworld.state_builders import (
    DOMAINS,
    NAMES,
    NOTE_TEXTS,
    bank_state,
    calendar_state,
    files_state,
    messages_state,
    money_amount,
    shop_state,
)
from coevolve.envs.toolworld.templates import Draft, Template, call, phrase


def deposit_funds(rng: random.Random) -> Draft:
    bank = bank_state(rng, rng.randint(2, 4))
    account, amount = rng.choice(sorted(bank["accounts"])), money_amount(rng, 5, 500)
    turn = phrase(rng, ("Deposit {amt} into account {a}.", "Put {amt} into {a}.", "Please deposit {amt} to {a}."),
                  amt=money(amount), a=account)  # fmt: skip
    return Draft({"bank": bank}, [turn], [[call("deposit", account_id=account, amount=amount)]], [[]])


def withdraw_funds(rng: random.Random) -> Draft:
    bank = bank_state(rng, rng.randint(2, 4))
    account = rng.choice(sorted(bank["accounts"]))
    amount = money_amount(rng, 5, min(300, bank["accounts"][account]["balance"]))
    turn = phrase(rng, ("Withdraw {amt} from account {a}.", "Take {amt} out of {a}.", "Please withdraw {amt} from {a}."),
                  amt=money(amount), a=account)  # fmt: skip
    return Draft({"bank": bank}, [turn], [[call("withdraw", account_id=account, amount=amount)]], [[]])


def delete_file(rng: random.Random) -> Draft:
    files = files_state(rng, rng.randint(2, 4))
    path = rng.choice(sorted(files["files"]))
    turn = phrase(rng, ("Delete the file {p}.", "Remove {p} from my files.", "Please delete {p}."), p=path)
    return Draft({"files": files}, [turn], [[call("delete_file", path=path)]], [[]])


def append_note(rng: random.Random) -> Draft:
    files = files_state(rng, rng.randint(2, 4))
    path, text = rng.choice(sorted(files["files"])), rng.choice(NOTE_TEXTS)
    turn = phrase(rng, ("Add the line '{t}' at the end of {p}.", "Append '{t}' to the file {p}.",
                        "Add '{t}' as a new line in {p}."), t=text, p=path)  # fmt: skip
    return Draft({"files": files}, [turn], [[call("append_to_file", path=path, text=text)]], [[]])


def cancel_order(rng: random.Random) -> Draft:
    shop = shop_state(rng, 4, rng.randint(2, 3), statuses=("placed",))
    order = rng.choice(sorted(shop["orders"]))
    turn = phrase(rng, ("Cancel order {o}.", "Please cancel my order {o}.", "I want to cancel order {o}."), o=order)
    return Draft({"shop": shop}, [turn], [[call("cancel_order", order_id=order)]], [[]])


def contact_email(rng: random.Random) -> Draft:
    messages = messages_state(rng, rng.randint(2, 4), rng.randint(0, 2))
    name = rng.choice(sorted(messages["contacts"]))
    turn = phrase(rng, ("What is {n}'s email address?", "Look up the contact {n}. What is their email?",
                        "Tell me the email of my contact {n}."), n=name)  # fmt: skip
    return Draft({"messages": messages}, [turn], [[call("get_contact", name=name)]],
                 [[messages["contacts"][name]["email"]]])  # fmt: skip


def delete_message(rng: random.Random) -> Draft:
    messages = messages_state(rng, rng.randint(2, 4), rng.randint(2, 3))
    message_id = rng.choice(sorted(messages["inbox"]))
    turn = phrase(rng, ("Delete message {m} from my inbox.", "Remove the message {m}.", "Please delete message {m}."),
                  m=message_id)  # fmt: skip
    return Draft({"messages": messages}, [turn], [[call("delete_message", message_id=message_id)]], [[]])


def remove_from_cart(rng: random.Random) -> Draft:
    shop = shop_state(rng, 4, 1)
    in_cart = rng.sample(sorted(shop["catalog"]), 2)
    shop["cart"] = {pid: rng.randint(1, 2) for pid in in_cart}
    product = rng.choice(in_cart)
    turn = phrase(rng, ("Remove {p} from my cart.", "Take {p} out of the cart.", "Please remove product {p} from the cart."),
                  p=product)  # fmt: skip
    return Draft({"shop": shop}, [turn], [[call("remove_from_cart", product_id=product)]], [[]])


def product_price(rng: random.Random) -> Draft:
    shop = shop_state(rng, 4, 1)
    product = rng.choice(sorted(shop["catalog"]))
    turn = phrase(rng, ("What is the price of product {p}?", "How much does {p} cost?", "Look up product {p} and tell me its price."),
                  p=product)  # fmt: skip
    return Draft({"shop": shop}, [turn], [[call("get_product", product_id=product)]],
                 [[money(shop["catalog"][product]["price"])]])  # fmt: skip


def add_contact(rng: random.Random) -> Draft:
    messages = messages_state(rng, rng.randint(2, 3), rng.randint(0, 2))
    name = rng.choice([n for n in NAMES if n not in messages["contacts"]])
    email = f"{name.lower()}@{rng.choice(DOMAINS)}"
    turn = phrase(rng, ("Add {n} to my contacts with the email {e}.", "Save a new contact {n}, email {e}.",
                        "Create a contact {n} whose email is {e}."), n=name, e=email)  # fmt: skip
    return Draft({"messages": messages}, [turn], [[call("add_contact", name=name, email=email)]], [[]])


def event_date(rng: random.Random) -> Draft:
    calendar = calendar_state(rng, rng.randint(2, 4))
    event_id = rng.choice(sorted(calendar["events"]))
    turn = phrase(rng, ("On which date is event {e}?", "Look up event {e}. What is its date?",
                        "Tell me the date of calendar event {e}."), e=event_id)  # fmt: skip
    return Draft({"calendar": calendar}, [turn], [[call("get_event", event_id=event_id)]],
                 [[calendar["events"][event_id]["date"]]])  # fmt: skip


def find_file(rng: random.Random) -> Draft:
    files = files_state(rng, rng.randint(2, 4))
    path = rng.choice(sorted(files["files"]))
    label = files["files"][path].partition(": ")[0]
    turn = phrase(rng, ("Which file holds my {l}? Tell me its path.", "Search my files for the {l} and tell me which file it is in.",
                        "Find the file that mentions the {l}."), l=label)  # fmt: skip
    return Draft({"files": files}, [turn], [[call("search_files", text=label)]], [[path]])


def delete_found_file(rng: random.Random) -> Draft:
    files = files_state(rng, rng.randint(2, 4))
    path = rng.choice(sorted(files["files"]))
    label = files["files"][path].partition(": ")[0]
    turn = phrase(rng, ("Find the file that holds my {l} and delete it.", "Search my files for the {l} and delete that file.",
                        "Delete the file that mentions the {l}."), l=label)  # fmt: skip
    return Draft({"files": files}, [turn], [[call("search_files", text=label), call("delete_file", path=path)]], [[]])


def empty_account(rng: random.Random) -> Draft:
    bank = bank_state(rng, rng.randint(2, 4))
    account = rng.choice(sorted(bank["accounts"]))
    balance = bank["accounts"][account]["balance"]
    turn = phrase(rng, ("Withdraw everything in account {a}.", "Take all the money out of {a}.",
                        "Please empty account {a}: withdraw its whole balance."), a=account)  # fmt: skip
    return Draft({"bank": bank}, [turn], [[call("list_accounts"), call("withdraw", account_id=account, amount=balance)]],
                 [[]])  # fmt: skip


CANDIDATES: tuple[Template, ...] = (
    Template("deposit_funds", deposit_funds),
    Template("withdraw_funds", withdraw_funds),
    Template("delete_file", delete_file),
    Template("cancel_order", cancel_order),
    Template("delete_message", delete_message),
    Template("remove_from_cart", remove_from_cart),
    Template("add_contact", add_contact),
    Template("delete_found_file", delete_found_file),
    Template("empty_account", empty_account),
)
"""Every gap family a plan may name (each needs its gap tool); an experiment fixes its own set (`gap_families`)."""
RETIRED: tuple[Template, ...] = (
    Template("append_note", append_note),
    Template("contact_email", contact_email),
    Template("product_price", product_price),
    Template("event_date", event_date),
    Template("find_file", find_file),
)
"""The first coverage plan's families that a strategy without their tool solves (`gap_check`): `append_note`
(`write_file` with the old content and the new line), `contact_email` (`list_contacts`), `product_price`
(`search_products` by the product's name), `event_date` (`list_events`), `find_file` (`list_files`). Drawable
only so that plan's records keep their splits."""
