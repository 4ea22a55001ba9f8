import pytest

from confkit import Config, ConfigError, MissingOptionError, load, loads

SAMPLE = """
[DEFAULT]
timeout = 30

[server]
host = 0.0.0.0
port = 8080
debug = yes
ratio = 0.75
names = a, b,
  c

[client]
timeout = 5
"""


def test_typed_getters():
    cfg = loads(SAMPLE)
    assert cfg.get("server", "host") == "0.0.0.0"
    assert cfg.getint("server", "port") == 8080
    assert cfg.getfloat("server", "ratio") == 0.75
    assert cfg.getboolean("server", "debug") is True
    assert cfg.getlist("server", "names") == ["a", "b", "c"]


def test_defaults_are_inherited():
    cfg = loads(SAMPLE)
    assert cfg.getint("server", "timeout") == 30
    assert cfg.getint("client", "timeout") == 5


def test_missing_option_raises():
    cfg = loads(SAMPLE)
    with pytest.raises(MissingOptionError):
        cfg.get("server", "workers")
    with pytest.raises(KeyError):
        cfg.get("nosuchsection", "x")


def test_fallback_for_missing_option():
    cfg = loads(SAMPLE)
    assert cfg.get("server", "workers", fallback="4") == "4"
    assert cfg.getint("server", "workers", fallback=4) == 4


def test_sections_and_items():
    cfg = loads(SAMPLE)
    assert cfg.sections() == ["server", "client"]
    assert dict(cfg.items("client")) == {"timeout": "5"}


def test_bad_boolean():
    cfg = loads("[a]\nflag = maybe\n")
    with pytest.raises(ValueError):
        cfg.getboolean("a", "flag")


def test_set_and_add_section():
    cfg = Config()
    cfg.add_section("x")
    cfg.set("x", "Key", 3)
    assert cfg.getint("x", "key") == 3
    with pytest.raises(ConfigError):
        cfg.add_section("x")


def test_load_file(tmp_path):
    path = tmp_path / "app.ini"
    path.write_text("[app]\nname = demo\n", encoding="utf-8")
    assert load(path).get("app", "name") == "demo"
