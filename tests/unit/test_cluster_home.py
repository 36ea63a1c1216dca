"""Finding the cluster from any directory, as kubectl finds its cluster: ``--data-dir``, else
``--cluster NAME`` (the per-user file), else ``$KUBUS_HOME``, else ``./.kubus`` when a `kubus up`
runs there, else the per-user file's current cluster (the last `kubus up` started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubus.cli.endpoints import (
    Endpoints,
    cluster_home,
    cluster_settings,
    read_clusters,
    record_cluster,
    write_endpoints,
)
from kubus.core.errors import UsageError


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    work = tmp_path / "elsewhere"
    work.mkdir()
    monkeypatch.chdir(work)
    return {"KUBUS_CONFIG": str(tmp_path / "user" / "config")}


def _up(directory: Path, env: dict[str, str], port: int) -> str:
    write_endpoints(directory, Endpoints(f"nats://127.0.0.1:{port}", f"redis://127.0.0.1:{port + 1}/0", pid=1))
    return record_cluster(directory.resolve(), env)


def test_the_last_kubus_up_is_found_from_another_directory(tmp_path: Path, env: dict[str, str]) -> None:
    assert cluster_home(env=env) == Path(".kubus")  # nothing recorded: the old default
    _up(tmp_path / "checkout" / ".kubus", env, 4000)
    assert _up(tmp_path / "demo", env, 5000) == "demo"
    assert cluster_home(env=env) == (tmp_path / "demo").resolve()
    settings, recorded = cluster_settings(env=env)
    assert recorded is not None and settings.nats_url == "nats://127.0.0.1:5000"


def test_names_are_the_data_dirs_and_cluster_picks_one(tmp_path: Path, env: dict[str, str]) -> None:
    assert _up(tmp_path / "checkout" / ".kubus", env, 4000) == "checkout"
    assert _up(tmp_path / "other" / "checkout", env, 5000) == "checkout-2"
    assert _up(tmp_path / "checkout" / ".kubus", env, 4000) == "checkout"  # the same dir, the same name
    records, current = read_clusters(env)
    assert [r.name for r in records] == ["checkout", "checkout-2"] and current == "checkout"
    assert cluster_home(env=env, cluster="checkout-2") == (tmp_path / "other" / "checkout").resolve()
    with pytest.raises(UsageError, match=r"--cluster: no cluster 'nope' .* \(known: checkout, checkout-2\)"):
        cluster_home(env=env, cluster="nope")


def test_order_data_dir_then_kubus_home_then_cwd_then_current(tmp_path: Path, env: dict[str, str]) -> None:
    _up(tmp_path / "recorded", env, 4000)
    _up(Path(".kubus"), env, 6000)  # a kubus up in the current directory
    _up(tmp_path / "recorded", env, 4000)  # ... and the recorded one started last
    assert cluster_home(env=env) == Path(".kubus")
    home = {**env, "KUBUS_HOME": str(tmp_path / "home")}
    assert cluster_home(env=home) == tmp_path / "home"
    assert cluster_home(tmp_path / "flag", env=home, cluster="recorded") == tmp_path / "flag"
    assert cluster_home(env=home, cluster="recorded") == (tmp_path / "recorded").resolve()


def test_a_damaged_user_file_is_no_cluster(tmp_path: Path, env: dict[str, str]) -> None:
    path = Path(env["KUBUS_CONFIG"])
    path.parent.mkdir(parents=True)
    path.write_text("clusters: [oops")
    assert read_clusters(env) == ((), None)
    assert cluster_home(env=env) == Path(".kubus")
    assert _up(tmp_path / "fresh", env, 4000) == "fresh"  # and kubus up writes it anew
