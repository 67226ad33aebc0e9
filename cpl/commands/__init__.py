"""The subcommands, one module a group: capture.py (note, queue, drafts), reading.py
(week, show, edit, search), runs.py (experiments, run, runs), setup.py (login, logout,
whoami, completion, help)."""
