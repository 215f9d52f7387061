"""Concrete adapters behind the seams' protocols (model providers, approvers, transports).

Only ``hostkit.host`` (DefaultCapabilities) and the front ends import this package.
"""

__all__ = ["NO_API_KEY"]

# Raised with key="api_key_env": a secret-named key right before a colon ("api_key: no")
# would read as an assignment, and the redactor would mask the first word of the fix.
NO_API_KEY = (
    "no API key: set the environment variable {variable}, or name another one in the "
    "provider's api_key_env (in Python, api_key_env in a model={{...}} dict, or the "
    "provider's api_key argument)"
)
