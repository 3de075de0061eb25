# One agent replica: the service with the PostgreSQL engine's drivers, run as a
# non-root user with `make run`'s defaults (`agentchat serve`). Used three times by
# docker-compose.yml; alone it runs on its embedded SQLite file under /data.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    AGENT_HOST=0.0.0.0 AGENT_PORT=8000 AGENT_DB_PATH=/data/agent.sqlite3

WORKDIR /srv/agentchat
COPY pyproject.toml README.md ./
# Every package pyproject.toml lists (tests/test_dockerfile.py checks it).
COPY events ./events
COPY client ./client
COPY app ./app
COPY llm ./llm
COPY toolindex ./toolindex
COPY storage ./storage
COPY agenttools ./agenttools
COPY knowledge ./knowledge
COPY prompts ./prompts
COPY backend ./backend
RUN pip install '.[postgres]' \
    && useradd --system --uid 10001 --home-dir /data --create-home agent \
    && chown agent /data

USER agent
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD python -c "import os,urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('AGENT_PORT', '8000'), timeout=2).status == 200 else 1)"
CMD ["agentchat", "serve"]
