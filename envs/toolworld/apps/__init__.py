"""The stateful apps of the tool world (files, messages, calendar, shop, bank).

`APP_CLASSES` fixes the order apps (and so tools) are listed in; an app's `name` is its key in a task's
`initial_state`.
"""

from coevolve.envs.toolworld.apps.bank import BankApp
from coevolve.envs.toolworld.apps.base import App, ToolError
from coevolve.envs.toolworld.apps.calendar import CalendarApp
from coevolve.envs.toolworld.apps.files import FilesApp
from coevolve.envs.toolworld.apps.messages import MessagesApp
from coevolve.envs.toolworld.apps.shop import ShopApp

APP_CLASSES: tuple[type[App], ...] = (FilesApp, MessagesApp, CalendarApp, ShopApp, BankApp)

__all__ = ["APP_CLASSES", "App", "BankApp", "CalendarApp", "FilesApp", "MessagesApp", "ShopApp", "ToolError"]
