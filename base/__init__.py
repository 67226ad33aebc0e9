"""What every process of the project shares, below all of them: the lab's launch contract
(exit codes, reasons, files, progress lines), atomic file writes and the run statuses.

Stdlib only (a contract in pyproject.toml): the web server, the scheduler, the runner
agent, the lab and the terminal client all import it, and none of them may pull another's
dependencies (Flask, SQLAlchemy, torch) into the others.
"""
