"""Switch agent polling cost: one `c4-switch-agent` process polls N switches x P ports every
interval from snmpsim and posts to a controller stand-in; prints the agent's CPU per cycle.

    .venv/bin/python -m bench.switch_agents [--switches 100] [--ports 64] [--interval 10]
        [--cycles 4] [--variant minimal|full|all-priorities ...] [--decoder pysnmp|lean ...]

Each variant runs once per `--decoder` (default: `pysnmp` then `lean`, the agent's
`[snmp] v2c_decoder`), against the same simulators in the same run: before and after side by
side.

Variants (what each target polls, SONiC profile):
- `minimal`: tx_bytes, rx_bytes, tx_pkts and PFC rx/tx pauses of priority 3 (`counters`,
  `pfc_priorities = [3]`): 5 varbinds per port, what congestion detection needs;
- `full`: every IF-MIB counter of the profile (6) and PFC rx/tx of priority 3: 8 per port;
- `all-priorities`: every IF-MIB counter and PFC of all 8 priorities (walked): 22 per port.

Physics: snmpsim (pure Python, `--simulators` processes serving the same data files, the
switches split among them; on the same 2-core machine: it serves every varbind the agent
decodes, so it takes its share of the cores too); the counters grow at data-file rates.
`agent_cpu_pct_of_one_core` is CPU over wall time; `agent_cpu_pct_at_interval` is CPU per
completed cycle over the interval, the figure that holds when a slow simulator stretches
cycles past the interval. The controller is a stand-in that answers 202 (its cost is not the agent's). The
agent's CPU is user + system time from /proc over the measured cycles (the first cycle,
which loads pysnmp and warms its engine, is left out), divided by their wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from tests.support.snmpsim import PortRates, Snmpsim, switch_records, write_switch

VARIANTS = {
    "minimal": 'counters = ["tx_bytes", "rx_bytes", "tx_pkts", "pfc_rx_pause", "pfc_tx_pause"]\npfc_priorities = [3]\n',
    "full": "pfc_priorities = [3]\n",
    "all-priorities": "",
}


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Sink:
    """Answers every POST with 202 and counts the samples."""

    def __init__(self) -> None:
        self.samples = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                sink.samples += len(body["samples"])
                answer = json.dumps({"accepted": len(body["samples"]), "ignored": []}).encode()
                self.send_response(202)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def metric(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def run_variant(variant: str, decoder: str, sims: list[Snmpsim], sink: Sink, tmp: Path,
                args: argparse.Namespace) -> dict[str, Any]:
    token = tmp / "token"
    token.write_text("bench\n")
    health_port = 20000 + os.getpid() % 20000
    lines = [f"interval_s = {args.interval}", f"concurrency = {args.concurrency}", f'listen = "127.0.0.1:{health_port}"',
             "[controller]", f'url = "{sink.url}"', f'token_file = "{token}"',
             "[snmp]", f"timeout_s = {args.timeout}", "retries = 1", "max_varbinds = 60",
             f'v2c_decoder = "{decoder}"']
    for i in range(args.switches):
        lines += [f"[credentials.sw{i:03d}]", 'version = "2c"', f'community_env = "C4B_SW{i:03d}"']
    for i in range(args.switches):
        lines += ["[[targets]]", f'switch = "sw{i:03d}"', 'address = "127.0.0.1"', f"port = {sims[i % len(sims)].port}",
                  'profile = "sonic"', f'credentials = "sw{i:03d}"', VARIANTS[variant]]
    name = f"{variant}-{decoder}"
    cfg = tmp / f"agent-{name}.toml"
    cfg.write_text("\n".join(lines) + "\n")
    env = {**os.environ, **{f"C4B_SW{i:03d}": f"sw{i:03d}" for i in range(args.switches)}}
    log = (tmp / f"agent-{name}.log").open("w")
    agent = subprocess.Popen([sys.executable, "-m", "switch_agents.cli", "run", str(cfg), "--log-level", "warning"],
                             stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        return {"decoder": decoder, **_measure(name, agent, sims, tmp, args, health_port)}
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(10)
        log.close()


def _measure(variant: str, agent: subprocess.Popen[bytes], sims: list[Snmpsim], tmp: Path,
             args: argparse.Namespace, health_port: int) -> dict[str, Any]:
    """CPU and counters between two snapshots taken just after a cycle ends (the cycle count
    and the counters come from the same /metrics read, so they cover the same cycles)."""
    base = f"http://127.0.0.1:{health_port}"

    def cycles() -> int:
        try:
            return int(httpx.get(f"{base}/healthz", timeout=5).json()["cycles"])
        except (httpx.HTTPError, ValueError, KeyError):
            return -1

    def after_cycle(n: int) -> tuple[str, int, float, float, float]:
        # /healthz every 0.5 s (serving /metrics for 100 targets costs the agent CPU: not the
        # scrape rate of a Prometheus), /metrics once the cycle is done.
        while True:
            if agent.poll() is not None:
                raise RuntimeError(f"agent exited: {(tmp / f'agent-{variant}.log').read_text()[-2000:]}")
            if cycles() >= n:
                text = httpx.get(f"{base}/metrics", timeout=5).text
                return (text, int(metric(text, "c4_switch_agent_cycles_total")), cpu_s(agent.pid),
                        sum(x.cpu_s() for x in sims), time.monotonic())
            time.sleep(0.5)

    first, c0, cpu0, sim0, wall0 = after_cycle(1)
    durations = []
    seen = c0
    while True:
        text, done, cpu1, sim1, wall1 = after_cycle(seen + 1)
        durations.append(metric(text, "c4_switch_agent_cycle_duration_seconds"))
        seen = done
        if done >= c0 + args.cycles:
            break
    last = text
    agent.send_signal(signal.SIGTERM)
    agent.wait(60)
    if metric(last, "c4_switch_agent_poll_errors_total") > 0:
        print((tmp / f"agent-{variant}.log").read_text()[-1500:], file=sys.stderr)
    m = seen - c0
    varbinds = (metric(last, "c4_switch_agent_varbinds_total") - metric(first, "c4_switch_agent_varbinds_total")) / m
    errors = metric(last, "c4_switch_agent_poll_errors_total") - metric(first, "c4_switch_agent_poll_errors_total")
    samples = metric(last, "c4_switch_agent_port_samples_total") - metric(first, "c4_switch_agent_port_samples_total")
    return {"variant": variant.rsplit("-", 1)[0], "switches": args.switches, "ports": args.ports, "interval_s": args.interval,
            "cycles": m, "wall_s": round(wall1 - wall0, 1),
            "agent_cpu_pct_of_one_core": round(100 * (cpu1 - cpu0) / (wall1 - wall0), 1),
            "agent_cpu_s_per_cycle": round((cpu1 - cpu0) / m, 2),
            "agent_cpu_pct_at_interval": round(100 * (cpu1 - cpu0) / m / args.interval, 1),
            "agent_cpu_us_per_varbind": round(1e6 * (cpu1 - cpu0) / max(1.0, varbinds * m), 1),
            "snmpsim_cpu_pct_of_one_core": round(100 * (sim1 - sim0) / (wall1 - wall0), 1),
            "simulators": len(sims),
            "varbinds_per_cycle": int(varbinds), "port_samples_per_cycle": int(samples / m),
            "poll_errors": int(errors), "cycle_s_max": round(max(durations, default=0.0), 2),
            "cycle_s_median": round(sorted(durations)[len(durations) // 2], 2) if durations else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--switches", type=int, default=100)
    parser.add_argument("--ports", type=int, default=64)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--cycles", type=int, default=4, help="measured cycles (after one warm-up cycle)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--simulators", type=int, default=2, help="snmpsim processes (switches split among them)")
    parser.add_argument("--timeout", type=float, default=2.0, help="SNMP request timeout (s)")
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    parser.add_argument("--decoder", action="append", choices=["pysnmp", "lean"],
                        help="the agent's [snmp] v2c_decoder (repeatable; default: pysnmp, then lean)")
    args = parser.parse_args()
    variants = args.variant or ["minimal", "full"]
    decoders = args.decoder or ["pysnmp", "lean"]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so `finally` stops snmpsim and the agent
    print("uptime before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    with tempfile.TemporaryDirectory(prefix="c4-bench-switch-agents-") as tmpdir:
        tmp = Path(tmpdir)
        data = tmp / "data"
        data.mkdir()
        for i in range(args.switches):
            ports = [PortRates(j + 1, f"Ethernet{4 * j}", tx_bytes=1e9 + j * 1e7, rx_bytes=9e8, tx_pkts=1e6,
                               rx_pkts=9e5, discards=1.0, pfc_rx={3: 10.0}, pfc_tx={3: 5.0})
                     for j in range(args.ports)]
            write_switch(data, f"sw{i:03d}", switch_records("sonic", f"sw{i:03d}", ports))
        sims: list[Snmpsim] = []
        sink = Sink()
        try:
            for i in range(args.simulators):
                sim = Snmpsim(data)
                sim.cache_dir = tmp / f"cache{i}"  # each indexes the data files on its own
                sims.append(sim.start("sw000", timeout_s=180))
            for variant in variants:
                for decoder in decoders:
                    print(json.dumps(run_variant(variant, decoder, sims, sink, tmp, args)), flush=True)
        finally:
            for sim in sims:
                sim.stop()
    print("uptime after:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
