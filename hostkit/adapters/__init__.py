"""Concrete adapters behind the seams' protocols (model providers, approvers, transports).

Only ``hostkit.host`` (DefaultCapabilities) and the front ends import this package.
"""
