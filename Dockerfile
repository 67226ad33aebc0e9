# One image for every Commonplace process; the command picks which:
#   docker run … commonplace web | commonplace scheduler | commonplace runner --server URL --token T
# The web binds 127.0.0.1: run it in the network namespace of a tailscale sidecar
# (compose: network_mode: service:tailscale) so only `tailscale serve` reaches it.
# CPU torch by default (for the lab's CPU experiments); for a GPU runner build with
#   --build-arg TORCH_SPEC="torch" --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128
FROM python:3.11-slim

ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX="https://download.pytorch.org/whl/cpu"

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    COMMONPLACE_DATA_DIR=/data COMMONPLACE_BIND=127.0.0.1:8000 COMMONPLACE_AUTH=serve

RUN useradd --create-home --uid 10001 commonplace && mkdir /data && chown commonplace /data
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY jobs ./jobs
COPY migrations ./migrations
COPY templates ./templates
RUN pip install --no-cache-dir --index-url "$TORCH_INDEX" "$TORCH_SPEC" \
 && pip install --no-cache-dir -e '.[lab]'

USER commonplace
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"
CMD ["commonplace", "up"]
