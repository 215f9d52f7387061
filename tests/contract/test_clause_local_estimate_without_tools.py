"""Tool schemas are budgeted only where the model's prompt holds them.

The embedded model's chat template (SmolLM2's ChatML) has no place for tool
definitions or tool-call arguments: llama.cpp renders a request with
``tools`` to the same prompt as one without (``tools_offered`` in the
recorded usage). Its exact estimator, built from the GGUF's own template,
counts neither, so its estimate with tools is llama.cpp's reported prompt
tokens, as it is without. A model whose template renders tools, and every
provider estimated by the default ``CharEstimator`` (a scripted model, an
OpenAI-compatible server), keeps its schemas counted.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hostkit.adapters.gguf_tokenizer import load_gguf_tokenizer
from hostkit.adapters.local_llama import load_local_estimator
from hostkit.authority import AuthorityResolver
from hostkit.context import CharEstimator, ContextManager, EstimatorRegistry, TokenizerEstimator
from hostkit.store import RuntimeStore
from hostkit.testing import ScriptedModel
from hostkit.types import ContextRequest, ModelLimits, ModelMessage, ToolCall, ToolDefinition
from tests.contract.test_context_basic import context_for
from tests.contract.test_context_estimator import Recorded, needs_gguf, recorded
from tests.support import facts

SCHEMA = ToolDefinition(
    "get_weather",
    "The current weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
# ChatML as SmolLM2 has it, and the same with Qwen2.5's tools block and tool calls.
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
CHATML_WITH_TOOLS = (
    "{% if tools %}{{ '<|im_start|>system\\n# Tools\\n' }}{% for tool in tools %}"
    "{{ tool | tojson }}{% endfor %}{{ '<|im_end|>\\n' }}{% endif %}"
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] }}{% for call in message.tool_calls or [] %}"
    "{{ call.function | tojson }}{% endfor %}{{ '<|im_end|>\\n' }}{% endfor %}"
)


@pytest.fixture(scope="module")
def gguf() -> TokenizerEstimator:
    return anyio.run(load_local_estimator)


def recorded_case(name: str) -> Recorded:
    (case,) = [case for case in recorded() if case[0] == name]
    return case


@needs_gguf
@pytest.mark.parametrize(
    "name", ["tools_offered", "tools_offered_no_system", "tool_result_turn", "tool_result_no_defs"]
)
def test_clause_the_embedded_model_is_estimated_exactly_with_tools(
    gguf: TokenizerEstimator, name: str
) -> None:
    _name, messages, definitions, reported = recorded_case(name)
    assert gguf.renders_definitions is False
    assert gguf.renders_tool_calls is False
    assert gguf.definitions(definitions) == 0
    assert gguf.request(messages, definitions) == reported


@needs_gguf
@pytest.mark.anyio
async def test_clause_the_context_manager_budgets_no_schemas_for_the_embedded_model(
    gguf: TokenizerEstimator, store: RuntimeStore, authority: AuthorityResolver
) -> None:
    _name, (system, user), definitions, reported = recorded_case("tools_offered")
    assert definitions, "the recorded request offers tools"
    estimators = EstimatorRegistry()
    estimators.register(gguf)
    manager = ContextManager(store, estimators=estimators)
    scope = await authority.for_conversation(facts("c"))
    limits = ModelLimits(context_window=2048, max_output_tokens=512, estimator_id=gguf.estimator_id)
    ready = await manager.prepare(
        ContextRequest(
            context=context_for(scope),
            step_id=0,
            limits=limits,
            messages=(user,),
            definitions=definitions,
            instructions=system.content,
        )
    )
    assert ready.kind == "ready"
    schemas = next(layer for layer in ready.layers if layer.name == "schemas")
    assert (schemas.tokens, schemas.items) == (0, len(definitions))
    assert ready.estimated_input_tokens == reported


@pytest.mark.anyio
async def test_clause_a_provider_sent_tools_still_has_its_schemas_counted(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    # A scripted model (like an OpenAI-compatible server) declares no tokenizer of its own:
    # the default estimator counts what the schemas add to the request.
    manager = ContextManager(store)
    scope = await authority.for_conversation(facts("c"))
    ready = await manager.prepare(
        ContextRequest(
            context=context_for(scope),
            step_id=0,
            limits=ScriptedModel([]).limits,
            messages=(ModelMessage("user", "What is the weather in Oslo?"),),
            definitions=(SCHEMA,),
        )
    )
    assert ready.kind == "ready"
    schemas = next(layer for layer in ready.layers if layer.name == "schemas")
    assert schemas.tokens == CharEstimator().definitions([SCHEMA]) > 0
    assert schemas.items == 1
    assert ready.estimated_input_tokens == sum(layer.tokens for layer in ready.layers)


def test_clause_a_tokenizer_estimator_counts_schemas_and_calls_unless_told_not_to() -> None:
    call = ModelMessage("assistant", "", (ToolCall("c1", "get_weather", {"city": "Oslo"}),))
    counted = TokenizerEstimator(lambda text: len(text.split()), estimator_id="words")
    dropped = TokenizerEstimator(
        lambda text: len(text.split()),
        estimator_id="words-no-tools",
        renders_definitions=False,
        renders_tool_calls=False,
    )
    assert counted.renders_definitions
    assert counted.renders_tool_calls
    assert counted.definitions([SCHEMA]) > 0
    assert counted.message(call) > counted.message(ModelMessage("assistant", ""))
    assert dropped.definitions([SCHEMA]) == 0
    assert dropped.message(call) == dropped.message(ModelMessage("assistant", ""))
    assert dropped.request([call], [SCHEMA]) == dropped.request([call])


@needs_gguf
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("template", "renders"), [(CHATML, False), (CHATML_WITH_TOOLS, True), ("", True)]
)
async def test_clause_a_gguf_template_that_renders_tools_keeps_them_counted(
    tmp_path: Path, template: str, renders: bool
) -> None:
    path = tmp_path / "tiny.gguf"
    await anyio.to_thread.run_sync(_write_tiny_gguf, path, template)
    estimator = await load_gguf_tokenizer(path)
    call = ModelMessage("assistant", "", (ToolCall("c1", "get_weather", {"city": "Oslo"}),))
    assert estimator.renders_definitions is renders
    assert estimator.renders_tool_calls is renders
    assert (estimator.definitions([SCHEMA]) > 0) is renders
    assert (estimator.message(call) > estimator.message(ModelMessage("assistant", ""))) is renders


def _write_tiny_gguf(path: Path, template: str) -> None:
    """A byte-level BPE GGUF of a few tokens with ``template`` as its chat template."""
    from gguf import GGUFWriter

    tokens = ["<|im_start|>", "<|im_end|>", *"abcdefghijklmnopqrstuvwxyz", "Ġ", "Ċ", "ab"]
    writer = GGUFWriter(str(path), arch="llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3, *[1] * (len(tokens) - 2)])
    writer.add_token_merges(["a b"])
    if template:
        writer.add_chat_template(template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
