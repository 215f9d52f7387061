"""``model_path`` in a local provider: serve a GGUF of your own (offline machines).

The embedded model's file is otherwise the cached or fetched SmolLM2
(``hostkit model pull``); the error of a failed fetch points at this key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hostkit.errors import ConfigError
from hostkit.host import DefaultCapabilities, ProviderRequest, parse_config
from hostkit.store import RuntimeStore


def provider_config(tmp_path: Path, provider: dict[str, Any]) -> Any:
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": "workspace"},
            "providers": {"assistant": provider},
            "agents": {"assistant": {"provider": "assistant"}},
        },
        base_dir=tmp_path,
    )


@pytest.mark.parametrize("kind", ["openai", "anthropic", "scripted"])
def test_model_path_belongs_to_the_local_kind_only(tmp_path: Path, kind: str) -> None:
    with pytest.raises(ConfigError) as caught:
        provider_config(tmp_path, {"kind": kind, "model_path": "model.gguf"})
    assert "providers.assistant" in str(caught.value)
    assert "model_path is for kind" in str(caught.value)


def test_an_empty_model_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="model_path"):
        provider_config(tmp_path, {"kind": "local", "model_path": ""})


@pytest.mark.anyio
async def test_the_local_provider_serves_the_configured_file_relative_to_the_config(
    tmp_path: Path, store: RuntimeStore
) -> None:
    # A path that names no file is refused before any server starts or anything is
    # fetched; the error names the file resolved against the configuration's folder.
    config = provider_config(tmp_path, {"kind": "local", "model_path": "models/mine.gguf"})
    caps = DefaultCapabilities.from_config(config, store=store)
    try:
        with pytest.raises(ConfigError) as caught:
            await caps.providers.model_provider(ProviderRequest(config, "assistant"))
    finally:
        await caps.aclose()
    assert str(tmp_path / "models" / "mine.gguf") in str(caught.value)
    assert caught.value.key == "model_path"
