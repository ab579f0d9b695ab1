"""A model's card: ``haggler-model.json`` in a model folder, the one place it is read and written.

A card says what a folder holds (the embedded model, a warm start, a GRPO-trained model), what it was made
from, and the prompt format it was measured or trained in: a model plays in its card's format unless a run
sets a field explicitly. The card is written last into a folder that haggler made, so its presence also
means the folder is complete (a killed run leaves a folder without one).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CARD_FILE = "haggler-model.json"


def card_path(folder: str | Path) -> Path:
    return Path(folder) / CARD_FILE


def read_card(folder: str | Path) -> dict[str, Any] | None:
    """The card of a model folder, or None where there is none (a folder haggler did not make, a hub id)."""
    path = card_path(folder)
    if not path.is_file():
        return None
    try:
        card = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not a valid model card ({err})") from None
    if not isinstance(card, dict):
        raise ValueError(f"{path}: a model card must be a JSON object")
    return card


def card_prompt(folder: str | Path) -> dict[str, Any] | None:
    """The prompt format recorded in a folder's card: its fields that differ from haggler's defaults, or all."""
    card = read_card(folder)
    return None if card is None else card.get("prompt")


def is_complete(folder: str | Path) -> bool:
    """Did haggler finish writing this folder (its card, written last, is there)?"""
    return card_path(folder).is_file()


def clear_card(folder: str | Path) -> None:
    """Before (re)writing a folder: without its card it counts as incomplete until ``write_card``."""
    card_path(folder).unlink(missing_ok=True)


def write_card(folder: str | Path, card: dict[str, Any]) -> Path:
    """Write the card atomically (a temporary file renamed over it), last of everything in the folder."""
    path = card_path(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(card, indent=2) + "\n")
    tmp.replace(path)
    return path
