"""The README's "Run it" walkthrough, run as written: its command blocks marked
``<!-- walkthrough ... -->`` are taken from README.md and run by bash in the repository's root,
against a fresh data dir (``$KUBUS_HOME``) and a per-user file of the test's (``$KUBUS_CONFIG``).
The first block starts `kubus up` (stopped at the end with Ctrl-C's SIGINT); the second is the
"other shell": apply, get, describe. Each shows what the README says it shows. Then a cluster
command run from another directory, with no ``$KUBUS_HOME``, finds the same cluster through the
per-user file, as kubectl finds its cluster from anywhere.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import eventually

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bash, setsid")]

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
_MARK = re.compile(r"^<!-- walkthrough\b[^\n]*-->\s*\n```sh\n(.*?)^```", re.M | re.S)


def walkthrough_blocks(text: str) -> list[list[str]]:
    """The commands of each marked ```sh block, in order, comment-only lines left out."""
    blocks = []
    for body in _MARK.findall(text):
        lines = [line for line in body.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        blocks.append(lines)
    return blocks


def _script(lines: list[str]) -> str:
    """The block as a bash script that marks where each command's output starts and stops at
    the first command that fails (the README never shows one failing)."""
    out = ["set -e"]
    for i, line in enumerate(lines):
        out.append(f"echo '+++ {i}'")
        out.append(line)
    return "\n".join(out) + "\n"


def _outputs(text: str, count: int) -> list[str]:
    parts = re.split(r"^\+\+\+ (\d+)\n", text, flags=re.M)
    found = {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    return [found.get(i, "") for i in range(count)]


def test_the_readme_marks_the_walkthrough() -> None:
    blocks = walkthrough_blocks(README.read_text())
    assert len(blocks) == 2, blocks
    up, other = blocks
    assert any(line.split("#")[0].split() == ["kubus", "up"] for line in up), up
    commands = [line.split("#")[0].split()[:2] for line in other]
    assert ["kubus", "apply"] in commands and ["kubus", "get"] in commands and ["kubus", "describe"] in commands


async def test_the_readme_walkthrough_runs_as_written(tmp_path: Path) -> None:
    if not (REPO / ".venv" / "bin" / "activate").is_file():
        pytest.skip("the walkthrough activates .venv/, which `make` creates; this checkout has none")
    up_lines, other_lines = walkthrough_blocks(README.read_text())
    env = {**os.environ, "KUBUS_HOME": str(tmp_path / "home"), "KUBUS_CONFIG": str(tmp_path / "config")}
    for name in ("KUBUS_NATS_URL", "KUBUS_REDIS_URL"):
        env.pop(name, None)  # the walkthrough's own servers, not the test session's
    up_out = tmp_path / "up.out"
    up = subprocess.Popen(
        ["bash", "-c", _script(up_lines)],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=up_out.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, as a terminal's foreground job: Ctrl-C reaches it all
    )
    try:

        def ready() -> None:
            text = up_out.read_text(errors="replace")
            assert up.poll() is None, text
            assert re.search(r"ready in [\d.]+s: 10 nodes, profiles default-scheduler", text), text

        await eventually(ready, timeout=90, interval=0.2)

        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", _script(other_lines), cwd=REPO, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        raw, _ = await asyncio.wait_for(proc.communicate(), 60)
        text = raw.decode(errors="replace")
        assert proc.returncode == 0, text
        verbs = [line.split("#")[0].split()[1] for line in other_lines]
        outputs = dict(zip(verbs, _outputs(text, len(other_lines)), strict=True))
        applied = outputs.get("apply", "")
        assert len(re.findall(r"^pod/\S+ created$", applied, re.M)) == 9, applied
        assert "pod/web-1 created" in applied and "pod/wrong-model-1 created" in applied, applied
        listed = outputs.get("get", "")
        for pending in ("gated-1", "too-big-1", "wrong-model-1"):
            assert re.search(rf"^\S*\s*{pending}\s+.*\bPending\b", listed, re.M), listed
        described = outputs.get("describe", "")
        assert "0/10 nodes are available: 10 Insufficient cpu." in described, described
        assert "would fit" in described, described

        # From any directory, with no $KUBUS_HOME: the per-user file's current cluster.
        elsewhere = {k: v for k, v in env.items() if k != "KUBUS_HOME"}
        kubus = str(REPO / ".venv" / "bin" / "kubus")

        async def six_running() -> None:
            got = await asyncio.create_subprocess_exec(
                kubus, "get", "pods", cwd=tmp_path, env=elsewhere,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            out, _ = await asyncio.wait_for(got.communicate(), 30)
            listing = out.decode(errors="replace")
            assert got.returncode == 0, listing
            placed = re.findall(r"\b(Running|Succeeded)\b", listing)
            assert len(placed) == 6, listing

        await eventually(six_running, timeout=20, interval=0.5)
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGINT)  # Ctrl-C
        try:
            up.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
    assert "kubus up: stopped" in up_out.read_text(errors="replace"), up_out.read_text(errors="replace")
