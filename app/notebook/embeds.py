"""Fenced blocks that embed something other than code, by info string.

The markdown pipeline calls EMBEDS[name](session, block_text) for a block such as

    ```run
    id: 42
    ```

and inserts the returned HTML after sanitizing the rest of the entry, so an embed is
trusted server-side code that must escape whatever it prints.

The notebook knows no embed of its own: the layers above register theirs when the app is
built (create_app registers the journal's run card), so the notebook never imports them.
"""

from collections.abc import Callable

from sqlalchemy.orm import Session

Embed = Callable[[Session, str], str]
EMBEDS: dict[str, Embed] = {}


def register(name: str, embed: Embed) -> None:
    EMBEDS[name] = embed
