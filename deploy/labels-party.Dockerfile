# Labels party (advertiser): the API and the outbox sender share this image (no torch).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
# The local project; its dependencies are bounded in pyproject.toml.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[labels]"
RUN useradd --create-home --uid 1000 labeldp && mkdir -p /var/lib/labeldp && chown labeldp /var/lib/labeldp
USER labeldp
ENV LABELDP_LABELS_DATABASE_URL=sqlite:////var/lib/labeldp/labels.db
