"""The bank app: accounts by id ("SAV-2") with a label and a balance, and a log of money movements.

Every movement (transfer, deposit, withdrawal) is appended to `transfers`, so the final state records
what was done, not only the balances: moving money back and forth does not look like doing nothing.
"""

from __future__ import annotations

from typing import Any

from coevolve.envs.toolworld.apps.base import App, ToolError, add_money, check_amount, lookup, next_id


class BankApp(App):
    """Accounts: id -> {label, balance}; transfers: id -> {from, to, amount}."""

    name = "bank"
    TOOLS = ("list_accounts", "get_balance", "transfer", "deposit", "withdraw", "list_transfers")

    @classmethod
    def empty_state(cls) -> dict[str, Any]:
        return {"accounts": {}, "transfers": {}}

    def _account(self, account_id: str) -> dict[str, Any]:
        return lookup(self.state["accounts"], account_id, "account")

    def _move(self, source: str | None, target: str | None, amount: float) -> str:
        """Apply one movement between accounts (None = cash in or out) and log it; returns its id."""
        amount = check_amount(amount)
        if source is not None:
            account = self._account(source)
            if account["balance"] < amount:
                raise ToolError(f"insufficient funds: {source} has {account['balance']:.2f}")
            account["balance"] = add_money(account["balance"], -amount)
        if target is not None:
            account = self._account(target)
            account["balance"] = add_money(account["balance"], amount)
        move_id = next_id("T", self.state["transfers"])
        self.state["transfers"][move_id] = {
            "from": source or "cash",
            "to": target or "cash",
            "amount": amount,
        }
        return move_id

    def list_accounts(self) -> list[dict[str, Any]]:
        """List all accounts with their labels and balances."""
        return [{"account_id": aid, **acc} for aid, acc in sorted(self.state["accounts"].items())]

    def get_balance(self, account_id: str) -> dict[str, Any]:
        """Get the current balance of an account.

        Args:
            account_id: Id of the account, e.g. "SAV-2".
        """
        return {"account_id": account_id, "balance": self._account(account_id)["balance"]}

    def transfer(self, from_account: str, to_account: str, amount: float) -> dict[str, Any]:
        """Move money from one account to another.

        Args:
            from_account: Id of the account to take the money from.
            to_account: Id of the account to put the money into.
            amount: How much to move, e.g. 125.50.
        """
        if from_account == to_account:
            raise ToolError("from_account and to_account must differ")
        for account_id in (from_account, to_account):
            self._account(account_id)
        transfer_id = self._move(from_account, to_account, amount)
        return {
            "transfer_id": transfer_id,
            "from_balance": self._account(from_account)["balance"],
            "to_balance": self._account(to_account)["balance"],
        }

    def deposit(self, account_id: str, amount: float) -> dict[str, Any]:
        """Put money into an account.

        Args:
            account_id: Id of the account.
            amount: How much to deposit, e.g. 40.00.
        """
        transfer_id = self._move(None, account_id, amount)
        return {"transfer_id": transfer_id, "balance": self._account(account_id)["balance"]}

    def withdraw(self, account_id: str, amount: float) -> dict[str, Any]:
        """Take money out of an account.

        Args:
            account_id: Id of the account.
            amount: How much to withdraw, e.g. 40.00.
        """
        transfer_id = self._move(account_id, None, amount)
        return {"transfer_id": transfer_id, "balance": self._account(account_id)["balance"]}

    def list_transfers(self, account_id: str = "") -> list[dict[str, Any]]:
        """List past money movements, optionally only those of one account.

        Args:
            account_id: Only list movements from or to this account; empty lists all.
        """
        return [
            {"transfer_id": tid, **move}
            for tid, move in sorted(self.state["transfers"].items())
            if not account_id or account_id in (move["from"], move["to"])
        ]
