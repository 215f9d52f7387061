"""hostkit.daemon: named daemons under one supervisor (the contract's DaemonRegistry and run).

The package knows nothing of turns or Hosts: a daemon is anything with
``run(task_status=)`` and ``stop()``. ``hostkit.host`` builds the registry
from a Host's generation (``HostDaemon``) and ``hostkit serve`` runs it.
"""

from hostkit.daemon._policy import RestartPolicy
from hostkit.daemon._registry import MAX_DAEMONS, Daemon, DaemonRegistry, Registered, RunFunction
from hostkit.daemon._status import DAEMON_STATES, DaemonExit, DaemonState, DaemonStatus
from hostkit.daemon._supervisor import Supervisor, run

__all__ = [
    "DAEMON_STATES",
    "MAX_DAEMONS",
    "Daemon",
    "DaemonExit",
    "DaemonRegistry",
    "DaemonState",
    "DaemonStatus",
    "Registered",
    "RestartPolicy",
    "RunFunction",
    "Supervisor",
    "run",
]
