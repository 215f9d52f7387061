"""Inspector view-models: frozen, front-end-neutral views of what the Host recorded.

Built from the store's owner-checked ``inspect`` queries and the typed
``ContextDecision`` records: a foreign and a missing id get the same
``NotFoundOrUnauthorized``. The values carry counts, budgets, names and ids,
never message content (``CoreHistoryView`` adds a core's revisions and
promotions, read from its Git repository and the store's cores group). The
CLI tables and the notebook widgets are drawn from these values alone;
nothing here renders or decides policy, except ``one_line``: the one rule
both front ends share for showing outside text on one line.
"""

from hostkit.inspect._budget import (
    BudgetView,
    CalibrationView,
    StepUsage,
    TokenTotals,
    TurnUsage,
    budget_view,
)
from hostkit.inspect._catalog import (
    CatalogRow,
    CatalogState,
    CatalogView,
    catalog_rows,
    catalog_view,
)
from hostkit.inspect._context import ContextStep, ContextView, context_view
from hostkit.inspect._cores import CoreHistoryView, PinRow, core_history, core_history_of
from hostkit.inspect._delivery import (
    MAX_INTENT_ID,
    DeliveryRows,
    DeliveryView,
    delivery_counts,
    delivery_intent,
    delivery_rows,
    delivery_status,
    delivery_view,
    intent_id,
    retry_delivery,
)
from hostkit.inspect._effects import (
    EffectAuditRows,
    TerminalRunRows,
    effect_audit_rows,
    terminal_run_rows,
)
from hostkit.inspect._inbox import (
    INBOX_STATES,
    InboxCounts,
    InboxRows,
    InboxView,
    inbox_counts,
    inbox_of,
    inbox_rows,
    inbox_state,
    inbox_view,
)
from hostkit.inspect._lists import (
    MAX_APPROVALS,
    ActivityRows,
    ApprovalRows,
    SessionRows,
    activity_rows,
    approval_rows,
    latest_session,
    session_rows,
)
from hostkit.inspect._mcp import McpServerRow, McpServerRows, mcp_server_rows, mcp_server_view
from hostkit.inspect._prices import PRICES, ModelPrice, cost_text, price_for
from hostkit.inspect._source import MAX_STEPS, MAX_TURNS
from hostkit.inspect._text import (
    HIDDEN_NOTE,
    one_line,
    one_line_hides,
    printable,
    printable_json,
    printable_text,
    prose_text,
)

__all__ = [
    "HIDDEN_NOTE",
    "INBOX_STATES",
    "MAX_APPROVALS",
    "MAX_INTENT_ID",
    "MAX_STEPS",
    "MAX_TURNS",
    "PRICES",
    "ActivityRows",
    "ApprovalRows",
    "BudgetView",
    "CalibrationView",
    "CatalogRow",
    "CatalogState",
    "CatalogView",
    "ContextStep",
    "ContextView",
    "CoreHistoryView",
    "DeliveryRows",
    "DeliveryView",
    "EffectAuditRows",
    "InboxCounts",
    "InboxRows",
    "InboxView",
    "McpServerRow",
    "McpServerRows",
    "ModelPrice",
    "PinRow",
    "SessionRows",
    "StepUsage",
    "TerminalRunRows",
    "TokenTotals",
    "TurnUsage",
    "activity_rows",
    "approval_rows",
    "budget_view",
    "catalog_rows",
    "catalog_view",
    "context_view",
    "core_history",
    "core_history_of",
    "cost_text",
    "delivery_counts",
    "delivery_intent",
    "delivery_rows",
    "delivery_status",
    "delivery_view",
    "effect_audit_rows",
    "inbox_counts",
    "inbox_of",
    "inbox_rows",
    "inbox_state",
    "inbox_view",
    "intent_id",
    "latest_session",
    "mcp_server_rows",
    "mcp_server_view",
    "one_line",
    "one_line_hides",
    "price_for",
    "printable",
    "printable_json",
    "printable_text",
    "prose_text",
    "retry_delivery",
    "session_rows",
    "terminal_run_rows",
]
