"""`cpl`: the Commonplace terminal client. It speaks only the JSON API (/api/v1) over
HTTP, so it works from any tailnet device or over SSH; nothing of the server is imported
here (an import-linter contract in pyproject.toml says so).

    main.py             the `cpl` click group: global options, the exit codes in --help
    commands/           the subcommands: capture.py (note, queue, drafts), reading.py
                        (week, show, edit, search), runs.py (experiments, run, runs: list,
                        watch, logs, cancel, rerun, compare, show), setup.py (login,
                        logout, whoami, completion, help: json, exit-codes, config)
    context.py          what every command shares: the profile, the API, the terminal
    profile.py          server and token (flags, env, keyring, config file), XDG paths
    api_client.py       HTTP: every call, every way it fails (failures.py: exit codes)
    outbox.py           the offline capture queue, each capture with its Idempotency-Key
    editor_loop.py      $EDITOR and a save from a base revision; a conflict keeps a draft
    watching.py         following a run (a progress bar on a terminal, lines in a pipe), logs
    run_views.py        runs, experiments and comparisons for the terminal; their numbers
    run_card.py         a run's result card for the terminal (`cpl runs show`)
    terminal.py         TTY or pipe, colour (the terminal's 16-colour palette), markdown
    shapes.py           the documented --json shapes

Files (Linux paths; platformdirs picks each system's own):
    ~/.config/commonplace/config.toml     server, editor, colour; tokens only with
                                          --insecure-storage (0600; wider is warned about)
    ~/.local/state/commonplace/outbox/    captures waiting for the server, one file each
    ~/.local/state/commonplace/drafts/    edits the server did not take, never deleted
                                          until a later save of them succeeds
    ~/.local/state/commonplace/cache/     experiment names and run ids for completion
"""
