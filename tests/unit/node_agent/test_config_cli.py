"""Settings: flags over C4_AGENT_* variables, errors that name the setting, check-config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from node_agent import config
from node_agent.cli import app


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in list(__import__("os").environ):
        if k.startswith("C4_AGENT_"):
            monkeypatch.delenv(k)


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("C4_AGENT_CONTROLLER", "http://c4:8000")
    monkeypatch.setenv("C4_AGENT_HOST", "host9")
    monkeypatch.setenv("C4_AGENT_BATCH_RECORDS", "500")
    s = config.load({"host": "host3"})
    assert (s.host, s.batch_records, s.controller_url) == ("host3", 500, "http://c4:8000")
    assert s.shim_port == config.DEFAULT_SHIM_PORT and s.spool_max_bytes == 256 << 20


def test_errors_name_the_setting_and_typos_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(config.ConfigError) as e:
        config.load({"controller": "not a url", "batch_records": 0})
    assert any("controller" in p for p in e.value.problems)
    assert any("C4_AGENT_BATCH_RECORDS" in p for p in e.value.problems)
    monkeypatch.setenv("C4_AGENT_CONTROLER", "http://x")
    with pytest.raises(config.ConfigError, match="C4_AGENT_CONTROLER: not a setting"):
        config.load({"controller": "http://c4"})
    monkeypatch.delenv("C4_AGENT_CONTROLER")
    with pytest.raises(config.ConfigError, match="listen"):
        config.load({"controller": "http://c4", "listen": "nope"})
    with pytest.raises(config.ConfigError, match="probe_ports"):
        config.load({"controller": "http://c4", "probe_base_port": 65500, "probe_ports": 64})


def test_listen_addresses() -> None:
    assert config.listen_address("127.0.0.1:9792") == ("127.0.0.1", 9792)
    assert config.listen_address("[::1]:80") == ("::1", 80)
    assert config.listen_address(":80") == ("0.0.0.0", 80)
    assert config.listen_address("x:99999") is None


def test_check_config(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["--controller", "http://c4:8000", "--token", "s3cret", "--socket",
                             str(tmp_path / "run" / "shim.sock"), "--spool",
                             str(tmp_path / "spool"), "check-config"])
    assert ok.exit_code == 0, ok.output
    shown = json.loads(ok.stdout)
    assert shown["token"] == "***" and shown["controller"] == "http://c4:8000/"
    bad = runner.invoke(app, ["--controller", "ftp://c4", "check-config"])
    assert bad.exit_code == 2 and "controller" in bad.output
    (tmp_path / "a-file").write_text("")
    blocked = runner.invoke(app, ["--controller", "http://c4", "--spool",
                                  str(tmp_path / "a-file" / "spool"), "check-config"])
    assert blocked.exit_code == 2 and "spool" in blocked.output
