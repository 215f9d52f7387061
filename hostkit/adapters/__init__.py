"""Concrete adapters behind the seams' protocols (model providers, approvers, transports).

Only ``hostkit.host`` (DefaultCapabilities) and the front ends import this package.
"""

import os
from collections.abc import Mapping

__all__ = ["NO_API_KEY", "unset_default_key"]

# Raised with key="api_key_env": a secret-named key right before a colon ("api_key: no")
# would read as an assignment, and the redactor would mask the first word of the fix.
NO_API_KEY = (
    "no API key: set the environment variable {variable}, or name another one in the "
    "provider's api_key_env (in Python, api_key_env in a model={{...}} dict, or the "
    "provider's api_key argument)"
)


# kind -> (the SDK's key variable, another that lets it go without: a base URL or a token).
_DEFAULT_KEYS = {
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
}


def unset_default_key(
    kind: str, *, base_url: str | None, environ: Mapping[str, str] | None = None
) -> str | None:
    """The variable a ``kind`` provider given no key and no ``api_key_env`` lacks, or None.

    The one rule for the adapters, which refuse to build without it, and for a
    configuration reload, which must refuse what every turn would then be refused for.
    A ``base_url`` is a server that may go without a key (a key that is set is sent).
    """
    names = _DEFAULT_KEYS.get(kind)
    if names is None or base_url is not None:
        return None
    env = os.environ if environ is None else environ
    key, instead = names
    return None if env.get(key) or env.get(instead) else key
