"""Span and attribute names: the OpenTelemetry GenAI semantic conventions, plus hostkit's own.

Checked against the conventions' registry (``gen_ai.provider.name`` replaced
the deprecated ``gen_ai.system``). Content attributes the conventions mark
opt-in and sensitive (``gen_ai.input.messages``, ``gen_ai.tool.call.arguments``,
``gen_ai.tool.call.result``) are never recorded.
"""

from __future__ import annotations

from typing import Final

OPERATION: Final = "gen_ai.operation.name"
PROVIDER: Final = "gen_ai.provider.name"
CONVERSATION: Final = "gen_ai.conversation.id"
AGENT_NAME: Final = "gen_ai.agent.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
RESPONSE_MODEL: Final = "gen_ai.response.model"
RESPONSE_ID: Final = "gen_ai.response.id"
FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
FIRST_CHUNK_S: Final = "gen_ai.response.time_to_first_chunk"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
TOOL_TYPE: Final = "gen_ai.tool.type"
ERROR_TYPE: Final = "error.type"

TURN_ID: Final = "hostkit.turn_id"
SESSION_ID: Final = "hostkit.session_id"
REQUEST_ID: Final = "hostkit.request_id"
STEP: Final = "hostkit.step"
OUTCOME: Final = "hostkit.turn.outcome"
EFFECT: Final = "hostkit.effect"
EFFECT_STATUS: Final = "hostkit.effect.status"
APPROVAL_ID: Final = "hostkit.approval_id"
# On a ``chat`` span: the call was a context compaction's summarizer, not a step's model call.
SUMMARY: Final = "hostkit.context.summary"

INVOKE_AGENT: Final = "invoke_agent"
CHAT: Final = "chat"
EXECUTE_TOOL: Final = "execute_tool"
