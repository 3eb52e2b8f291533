"""When a cycle dated D decides: at D's close on its whole bar (the default), or at D's open (agent/markets.py has
the rule). Its own module so that reading the setting (agent/config.py, at every command's start) does not load
pandas and the exchange calendars with the rule."""

from __future__ import annotations

from typing import Literal, get_args

DecideAt = Literal["close", "open"]
DECIDE_AT: tuple[str, ...] = get_args(DecideAt)
