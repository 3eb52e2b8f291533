"""A slow model: the offline model, held at its first answer until the test opens the gate, so a cycle is in flight
for as long as the test needs (a model call longer than any timeout, without waiting for one)."""

from __future__ import annotations

import threading

from pydantic import PrivateAttr

from agent.offline_model import OfflineChatModel


class GatedModel(OfflineChatModel):
    _entered: threading.Event = PrivateAttr(default_factory=threading.Event)
    _gate: threading.Event = PrivateAttr(default_factory=threading.Event)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self._entered.set()
        if not self._gate.wait(300):
            raise TimeoutError("the test never opened the gate")
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

    def wait_entered(self, timeout_s: float = 120) -> bool:
        """True once a cycle is waiting on this model's answer."""
        return self._entered.wait(timeout_s)

    def open(self) -> None:
        self._gate.set()
