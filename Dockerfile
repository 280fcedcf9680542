# The controller image: c4 and its Python dependencies on Debian 12's Python 3.11.
FROM python:3.11-slim-bookworm
WORKDIR /app
COPY pyproject.toml README.md ./
COPY controller controller
COPY node_agent node_agent
COPY switch_agents switch_agents
COPY migrations migrations
RUN pip install --no-cache-dir -e .
EXPOSE 8000
CMD ["c4", "serve", "--host", "0.0.0.0", "--port", "8000", "--no-migrate"]
