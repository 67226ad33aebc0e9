"""Fenced blocks that embed something other than code, by info string.

The markdown pipeline calls EMBEDS[name](session, block_text) for a block such as

    ```run
    id: 42
    ```

and inserts the returned HTML after sanitizing the rest of the entry, so an embed is
trusted server-side code that must escape whatever it prints (see app/cards.py).
"""

from collections.abc import Callable

from sqlalchemy.orm import Session

from app.cards import run_card

EMBEDS: dict[str, Callable[[Session, str], str]] = {"run": run_card}
