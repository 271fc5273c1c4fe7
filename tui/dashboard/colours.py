"""Colours that read in light and dark themes: one per rank, and the theme's own by name."""

from __future__ import annotations

from textual.color import Color, ColorParseError
from textual.dom import DOMNode

# Mid-dark shades for light themes, light shades for dark ones: each reads on its background.
RANK_COLOURS_DARK = (
    "#60a5fa", "#fb923c", "#4ade80", "#c084fc", "#f472b6", "#2dd4bf",
    "#facc15", "#f87171", "#22d3ee", "#a3e635", "#818cf8", "#e879f9",
)  # fmt: skip
RANK_COLOURS_LIGHT = (
    "#1d4ed8", "#c2410c", "#15803d", "#7e22ce", "#be185d", "#0f766e",
    "#a16207", "#b91c1c", "#0e7490", "#4d7c0f", "#4338ca", "#a21caf",
)  # fmt: skip


def rank_colour(rank: int, dark: bool) -> str:
    palette = RANK_COLOURS_DARK if dark else RANK_COLOURS_LIGHT
    return palette[rank % len(palette)]


def theme_colour(node: DOMNode, name: str) -> str:
    """A theme variable (e.g. "text-error") as a colour Rich understands; "" if there is none."""
    try:
        return Color.parse(node.app.theme_variables[name]).hex6
    except (KeyError, ColorParseError):
        return ""
