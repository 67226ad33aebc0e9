"""gunicorn settings for the Commonplace web process, read by `commonplace web`,
`commonplace up`, the Docker image and the systemd unit (`gunicorn -c gunicorn.conf.py`).

Sized for a small box with one writer: SQLite takes one write at a time, so more
processes only queue on its lock; threads serve slow phone connections and long polls
without a process each. Override with COMMONPLACE_WEB_WORKERS / _THREADS. A worker lends
at most half its threads to the runners' long polls, and cuts off a request body that
stops arriving (app/web/hardening.py), so pages always have threads.

The web never starts a scheduler: there are no server hooks here that start anything, and
none may be added (worker_int below only tells long polls to end). APScheduler in a forked
worker runs every job once per worker (see docs/ARCHITECTURE.md); schedules belong to
`commonplace scheduler`, a process of its own.
"""

import ctypes
import os
import re
from pathlib import Path
from urllib.parse import unquote_plus

from gunicorn.glogging import Logger

from app.config import from_environment, listen_addresses, web_size

wsgi_app = "app:create_served_app()"

# COMMONPLACE_BIND (loopback: runners, scripts, health checks) and, in serve mode, the unix
# socket `tailscale serve` proxies to, the only door where identity headers are believed
# (app/web/auth/listeners.py). `commonplace web` refuses a non-loopback address unless
# given --allow-non-loopback; the command line's --bind wins.
bind = listen_addresses(from_environment())
# The serve socket is created rw for this user only: tailscaled (root) can still connect;
# other users on the machine cannot. (gunicorn applies umask to its unix sockets only.)
umask = 0o077

worker_class = "gthread"
workers, threads = web_size()


def _limit_malloc_arenas(arenas: int = 2) -> None:
    """glibc gives threads that allocate at once arenas of their own (up to 8 per core), each
    keeping its freed memory apart (mallopt(3), M_ARENA_MAX: more arenas, less contention
    and more memory). A gthread worker's threads mostly take turns on the GIL, so two arenas
    are enough, and a worker holds less (bench/idle.py). Set in the master, so the forked
    workers have it; a no-op off glibc."""
    try:
        ctypes.CDLL(None).mallopt(-8, arenas)  # -8: M_ARENA_MAX in glibc's malloc.h
    except (OSError, AttributeError):
        pass


_limit_malloc_arenas()

# gunicorn's control socket (`gunicornc`) in this notebook's data folder, so that two
# notebooks on one machine never share one (the default is one per user, in ~/.gunicorn);
# none where the path would be too long for a unix socket.
_control = Path(from_environment()["DATA_DIR"]).expanduser().resolve() / "gunicorn.ctl"
if len(os.fsencode(_control)) <= 107:
    control_socket = str(_control)
else:
    control_socket_disable = True


def worker_int(worker):
    """SIGINT/SIGQUIT in a worker (Ctrl-C, a quick stop): gunicorn exits the worker at once,
    but the interpreter first waits for its request threads; a runner's long poll would
    keep it for the rest of its wait."""
    from app.web.runner_api import STOPPING

    STOPPING.set()


# A worker silent for `timeout` seconds is restarted. Requests are short; the runner's
# long poll answers well inside this.
timeout = 60
# On SIGTERM (Ctrl-C, `docker stop`, systemd): finish requests in flight, then exit.
graceful_timeout = 10
keepalive = 5

# Request-size limits before the app sees a byte (the body limit is Flask's
# MAX_CONTENT_LENGTH, COMMONPLACE_MAX_UPLOAD_MB).
limit_request_line = 8190
limit_request_fields = 100
limit_request_field_size = 8190

# gunicorn believes no forwarded headers itself: app/web/auth (ProxyFix, serve mode only)
# is the one place that decides whether X-Forwarded-For/-Proto are true.
forwarded_allow_ips = ""

# Access log to stdout (journald / docker logs). The peer (%h) is the tailnet address for
# requests serve proxied (read from its X-Forwarded-For on its socket only), and `user` is
# who the web took the caller for (a login, or token:<name>), never a header's claim.
accesslog = "-"
access_log_format = (
    '%(h)s fwd=%({x-forwarded-for}i)s user=%({commonplace.user}e)s [%(t)s] '
    '"%(r)s" %(s)s %(b)s %(M)sms "%(a)s"'
)

# A feed reader's URL carries its token (/feed.atom?token=cp_…), and a token pasted into a
# link by mistake would too: a log line is read by more people and kept longer than the
# token should be, so token values are cut out before a line is written. A parameter is
# judged as the app reads it, percent-decoded: ?%74oken=%63p_… is a token too.
PARAM_RE = re.compile(r"([?&;\s(])([^=&;\s?()]+)=([^&;\s\"()]*)")
TOKEN_RE = re.compile(r"\bcp_[A-Za-z0-9_-]{16,}")


def _secret_param(m: re.Match) -> str:
    name, value = unquote_plus(m[2]), unquote_plus(m[3])
    if name.strip().lower() == "token" or TOKEN_RE.search(value):
        return f"{m[1]}{m[2]}=REDACTED"
    return m[0]


def _redact(value):
    if not isinstance(value, str):
        return value
    return TOKEN_RE.sub("REDACTED", PARAM_RE.sub(_secret_param, value))


# Only what the line prints is redacted: gunicorn's atoms hold every request and response
# header and every environ value, and a regex over each of them was a visible share of a
# page's CPU in the worker (docs/PERFORMANCE.md, *Rendering a page*).
LOGGED_ATOMS = frozenset(re.findall(r"%\(([^)]+)\)s", access_log_format))


class RedactingLogger(Logger):
    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        for key in LOGGED_ATOMS & atoms.keys():
            atoms[key] = _redact(atoms[key])
        return atoms


logger_class = RedactingLogger
errorlog = "-"
loglevel = os.environ.get("COMMONPLACE_LOG_LEVEL", "info")

# The app is made once, in the master, and the workers are forked from it: the pages its
# code fills (Flask, SQLAlchemy, the app's own modules) are then shared by the workers
# instead of each holding its own copy (docs/PERFORMANCE.md, *At rest*). Making the app
# opens no database connection and starts no thread (tests/app/test_process_imports.py), so
# nothing forks with one.
preload_app = True
proc_name = "commonplace-web"
