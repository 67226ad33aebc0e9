#!/bin/sh
# The Dockerfile's install step, kept here so that the tests can run it (Docker itself
# cannot run where the tests do). Installs torch from a wheel index, then Commonplace
# (editable: templates and migrations are read from the source tree), then checks that the
# result starts: the app factory answers /healthz, gunicorn accepts gunicorn.conf.py, and
# the web process did not import torch.
#
#   deploy/docker-install.sh [--dry-run]
#
# Environment (the Dockerfile's build arguments):
#   TORCH_SPEC   a pip requirement for torch ("torch==2.13.0"), or "none" for a web-only
#                install (the web never imports torch; a runner needs it)
#   TORCH_INDEX  the wheel index for torch: https://download.pytorch.org/whl/cpu (default)
#                or a CUDA one, e.g. https://download.pytorch.org/whl/cu128
#   PYTHON       the interpreter to install into (default: python3)
#   SOURCE       the source tree (default: the folder above this script)
# --dry-run prints the commands instead of running them, after the same checks.
set -eu

dry_run=
for arg in "$@"; do
    case "$arg" in
        --dry-run) dry_run=1 ;;
        *) echo "docker-install.sh: unknown argument $arg" >&2; exit 2 ;;
    esac
done

PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
TORCH_INDEX=${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
SOURCE=${SOURCE:-$(cd "$(dirname "$0")/.." && pwd)}

case "$TORCH_INDEX" in
    https://*) ;;
    *) echo "docker-install.sh: TORCH_INDEX must be an https:// URL, not '$TORCH_INDEX'" >&2
       exit 2 ;;
esac
case "$TORCH_SPEC" in
    none) ;;
    torch|torch[=\<\>~!]*) ;;
    *) echo "docker-install.sh: TORCH_SPEC must be 'none' or a requirement on torch, not '$TORCH_SPEC'" >&2
       exit 2 ;;
esac
if [ ! -f "$SOURCE/pyproject.toml" ] || [ ! -f "$SOURCE/gunicorn.conf.py" ]; then
    echo "docker-install.sh: $SOURCE is not a Commonplace source tree" >&2
    exit 2
fi

run() {
    echo "+ $*"
    if [ -z "$dry_run" ]; then "$@"; fi
}

if [ "$TORCH_SPEC" = none ]; then
    extras=""
else
    # torch first, from its own index: installing '.[lab]' first would pull the default
    # (CUDA) wheel from PyPI. Once torch is there, pip sees '.[lab]' satisfied.
    run "$PYTHON" -m pip install --index-url "$TORCH_INDEX" "$TORCH_SPEC"
    extras="[lab]"
fi
run "$PYTHON" -m pip install --editable "$SOURCE$extras"

check_app='
import os, sys, tempfile
data = tempfile.mkdtemp()
os.environ.update(COMMONPLACE_DATA_DIR=data, COMMONPLACE_TIMEZONE="UTC", COMMONPLACE_AUTH="serve")
from app import create_app
app = create_app()
assert app.config["AUTH_MODE"] == "serve", app.config["AUTH_MODE"]
response = app.test_client().get("/healthz")
assert response.status_code == 200 and response.get_json()["status"] == "ok", response.data
assert "torch" not in sys.modules, "the web imported torch"
print("app ok: /healthz answers, serve mode, no torch in the web")
'
run "$PYTHON" -c "$check_app"
# Bytecode for the web's -OO and for the project, written now: at run time the image's user
# can write neither here nor to site-packages (app/bytecode.py).
run "$PYTHON" -m app.bytecode
run "$PYTHON" -m gunicorn --check-config --config "$SOURCE/gunicorn.conf.py" "app:create_app()"
if [ "$TORCH_SPEC" != none ]; then
    run "$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
fi
run "$PYTHON" -m app.cli --help
echo "installed Commonplace into $PYTHON"
