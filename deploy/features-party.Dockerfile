# Features party (publisher): API, inbox and training. CPU by default: torch comes from the
# PyTorch CPU wheel index (no CUDA libraries in the image). docker-compose.gpu.yml builds with
# TORCH_INDEX_URL=https://pypi.org/simple, whose x86_64 Linux wheel of torch 2.13.0 is the CUDA build.
FROM python:3.11-slim
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
WORKDIR /app
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" "torch==2.13.0"
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
# The local project; its dependencies are bounded in pyproject.toml. torch is already there
# (==2.13.0 is met by 2.13.0+cpu), so this layer does not fetch the CUDA build.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[features]"
RUN useradd --create-home --uid 1000 labeldp && mkdir -p /var/lib/labeldp && chown labeldp /var/lib/labeldp
USER labeldp
ENV LABELDP_FEATURES_DATABASE_URL=sqlite:////var/lib/labeldp/features.db \
    LABELDP_FEATURES_DATA_DIR=/var/lib/labeldp/data \
    LABELDP_DEVICE=cpu
