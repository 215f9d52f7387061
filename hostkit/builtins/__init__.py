"""Builtin tool families, behind the effect seam and wired in by ``hostkit.host``.

One subpackage per family, each exporting its interface from its
``__init__`` and keeping helpers private:

- ``hostkit.builtins.process``: the owned process-tree lifecycle and the
  ``terminal.*`` effects;
- ``hostkit.builtins.files``: ``WorkspaceScope`` containment and the
  ``files.*`` effects;
- ``hostkit.builtins.web``: the URL policy, fetching under it and
  ``web.extract``.

The families sit beside ``hostkit.adapters``: above the seams, below the
Host. They reach ``hostkit.effects`` through its public interface only, and
``hostkit.effects`` never imports them. ``process`` uses ``files`` (a
terminal run works inside the workspace); ``files`` and ``web`` use no other
family.
"""

__all__: list[str] = []
