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
RUN DEBUG=1 python manage.py collectstatic --noinput
EXPOSE 8000
# ASGI (uvicorn): the pages and the episode API with its WebSockets, in every process.
CMD ["uvicorn", "studio.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--workers", "3", "--proxy-headers"]
