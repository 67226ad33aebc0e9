# One image for every Commonplace process; the command picks which:
#   commonplace web | commonplace scheduler | commonplace runner --server URL --token T
# The web binds 127.0.0.1 (runners, health checks) and a unix socket that `tailscale serve`
# proxies to from the tailscale sidecar (compose.yaml). docs/DEPLOY.md has it all.
#
# CPU torch by default (the lab's CPU experiments, a CPU runner). For a GPU runner:
#   docker build --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 \
#                --build-arg TORCH_SPEC="torch==2.13.0" -t commonplace:cuda .
# (the CUDA wheels bring their own CUDA runtime; the host needs the NVIDIA driver and the
# NVIDIA container toolkit, and compose.gpu.yaml hands the GPUs to the runner).
# A web-only image without torch: --build-arg TORCH_SPEC=none.
FROM python:3.11-slim-bookworm

ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX="https://download.pytorch.org/whl/cpu"

# COMMONPLACE_AUTH=serve: the image never runs in dev mode unless told to.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    COMMONPLACE_DATA_DIR=/data \
    COMMONPLACE_BIND=127.0.0.1:8000 \
    COMMONPLACE_SERVE_SOCKET=/run/commonplace/web.sock \
    COMMONPLACE_AUTH=serve

RUN useradd --create-home --uid 10001 --user-group commonplace \
 && mkdir /data /run/commonplace \
 && chown 10001:10001 /data /run/commonplace \
 && chmod 0700 /run/commonplace

WORKDIR /app
COPY pyproject.toml README.md alembic.ini gunicorn.conf.py ./
COPY app ./app
COPY base ./base
COPY cpl ./cpl
COPY jobs ./jobs
COPY migrations ./migrations
COPY templates ./templates
COPY deploy/docker-install.sh ./deploy/docker-install.sh
RUN TORCH_SPEC="$TORCH_SPEC" TORCH_INDEX="$TORCH_INDEX" PYTHON=python SOURCE=/app \
    sh deploy/docker-install.sh

USER 10001:10001
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"]
CMD ["commonplace", "web"]
