"""Model factory: the offline deterministic model by default, ChatOpenAI when configured."""
from __future__ import annotations

import os
from typing import Literal

from langchain_core.language_models import BaseChatModel

from agent.config import AgentConfig, ConfigError

Tier = Literal["quick", "deep"]


def make_model(config: AgentConfig, tier: Tier = "quick") -> BaseChatModel:
    name = config.deep_model if tier == "deep" else config.quick_model
    if config.provider == "offline":
        from agent.offline_model import OfflineChatModel

        return OfflineChatModel(model_name=name)
    if config.provider == "openai":
        from langchain_openai import ChatOpenAI

        if not os.environ.get("OPENAI_API_KEY"):
            raise ConfigError("TRADEGRAPH_LLM=openai needs OPENAI_API_KEY to be set")
        # temperature 0 and a seed: as reproducible as the server allows; replay is the real guarantee
        return ChatOpenAI(
            model=name,
            temperature=0,
            seed=7,
            base_url=os.environ.get("OPENAI_BASE_URL") or None,
            timeout=float(os.environ.get("TRADEGRAPH_LLM_TIMEOUT", "60")),
            max_retries=2,
        )
    raise ConfigError(f"unknown model provider {config.provider!r}")
