# One image for web and workers. GPU workers build with --build-arg EXTRAS=gpu.
FROM python:3.11-slim
ARG EXTRAS=""
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY studio studio
COPY inference inference
RUN pip install --upgrade pip && \
    if [ -n "$EXTRAS" ]; then pip install ".[${EXTRAS}]"; else pip install .; fi
COPY . .
# The static files live in the image, not in the data dir: a container whose data dir is a
# volume (docker-compose's /data) serves the files of its own image, alike in every replica.
ENV STUDIO_STATIC_ROOT=/app/staticfiles
RUN DEBUG=1 python manage.py collectstatic --noinput
EXPOSE 8000
# ASGI (uvicorn, by scripts/web.sh): the pages and the episode API with its WebSockets, in
# every process. X-Forwarded-* are believed only from STUDIO_TRUSTED_PROXIES (unset: nobody).
CMD ["scripts/web.sh", "--host", "0.0.0.0", "--port", "8000", "--workers", "3"]
