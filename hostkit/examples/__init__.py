"""Example authored tools shipped with hostkit (used by the demo and the notebooks)."""
