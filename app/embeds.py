"""Fenced blocks that embed something other than code, by info string.

The markdown pipeline calls EMBEDS[name](block_text) for a block such as

    ```run
    id: 42
    ```

and inserts the returned HTML after sanitizing the rest of the entry, so an embed is
trusted server-side code that must escape whatever it prints. The experiment journal
registers "run" here (result cards); until then a ```run block shows as plain code.
"""

from collections.abc import Callable

EMBEDS: dict[str, Callable[[str], str]] = {}
