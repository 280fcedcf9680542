# The controller image: c4 and its Python dependencies on Debian 12's Python 3.11.
FROM python:3.11-slim-bookworm
WORKDIR /app
COPY pyproject.toml README.md ./
COPY controller controller
COPY node_agent node_agent
COPY switch_agents switch_agents
COPY migrations migrations
# snmpsim (and pysmi, which it imports) for docker-compose's demo SNMP agent
RUN pip install --no-cache-dir -e . "snmpsim>=1.2.2,<2" "pysmi>=1.5"
EXPOSE 8000
CMD ["c4", "serve", "--host", "0.0.0.0", "--port", "8000", "--no-migrate"]
