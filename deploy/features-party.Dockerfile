# Features party (publisher): API, inbox and GPU training. The CUDA build of torch 2.13.0
# comes from PyPI's default wheel on x86_64 Linux.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
RUN pip install --no-cache-dir ".[features]"
RUN useradd --create-home labeldp && mkdir -p /var/lib/labeldp && chown labeldp /var/lib/labeldp
USER labeldp
ENV LABELDP_FEATURES_DATABASE_URL=sqlite:////var/lib/labeldp/features.db \
    LABELDP_FEATURES_DATA_DIR=/var/lib/labeldp/data \
    LABELDP_DEVICE=auto
