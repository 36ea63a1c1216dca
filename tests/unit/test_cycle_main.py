"""``python -m kubus.cycle``: flags, config and profile mistakes are one line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kubus.cycle.__main__ import UsageError, build, parse_args

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: gpu
  plugins:
    multiPoint:
      enabled: [{name: GPUFit}]
"""


def test_a_profile_of_the_config_builds_its_service(tmp_path: Path) -> None:
    config = tmp_path / "sched.yaml"
    config.write_text(CONFIG)
    service = build(
        parse_args(["--profile", "gpu", "--config", str(config), "--batch-size", "32", "--backend", "numpy"])
    )
    assert service.profile == "gpu" and service.options.batch_size == 32 and service.backend.name == "numpy"
    assert "GPUFit" in service.framework.plugins


def test_without_a_config_kubes_default_profile_is_there() -> None:
    service = build(parse_args(["--profile", "default-scheduler", "--backend", "numpy"]))
    assert service.profile == "default-scheduler"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--profile", "nope"], 'no profile with schedulerName "nope" (profiles: default-scheduler)'),
        (["--profile", "gpu", "--config", "/nonexistent/sched.yaml"], "/nonexistent/sched.yaml: cannot read the file"),
        (["--profile", "default-scheduler", "--batch-size", "0"], "--batch-size: must be at least 1, got 0"),
        (["--profile", "x", "--settings", "/nonexistent/settings.yaml"], "cannot read settings file"),
    ],
)
def test_mistakes_are_one_line(argv: list[str], expected: str) -> None:
    with pytest.raises(UsageError) as caught:
        build(parse_args(argv))
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_a_bad_config_names_the_file_and_field(tmp_path: Path) -> None:
    config = tmp_path / "sched.yaml"
    config.write_text(CONFIG.replace("GPUFit", "NoSuchPlugin"))
    with pytest.raises(UsageError) as caught:
        build(parse_args(["--profile", "gpu", "--config", str(config)]))
    assert str(config) in str(caught.value) and "NoSuchPlugin" in str(caught.value)


def test_the_module_exits_2_with_one_line_on_stderr() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kubus.cycle", "--profile", "nope", "--backend", "numpy"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        'kubus.cycle: --profile: no profile with schedulerName "nope" (profiles: default-scheduler)'
    ]
