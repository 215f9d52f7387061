"""The inspectors' colours: JupyterLab's theme variables, with light fallbacks.

Every colour a text or a mark is drawn in is one of these, so the same HTML
reads in JupyterLab's light and dark themes and, through the fallbacks,
anywhere else (VS Code, an exported page). ``TEXT_PAIRS`` and
``GRAPHIC_PAIRS`` list every foreground/background combination drawn; the
tests resolve them in both themes and check their contrast (4.5:1 for text,
3:1 for bars and axes). Each inspector paints its own ``SURFACE``, so a
selected cell's highlight never sits behind its text.
"""

from __future__ import annotations

__all__ = [
    "AXIS",
    "BADGE_BG",
    "BADGE_TEXT",
    "BORDER",
    "DIFF_ADD_BG",
    "DIFF_ADD_TEXT",
    "DIFF_DEL_BG",
    "DIFF_DEL_TEXT",
    "ERROR",
    "GRAPHIC_PAIRS",
    "GRID",
    "HEAD_BG",
    "INPUT",
    "MUTED",
    "OUTPUT",
    "SURFACE",
    "TEXT",
    "TEXT_PAIRS",
    "box_style",
]

TEXT = "var(--jp-ui-font-color1, rgba(0, 0, 0, 0.87))"
MUTED = "var(--jp-ui-font-color2, rgba(0, 0, 0, 0.54))"
ERROR = "var(--jp-error-color1, #d32f2f)"
SURFACE = "var(--jp-layout-color0, #ffffff)"
HEAD_BG = "var(--jp-layout-color2, #eeeeee)"
BORDER = "var(--jp-border-color2, #e0e0e0)"
GRID = "var(--jp-border-color2, #e0e0e0)"
AXIS = MUTED
# Badges are light chips in both themes: a fixed pair, readable on any page.
BADGE_BG, BADGE_TEXT = "#ffe0b2", "#3e2723"
# A diff's added and removed lines: fixed light pairs like the badges, readable on any page.
DIFF_ADD_BG, DIFF_ADD_TEXT = "#dafbe1", "#0f3d1c"
DIFF_DEL_BG, DIFF_DEL_TEXT = "#ffebe9", "#67060c"
# The budget plot's series: 3:1 or more against white and JupyterLab's dark surfaces alike.
INPUT, OUTPUT = "#4c78a8", "#d95f02"

TEXT_PAIRS: tuple[tuple[str, str], ...] = (
    (TEXT, SURFACE),
    (TEXT, HEAD_BG),
    (MUTED, SURFACE),
    (ERROR, SURFACE),
    (BADGE_TEXT, BADGE_BG),
    (DIFF_ADD_TEXT, DIFF_ADD_BG),
    (DIFF_DEL_TEXT, DIFF_DEL_BG),
)
GRAPHIC_PAIRS: tuple[tuple[str, str], ...] = (
    (INPUT, SURFACE),
    (OUTPUT, SURFACE),
    (AXIS, SURFACE),
    (TEXT, SURFACE),  # the estimate marker
)


def box_style() -> str:
    """The inline style of an inspector's outer block: its own surface, text colour and border."""
    return (
        f"color:{TEXT};background:{SURFACE};border:1px solid {BORDER};border-radius:4px;"
        "padding:6px 8px;font-family:var(--jp-ui-font-family, sans-serif);"
        "font-size:var(--jp-ui-font-size1, 13px);line-height:1.45"
    )
