"""The shop app: a catalog of products, a cart (product id -> quantity) and orders.

Checkout turns the cart into an order and takes the items out of stock; cancelling a placed order puts
them back. Money is rounded to cents by `order_total`, which task templates reuse to know the totals.
"""

from __future__ import annotations

from typing import Any

from coevolve.envs.toolworld.apps.base import App, ToolError, check_text, lookup, next_id, shown

MAX_QUANTITY = 99


def order_total(catalog: dict[str, Any], items: dict[str, int]) -> float:
    """Sum of price x quantity over `items`, rounded to cents."""
    return round(sum(catalog[pid]["price"] * qty for pid, qty in items.items()), 2)


class ShopApp(App):
    """Catalog: id -> {name, price, stock}; cart: id -> quantity; orders: id -> {items, total, status}."""

    name = "shop"
    TOOLS = (
        "search_products",
        "get_product",
        "add_to_cart",
        "remove_from_cart",
        "view_cart",
        "checkout",
        "get_order",
        "cancel_order",
    )

    @classmethod
    def empty_state(cls) -> dict[str, Any]:
        return {"catalog": {}, "cart": {}, "orders": {}}

    def search_products(self, query: str) -> list[dict[str, Any]]:
        """Search the catalog by product name (case-insensitive).

        Args:
            query: Text to look for in product names, e.g. "lamp".
        """
        needle = check_text(query, "query").lower()
        return [
            {"product_id": pid, **product}
            for pid, product in sorted(self.state["catalog"].items())
            if needle in product["name"].lower()
        ]

    def get_product(self, product_id: str) -> dict[str, Any]:
        """Show a product's name, price and stock.

        Args:
            product_id: Id of the product, e.g. "P-104".
        """
        return {"product_id": product_id, **lookup(self.state["catalog"], product_id, "product")}

    def add_to_cart(self, product_id: str, quantity: int = 1) -> dict[str, Any]:
        """Put a quantity of a product into the cart.

        Args:
            product_id: Id of the product, e.g. "P-104".
            quantity: How many to add (default 1).
        """
        product = lookup(self.state["catalog"], product_id, "product")
        if not 1 <= quantity <= MAX_QUANTITY:
            raise ToolError(f"quantity must be between 1 and {MAX_QUANTITY}, got {shown(quantity)}")
        in_cart = self.state["cart"].get(product_id, 0) + quantity
        if in_cart > product["stock"]:
            raise ToolError(f"only {product['stock']} of {product_id} in stock")
        self.state["cart"][product_id] = in_cart
        return {"product_id": product_id, "in_cart": in_cart}

    def remove_from_cart(self, product_id: str) -> dict[str, Any]:
        """Take a product out of the cart.

        Args:
            product_id: Id of the product, e.g. "P-104".
        """
        lookup(self.state["cart"], product_id, "product in the cart")
        del self.state["cart"][product_id]
        return {"product_id": product_id, "removed": True}

    def view_cart(self) -> dict[str, Any]:
        """Show the items in the cart and the cart total."""
        catalog, cart = self.state["catalog"], self.state["cart"]
        items = [
            {"product_id": pid, "name": catalog[pid]["name"], "price": catalog[pid]["price"], "quantity": qty}
            for pid, qty in sorted(cart.items())
        ]
        return {"items": items, "total": order_total(catalog, cart)}

    def checkout(self) -> dict[str, Any]:
        """Buy everything in the cart: creates an order and empties the cart."""
        cart = self.state["cart"]
        if not cart:
            raise ToolError("the cart is empty")
        total = order_total(self.state["catalog"], cart)
        order_id = next_id("O", self.state["orders"])
        self.state["orders"][order_id] = {"items": dict(cart), "total": total, "status": "placed"}
        for pid, qty in cart.items():
            self.state["catalog"][pid]["stock"] -= qty
        self.state["cart"] = {}
        return {"order_id": order_id, "total": total, "status": "placed"}

    def get_order(self, order_id: str) -> dict[str, Any]:
        """Show an order's items, total and status.

        Args:
            order_id: Id of the order, e.g. "O-5001".
        """
        return {"order_id": order_id, **lookup(self.state["orders"], order_id, "order")}

    def cancel_order(self, order_id: str) -> dict[str, Any]:
        """Cancel an order that has not shipped yet (status "placed").

        Args:
            order_id: Id of the order, e.g. "O-5001".
        """
        order = lookup(self.state["orders"], order_id, "order")
        if order["status"] != "placed":
            raise ToolError(f"order {order_id} is {order['status']} and can no longer be cancelled")
        order["status"] = "cancelled"
        for pid, qty in order["items"].items():
            if pid in self.state["catalog"]:
                self.state["catalog"][pid]["stock"] += qty
        return {"order_id": order_id, "status": "cancelled", "total": order["total"]}
