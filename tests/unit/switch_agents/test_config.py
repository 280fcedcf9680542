"""The agent's configuration: strict parsing with field paths, secrets from files or the
environment, never printed."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from switch_agents.cli import app
from switch_agents.config import ConfigError, describe, parse, resolve_secrets

GOOD = """
interval_s = 5
[controller]
url = "http://127.0.0.1:8000"
token_env = "T_TOKEN"
[credentials.v2]
version = "2c"
community_env = "T_COMMUNITY"
[credentials.v3]
version = "3"
user = "c4"
auth_protocol = "sha256"
auth_key_file = "{auth}"
priv_protocol = "aes"
priv_key_env = "T_PRIV"
[[targets]]
switch = "leaf0"
address = "192.0.2.10"
profile = "sonic"
credentials = "v2"
pfc_priorities = [3, 4]
[[targets]]
switch = "spine0"
address = "192.0.2.20"
profile = "arista"
credentials = "v3"
"""
ENV = {"T_TOKEN": "tok-secret-1", "T_COMMUNITY": "comm-secret-2", "T_PRIV": "priv-secret-3"}


def good(tmp_path: Path) -> str:
    auth = tmp_path / "auth"
    auth.write_text("auth-secret-4\n")
    return GOOD.format(auth=auth)


def problems(text: str) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as got:
        parse(text)
    return list(got.value.problems)


def test_a_good_file_parses_and_its_secrets_resolve(tmp_path: Path) -> None:
    cfg = parse(good(tmp_path))
    assert [t.switch for t in cfg.targets] == ["leaf0", "spine0"]
    assert cfg.deadline_s == 4.0 and cfg.targets[0].pfc_priorities == [3, 4]
    secrets = resolve_secrets(cfg, ENV)
    assert secrets.token is not None and secrets.token.get_secret_value() == "tok-secret-1"
    assert secrets.community["v2"].get_secret_value() == "comm-secret-2"
    assert secrets.auth_key["v3"].get_secret_value() == "auth-secret-4"
    assert secrets.priv_key["v3"].get_secret_value() == "priv-secret-3"
    text = "\n".join(describe(cfg)) + repr(secrets)
    for secret in ("tok-secret-1", "comm-secret-2", "auth-secret-4", "priv-secret-3"):
        assert secret not in text


@pytest.mark.parametrize(("change", "field"), [
    (lambda t: t.replace('interval_s = 5', 'interval_s = 5\ncolour = "red"'), "colour"),
    (lambda t: t.replace('profile = "sonic"', 'profile = "sonc"'), "targets[0]"),
    (lambda t: t.replace('credentials = "v2"\n', 'credentials = "nope"\n'), "targets[0].credentials"),
    (lambda t: t.replace('switch = "spine0"', 'switch = "leaf0"'), "targets[1].switch"),
    (lambda t: t.replace('community_env = "T_COMMUNITY"', 'community_env = "A"\ncommunity_file = "/x"'),
     "credentials.v2"),
    (lambda t: t.replace('pfc_priorities = [3, 4]', 'pfc_priorities = [9]'), "targets[0].pfc_priorities[0]"),
    (lambda t: t.replace('auth_protocol = "sha256"', 'auth_protocol = "none"'), "credentials.v3"),
    (lambda t: t.replace('url = "http://127.0.0.1:8000"', 'url = "ftp://x"'), "controller.url"),
    (lambda t: t + "[[", "(file)"),
    (lambda t: t.replace('interval_s = 5', 'interval_s = 5\nrepoll_after_s = 0.01'), "repoll_after_s"),
    (lambda t: t.replace('interval_s = 5', 'interval_s = 5\nrepoll_after_s = 3'), "repoll_after_s"),
])
def test_bad_files_name_the_field(tmp_path: Path, change, field: str) -> None:  # type: ignore[no-untyped-def]
    got = problems(change(good(tmp_path)))
    assert any(f.startswith(field) for f, _ in got), got


def test_unknown_profile_lists_the_known_ones(tmp_path: Path) -> None:
    [(_, message)] = problems(good(tmp_path).replace('profile = "sonic"', 'profile = "sonc"'))
    assert "unknown profile 'sonc'" in message and "linux" in message


def test_missing_secrets_are_all_named(tmp_path: Path) -> None:
    cfg = parse(good(tmp_path).replace(str(tmp_path / "auth"), str(tmp_path / "missing")))
    with pytest.raises(ConfigError) as got:
        resolve_secrets(cfg, {"T_TOKEN": "x"})
    fields = [f for f, _ in got.value.problems]
    assert fields == ["credentials.v2.community_env", "credentials.v3.auth_key_file", "credentials.v3.priv_key_env"]


def test_check_config_prints_a_summary_and_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(good(tmp_path))
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    ok = CliRunner().invoke(app, ["check-config", str(path)])
    assert ok.exit_code == 0, ok.output
    assert "OK" in ok.output and "sonic 1" in ok.output and "SNMPv3 user c4" in ok.output
    assert not any(s in ok.output for s in ENV.values())
    monkeypatch.delenv("T_COMMUNITY")
    bad = CliRunner().invoke(app, ["check-config", str(path)])
    assert bad.exit_code == 2 and "credentials.v2.community_env" in bad.output
