"""hostkit in Jupyter: the Host on the kernel's loop, turns as panels, approvals as clicks.

```python
import hostkit.notebook as hn
nb = await hn.start()                 # once per kernel; ./hostkit.toml or the default
view = nb.chat("Summarise notes.md")  # returns the live panel at once
result = await view                   # later, in another cell
await nb.dashboard()                  # sessions, running turns, approvals, budget
await nb.inbox_monitor()              # the channel inbox: counts, dead letters to requeue
await nb.core_history("notes")        # an Agent Core: revisions, promotions and gates, pins
served = await nb.serve(port=0)       # hostkit serve on the kernel's loop; a live status widget
await nb.stop_serving()               # drain and stop it
```

Importing it without the notebook extra raises ``hostkit.MissingDependency``
(also an ``ImportError``) naming the package and ``pip install "hostkit[notebook]"``,
before any widget module is imported.
"""

# ruff: noqa: E402  (the widget modules are imported after the extra's check)
from hostkit._extras import require_extra

require_extra("notebook", feature="hostkit.notebook")

from hostkit.notebook._approver import WidgetApprover
from hostkit.notebook._browser import SessionBrowser
from hostkit.notebook._catalog import CatalogInspector
from hostkit.notebook._cores import CoreHistory
from hostkit.notebook._dashboard import Dashboard, RunningTurn
from hostkit.notebook._host import NotebookHost, current, start
from hostkit.notebook._inbox import InboxMonitor
from hostkit.notebook._inspectors import (
    ApprovalsPanel,
    BudgetInspector,
    ContextInspector,
)
from hostkit.notebook._magic import load_ipython_extension
from hostkit.notebook._serve import ServeHandle, ServeMonitor
from hostkit.notebook._turn import ApprovalPending, ApprovalRow, TurnView

__all__ = [
    "ApprovalPending",
    "ApprovalRow",
    "ApprovalsPanel",
    "BudgetInspector",
    "CatalogInspector",
    "ContextInspector",
    "CoreHistory",
    "Dashboard",
    "InboxMonitor",
    "NotebookHost",
    "RunningTurn",
    "ServeHandle",
    "ServeMonitor",
    "SessionBrowser",
    "TurnView",
    "WidgetApprover",
    "current",
    "load_ipython_extension",
    "start",
]
