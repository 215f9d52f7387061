"""Host memory: list and forget agent memory items outside a turn (``host.memory``).

A full memory refuses every new item, and text a steered model stored keeps
steering it: operators and the people whose memory it is need to see the
items (with the session and turn that stored each) and remove them. The
store applies the (agent, owner) predicate in SQL; this module decides who
the owner is from a Host-issued scope.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from hostkit.authority import AuthorityResolver
from hostkit.errors import InvalidValue, ScopeError, bounded
from hostkit.store import MemoryItem, RuntimeStore
from hostkit.types import PrincipalScope, plain_text

__all__ = ["HostMemory"]

# The longest agent or principal name a memory call takes (the store's own limit).
_MAX_NAME = 300


class HostMemory:
    """Agent memory as operators and owners see it (``host.memory``).

    Every call takes a Host-issued ``PrincipalScope``. An operator (whose
    scope was issued with an audited reason) names the ``principal`` whose
    items it lists or forgets; anyone else acts on their own principal's
    items only, and naming another is a ``ScopeError``. An item id that is
    missing and one of another owner get the same ``NotFoundOrUnauthorized``.
    Each forget is written to the audit (``memory.forgotten``: who, why,
    which agent, owner and item) in the transaction that deletes it.
    """

    def __init__(
        self,
        *,
        store: RuntimeStore,
        authority: AuthorityResolver,
        agents: Callable[[], Collection[str]],
    ) -> None:
        self._store = store
        self._authority = authority
        self._agents = agents

    async def list(
        self,
        scope: PrincipalScope,
        agent: str,
        *,
        principal: str | None = None,
        limit: int = 50,
        before: int | None = None,
    ) -> list[MemoryItem]:
        """The owner's items newest first, with provenance; ``before`` (an item id) pages on.

        ``limit`` is 1..``hostkit.store.MAX_MEMORY_LIST``.
        """
        owner = self._owner(scope, principal)
        agent = await self._agent(agent, owner)
        items = await self._store.memory.list_items(
            agent=agent, owner=owner, limit=limit, before=before
        )
        return list(items)

    async def forget(
        self,
        scope: PrincipalScope,
        agent: str,
        item_id: int,
        *,
        principal: str | None = None,
        reason: str = "forgotten",
    ) -> MemoryItem:
        """Delete one of the owner's items and return it (audited)."""
        owner = self._owner(scope, principal)
        return await self._store.memory.forget(
            agent=await self._agent(agent, owner),
            owner=owner,
            item_id=item_id,
            by=scope,
            reason=reason,
        )

    async def forget_all(
        self,
        scope: PrincipalScope,
        agent: str,
        *,
        principal: str | None = None,
        reason: str = "forgotten",
    ) -> int:
        """Delete every item of the owner; returns how many (audited)."""
        owner = self._owner(scope, principal)
        return await self._store.memory.forget_all(
            agent=await self._agent(agent, owner), owner=owner, by=scope, reason=reason
        )

    async def _agent(self, agent: object, owner: str) -> str:
        """``agent`` when this Host runs it or the owner has items of it (an agent since
        removed from the configuration); else ``InvalidValue`` naming the agents it runs:
        a mistyped name must not read as "nothing there" or "forgot 0 items"."""
        name = _name("agent", agent)
        known = self._agents()
        if name in known or await self._store.memory.list_items(agent=name, owner=owner, limit=1):
            return name
        runs = ", ".join(sorted(known)[:20]) or "none"
        raise InvalidValue(f"no agent {bounded(name, 80)!r} here (agents: {runs})")

    def _owner(self, scope: PrincipalScope, principal: str | None) -> str:
        """Whose items a call acts on: an operator names them, anyone else is them."""
        scope = self._authority.verify(scope)
        if scope.authority == "operator":
            if principal is None:
                raise InvalidValue("an operator names the principal whose memory it acts on")
            return _name("principal", principal)
        if principal is not None and _name("principal", principal) != scope.principal_id:
            raise ScopeError("only an operator acts on another principal's memory")
        return scope.principal_id


def _name(what: str, value: object) -> str:
    """``value`` as a plain ``str``, or ``InvalidValue`` naming ``what``."""
    text = plain_text(value, limit=_MAX_NAME)
    if text is None or not text.strip():
        raise InvalidValue(f"{what} must be 1-{_MAX_NAME} characters of valid text")
    return text
