"""hostkit's version: the one place it is written.

pyproject.toml reads it from here (``[tool.hatch.version]``) and ``hostkit.__version__``
re-exports it, so the installed distribution's metadata and the package always agree.
"""

__version__ = "0.1.0"
