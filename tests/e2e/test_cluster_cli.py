"""The cluster CLI (apply, get, describe, delete), `kubus up` and `kubus bench`, end to end:
the real services as processes against real NATS and Redis."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import shlex
import signal
import stat
import sys
import time
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
import redis.asyncio as aioredis
import redis.exceptions
import yaml
from cluster_support import CliResult, StartServices, run_kubus, service_logs
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from support import eventually

from kubus.access import ACCESS_DIR, read_credentials
from kubus.cli.bench import check_invariants_settled
from kubus.cli.endpoints import Endpoints, cluster_settings, read_endpoints, write_endpoints
from kubus.cli.workload import NODE_TEMPLATE, impossible_pods, mixed_workload, to_yaml
from kubus.store import ClusterState, PodPhase

REPO = Path(__file__).resolve().parents[2]

GOOD = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  containers: [{name: c, image: nginx, resources: {requests: {cpu: 500m, memory: 1Gi}}}]
---
apiVersion: v1
kind: List
items:
- kind: Pod
  apiVersion: v1
  metadata: {name: train, labels: {team: ml}}
  spec:
    containers: [{name: c, image: trainer, resources: {limits: {nvidia.com/gpu: "2"}}}]
- kind: Pod
  apiVersion: v1
  metadata: {name: infer, labels: {team: ml, tier: online}, annotations: {kubus.io/gpu-memory: 20Gi}}
  spec:
    containers: [{name: c, image: triton}]
"""

IMPOSSIBLE = """
apiVersion: v1
kind: Pod
metadata: {name: huge}
spec:
  containers: [{name: c, image: trainer, resources: {limits: {nvidia.com/gpu: "16"}}}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
"""

BAD_CPU = """
apiVersion: v1
kind: Pod
metadata: {name: ok}
spec:
  containers: [{name: c, image: nginx}]
---
apiVersion: v1
kind: Pod
metadata: {name: bad}
spec:
  containers: [{name: c, image: nginx, resources: {requests: {cpu: 1.5 cores}}}]
"""


def one_error_line(result: CliResult) -> str:
    assert result.out == "", result.out
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.err
    assert "Traceback" not in result.err
    return lines[0]


async def stream_messages(js: JetStreamContext, stream: str = "KUBUS_PODS") -> int:
    try:
        return (await js.stream_info(stream)).state.messages
    except NotFoundError:
        return 0


async def pods_by_name(state: ClusterState) -> dict[str, Any]:
    index = await state.redis.hgetall(state.keys.pod_keys_index())
    uids = {k.decode(): v.decode() for k, v in index.items()}
    records = await state.get_pods(uids.values())
    return {r.key: r for r in records if r is not None}


# ---- connection settings -------------------------------------------------------------------------


def test_connection_settings_order(tmp_path: Path) -> None:
    """flags > environment > settings file > `kubus up`'s endpoints.json > defaults."""
    home = tmp_path / "home"
    write_endpoints(home, Endpoints("nats://up:1", "redis://up:2/0", pid=1))
    env = {"KUBUS_HOME": str(home)}
    s, recorded = cluster_settings(env=env)
    assert (s.nats_url, s.redis_url) == ("nats://up:1", "redis://up:2/0") and recorded is not None
    settings_file = tmp_path / "s.yaml"
    settings_file.write_text("nats_url: nats://file:1\nconnect_timeout: 2\n")
    s, _ = cluster_settings(env=env, settings_file=str(settings_file))
    assert (s.nats_url, s.redis_url, s.connect_timeout) == ("nats://file:1", "redis://up:2/0", 2.0)
    s, _ = cluster_settings(env={**env, "KUBUS_NATS_URL": "nats://env:1"}, settings_file=str(settings_file))
    assert s.nats_url == "nats://env:1"
    s, _ = cluster_settings(env={**env, "KUBUS_NATS_URL": "nats://env:1"}, nats="nats://flag:1", redis="redis://f/0")
    assert (s.nats_url, s.redis_url) == ("nats://flag:1", "redis://f/0")
    s, _ = cluster_settings(env={}, directory=tmp_path / "nothing")
    assert s.nats_url == "nats://127.0.0.1:4222"
    (home / "endpoints.json").write_text("{not json")
    assert read_endpoints(home) is None


async def test_unreachable_servers_are_one_line_naming_the_url_exit_1(tmp_path: Path) -> None:
    env = {"KUBUS_HOME": str(tmp_path), "KUBUS_CONNECT_TIMEOUT": "1"}
    pods = tmp_path / "pods.yaml"
    pods.write_text(GOOD)
    result = await run_kubus("apply", "-f", str(pods), "--nats", "nats://127.0.0.1:1", env=env)
    assert result.code == 1
    assert "nats://127.0.0.1:1" in one_error_line(result)
    result = await run_kubus("get", "pods", "--redis", "redis://:secret@127.0.0.1:1/0", env=env)
    assert result.code == 1
    line = one_error_line(result)
    assert "redis://:***@127.0.0.1:1/0" in line and "secret" not in line


# ---- user mistakes: one line, exit 2, nothing published ------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("get", "deployments"), "invalid choice"),
        (("get", "nodes", "-n", "x"), "nodes have no namespace"),
        (("get", "pods", "-n", "x", "-A"), "not both"),
        (("apply",), "-f/--filename"),
        (("frobnicate",), "invalid choice"),
        (("up", "--nodes", "-1"), "--nodes"),
        (("up", "--nats", "nats://127.0.0.1:4222"), "give both --nats and --redis"),
        (("bench", "--pods", "0"), "--pods"),
    ],
)
async def test_usage_mistakes_are_one_line_exit_2(tmp_path: Path, args: tuple[str, ...], expected: str) -> None:
    result = await run_kubus(*args, env={"KUBUS_HOME": str(tmp_path)})
    assert result.code == 2
    assert expected in one_error_line(result)


async def test_apply_bad_manifest_exits_2_and_publishes_nothing(
    kubus: Any, js: JetStreamContext, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_CPU)
    result = await kubus("apply", "-f", str(bad))
    assert result.code == 2
    line = one_error_line(result)
    assert line.startswith(f"error: {bad}: Pod default/bad: spec.containers[0].resources.requests.cpu: ")
    assert await stream_messages(js) == 0
    # A good file next to a bad one: still nothing is sent.
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    result = await kubus("apply", "-f", str(good), "-f", str(bad))
    assert result.code == 2 and await stream_messages(js) == 0


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        ("apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: '1'}}\n", "nodes join"),
        (GOOD + "---\n" + GOOD.split("---")[0], "duplicate"),
        ("{not yaml: [", "invalid YAML"),
        ("apiVersion: v1\nkind: Deployment\nmetadata: {name: d}\n", "not supported"),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: big, annotations: {junk: '" + "x" * (300 * 1024) + "'}}\n"
            "spec: {containers: [{name: c, image: i}]}\n",
            "kubus accepts at most",
        ),
    ],
)
async def test_apply_refuses_what_it_cannot_submit(
    kubus: Any, js: JetStreamContext, tmp_path: Path, manifest: str, expected: str
) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(manifest)
    result = await kubus("apply", "-f", str(path))
    assert result.code == 2
    assert expected in one_error_line(result)
    assert await stream_messages(js) == 0


async def test_apply_publishes_one_message_per_pod_with_its_msg_id(kubus: Any, js: JetStreamContext) -> None:
    result = await kubus("apply", "-f", "-", "--no-wait", stdin=GOOD.encode())
    assert result.code == 0, result.err
    assert result.out.splitlines() == ["pod/web accepted", "pod/train accepted", "pod/infer accepted"]
    assert await stream_messages(js) == 3
    # The same manifests again within the duplicate window: published once (no queue has stored
    # them yet, so the store cannot say they are unchanged).
    again = await kubus("apply", "-f", "-", "--no-wait", stdin=GOOD.encode())
    assert again.code == 0 and again.out.splitlines()[0] == "pod/web accepted"
    assert await stream_messages(js) == 3
    sub = await js.pull_subscribe("kubus.pods.submit", durable="cli-test")
    msgs = await sub.fetch(3, timeout=5)
    ids = sorted(m.headers["Nats-Msg-Id"] for m in msgs)
    assert ids[0].startswith("submit/default/infer/") and ids[2].startswith("submit/shop/web/")
    web = next(m for m in msgs if m.headers["Nats-Msg-Id"].startswith("submit/shop/web/"))
    assert json.loads(web.data)["metadata"] == {"name": "web", "namespace": "shop"}


# ---- against the running services -----------------------------------------------------------------


async def test_apply_get_describe_delete(
    services: StartServices, kubus: Any, cli_env: dict[str, str], redis: aioredis.Redis, tmp_path: Path
) -> None:
    cluster = await services(nodes=20)
    state = ClusterState(redis)
    pods = tmp_path / "pods.yaml"
    pods.write_text(GOOD + "---\n" + IMPOSSIBLE)
    result = await kubus("apply", "-f", str(pods))
    assert result.code == 0, result.err
    assert len(result.out.splitlines()) == 4

    async def settled() -> dict[str, Any]:
        by_key = await pods_by_name(state)
        assert set(by_key) == {"shop/web", "default/train", "default/infer", "default/huge"}
        for key in ("shop/web", "default/train", "default/infer"):
            assert by_key[key].phase in (PodPhase.BOUND, PodPhase.RUNNING), by_key[key]
        assert by_key["default/huge"].phase is PodPhase.PENDING and by_key["default/huge"].message
        return by_key

    try:
        by_key = await eventually(settled, timeout=60, interval=0.2)
    except AssertionError:
        pytest.fail(f"pods did not settle:\n{service_logs(cluster)}")
    assert len(by_key["default/train"].gpu_devices) == 2

    table = await kubus("get", "pods", "-A")
    assert table.code == 0, table.err
    lines = table.out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "PHASE", "NODE", "GPUS", "AGE", "REASON"]
    assert len(lines) == 5
    huge = next(line for line in lines if " huge " in line)
    assert "Pending" in huge and "<none>" in huge
    default_only = await kubus("get", "pods")
    assert "shop" not in default_only.out and len(default_only.out.splitlines()) == 4
    as_json = json.loads((await kubus("get", "pods", "-n", "shop", "-o", "json")).out)
    assert (as_json["apiVersion"], as_json["kind"]) == ("v1", "List")
    [web] = as_json["items"]
    assert web["metadata"]["name"] == "web" and web["spec"]["nodeName"].startswith("sim-")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", web["metadata"]["creationTimestamp"])
    assert web["status"]["phase"] in ("Pending", "Running")  # Bound is kube's Pending until it starts
    assert {"type": "PodScheduled", "status": "True"}.items() <= web["status"]["conditions"][0].items()

    # kubectl's forms: by name, TYPE/NAME, -o name|jsonpath|custom-columns, --no-headers, --sort-by
    one = yaml.safe_load((await kubus("get", "pod", "huge", "-o", "yaml")).out)
    assert one["kind"] == "Pod" and one["metadata"]["name"] == "huge"
    scheduled = next(c for c in one["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["status"] == "False" and scheduled["reason"] == "Unschedulable", one["status"]
    slash = await kubus("get", "pod/train", "pod/infer", "-o", "name")
    assert slash.out.splitlines() == ["pod/train", "pod/infer"]
    named = await kubus("get", "pods", "-A", "--no-headers", "--sort-by", ".metadata.name", "-o", "name")
    assert named.out.splitlines() == ["pod/huge", "pod/infer", "pod/train", "pod/web"]
    bare = await kubus("get", "pods", "-A", "--no-headers", "--sort-by", "{.metadata.name}")
    assert [line.split()[1] for line in bare.out.splitlines()] == ["huge", "infer", "train", "web"]
    template = '{range .items[*]}{.metadata.name}{"\\t"}{.spec.nodeName}{"\\n"}{end}'
    ranged = await kubus("get", "pods", "-n", "shop", "-o", f"jsonpath={template}")
    assert ranged.out == f"web\t{web['spec']['nodeName']}\n", ranged
    columns = await kubus("get", "pods", "-o", "custom-columns=NAME:.metadata.name,PHASE:.status.phase")
    assert columns.out.splitlines()[0].split() == ["NAME", "PHASE"] and len(columns.out.splitlines()) == 4
    nope = await kubus("get", "pods", "nope", "-o", "yaml")
    assert nope.code == 1 and nope.out == "" and 'pods "nope" not found' in one_error_line(nope)
    # what get prints, applied back, is the same pod: status and spec.nodeName are the server's
    printed = (await kubus("get", "pods", "-A", "-o", "yaml")).out
    again = await kubus("apply", "-f", "-", stdin=printed.encode())
    assert again.code == 0 and sorted(again.out.splitlines()) == [
        f"pod/{n} unchanged" for n in ("huge", "infer", "train", "web")
    ], again
    # a reader that is gone (`| head`, here `| true`, gone before kubus writes): no error line
    line = f"{shlex.quote(sys.executable)} -m kubus.cli get pods -A -o yaml | true; echo $" + "{PIPESTATUS[0]}"
    piped = await asyncio.create_subprocess_exec(
        "bash", "-c", line, env={**os.environ, **cli_env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    status, err = await asyncio.wait_for(piped.communicate(), 60)
    assert err.decode() == "" and status.decode().strip() == "141", (status, err)

    # kubectl habits: label selectors, YAML
    ml = await kubus("get", "pods", "-A", "-l", "team=ml")
    assert sorted(line.split()[1] for line in ml.out.splitlines()[1:]) == ["infer", "train"]
    batch = await kubus("get", "pods", "-A", "-l", "team=ml,tier notin (online)")
    assert [line.split()[1] for line in batch.out.splitlines()[1:]] == ["train"]
    bad = await kubus("get", "pods", "-l", "team in (ml")
    assert bad.code == 2 and 'unbalanced "("' in one_error_line(bad)
    as_yaml = yaml.safe_load((await kubus("get", "pods", "-n", "shop", "-o", "yaml")).out)
    assert [p["metadata"]["name"] for p in as_yaml["items"]] == ["web"]

    top = await kubus("top", "nodes", "--gpus", "-l", "kubernetes.io/hostname in (sim-00000,sim-00001)")
    assert top.code == 0, top.err
    top_lines = top.out.splitlines()
    assert top_lines[0].split() == [
        "NAME", "CPU(req)", "CPU%", "MEMORY(req)", "MEMORY%", "GPUS(used/total)", "GPU-MEMORY%", "PODS"
    ]  # fmt: skip
    gpu_lines = [line for line in top_lines if line.startswith("  gpu")]
    assert [line.split()[0] for line in top_lines if not line.startswith(" ")][1:] == ["sim-00000", "sim-00001"]
    assert len(gpu_lines) == 16 and all("[" in line and "]" in line for line in gpu_lines)
    top_json = json.loads((await kubus("top", "nodes", "--gpus", "-o", "json")).out)
    used = sum(g["memoryUsed"] > 0 for n in top_json["nodes"] for g in n["gpus"])
    assert used == 3  # train's two whole GPUs and infer's 20Gi slice

    nodes = await kubus("get", "nodes")
    assert nodes.code == 0, nodes.err
    node_lines = nodes.out.splitlines()
    assert node_lines[0].split()[:5] == ["NAME", "STATUS", "CPU(req/alloc)", "MEMORY(req/alloc)", "GPUS(used/total)"]
    assert len(node_lines) == 21 and all(" Ready " in line for line in node_lines[1:])
    assert sum(int(line.split()[4].split("/")[0]) for line in node_lines[1:]) == 3  # 2 whole + 1 shared
    # simulated nodes have no creationTimestamp: they are as old as their first registration
    assert all(re.fullmatch(r"\d+[smhd]\S*", line.split()[6]) for line in node_lines[1:]), nodes.out
    as_yaml = yaml.safe_load((await kubus("get", "node", "sim-00000", "-o", "yaml")).out)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", as_yaml["metadata"]["creationTimestamp"])

    described = await kubus("describe", "pod", "huge")
    assert described.code == 0, described.err
    text = described.out
    assert "Phase:" in text and "Pending" in text
    assert "0/20 nodes are available: 20 Insufficient nvidia.com/gpu." in text, text
    assert "Why pending" in text
    breakdown = text.split("Why pending", 1)[1]
    assert "NodeResourcesFit" in breakdown and "Insufficient nvidia.com/gpu" in breakdown
    assert "20 " in breakdown and "sim-00000" in breakdown
    # never silent: the claim kubus does not check, in the fields and as a Warning event
    assert "Not honoured:" in text and "spec.volumes[0].persistentVolumeClaim: not honoured" in text
    assert "FieldNotHonoured" in text
    # what would make it fit: no node has 16 GPUs, each simulated node has 8
    assert "What would make it fit" in text and "would fit: nvidia.com/gpu request 8 (now 16) -> " in text, text
    bound = await kubus("describe", "pod", "web", "-n", "shop")
    assert "Node:" in bound.out and "sim-" in bound.out and "Why pending" not in bound.out

    missing = await kubus("describe", "pod", "nope")
    assert missing.code == 1 and "not found" in one_error_line(missing)
    every = await kubus("describe", "pods", "-A")
    assert every.code == 0 and every.out.count("\nName:") + every.out.startswith("Name:") == 4, every.out
    node = await kubus("describe", "node", web["spec"]["nodeName"])
    assert node.code == 0 and "Allocatable:" in node.out and "Non-terminated Pods:" in node.out, node.out
    assert re.search(r"^  shop\s+web\s+500m \(\d+%\)\s+1Gi", node.out, re.M), node.out
    top_pods = await kubus("top", "pods", "-A")
    assert top_pods.code == 0 and top_pods.out.splitlines()[0].split()[:4] == [
        "NAMESPACE", "NAME", "CPU(req)", "MEMORY(req)"
    ], top_pods.out  # fmt: skip
    assert any(line.split()[:2] == ["default", "train"] for line in top_pods.out.splitlines())

    deleted = await kubus("delete", "pod", "web", "-n", "shop")
    assert deleted.code == 0, deleted.err + service_logs(cluster)
    assert deleted.out.strip() == 'pod "web" deleted'
    assert (await state.find_pod("shop", "web")).phase is PodPhase.DELETED  # type: ignore[union-attr]
    assert "web" not in (await kubus("get", "pods", "-A")).out
    assert "web" in (await kubus("get", "pods", "-A", "--show-deleted")).out
    gone = await kubus("delete", "pod", "nope")
    assert gone.code == 1 and "not found" in one_error_line(gone)
    assert (await kubus("delete", "pod", "nope", "--ignore-not-found")).code == 0
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "huge.yaml").write_text(IMPOSSIBLE)
    by_file = await kubus("delete", "-f", str(tmp_path / "dir"))
    assert by_file.code == 0 and by_file.out.strip() == 'pod "huge" deleted', by_file
    assert await check_invariants_settled(state) == []


async def test_apply_says_what_the_store_has_and_refuses_at_once_what_the_queue_would(
    services: StartServices, kubus: Any, js: JetStreamContext, redis: aioredis.Redis, tmp_path: Path
) -> None:
    """created (confirmed stored), unchanged (the store has it: nothing sent again, whatever the
    bus's duplicate window), configured (a Pending pod changed); a changed spec of a pod that is
    not Pending any more is refused at once, in kube's words, exit 1, and nothing is sent."""
    await services(nodes=5)
    pods = tmp_path / "pods.yaml"
    pods.write_text(GOOD + "---\n" + IMPOSSIBLE)
    first = await kubus("apply", "-f", str(pods))
    assert first.code == 0, first.err
    assert first.out.splitlines() == ["pod/web created", "pod/train created", "pod/infer created", "pod/huge created"]
    sent = await stream_messages(js)
    again = await kubus("apply", "-f", str(pods))
    assert again.code == 0, again.err
    assert again.out.splitlines() == [f"pod/{n} unchanged" for n in ("web", "train", "infer", "huge")]
    assert await stream_messages(js) == sent  # unchanged pods are not sent again

    state = ClusterState(redis)

    async def web_placed() -> None:
        web = await state.find_pod("shop", "web")
        assert web is not None and web.phase in (PodPhase.BOUND, PodPhase.RUNNING), web

    await eventually(web_placed, timeout=60)
    changed = tmp_path / "changed.yaml"
    changed.write_text(GOOD.replace("image: nginx", "image: nginx:2") + "---\n" + IMPOSSIBLE.replace('"16"', '"15"'))
    refused = await kubus("apply", "-f", str(changed))
    assert refused.code == 1, refused
    assert 'error: pod/web: The Pod "web" is invalid: spec: Forbidden: a pod changes only while it is Pending' in (
        refused.err
    ), refused.err
    assert "pod/huge configured" in refused.out.splitlines()  # the Pending one changes
    assert "pod/web" not in refused.out


async def test_apply_without_a_queue_says_the_pods_are_not_stored_and_exits_1(
    kubus: Any, redis: aioredis.Redis, js: JetStreamContext
) -> None:
    """Accepted by the bus is not stored: with no queue to store them (the fixtures wiped the
    servers), apply waits its timeout, names every pod not stored and exits 1."""
    result = await kubus("apply", "-f", "-", "--timeout", "1", stdin=GOOD.encode())
    assert result.code == 1, result
    lines = result.err.splitlines()
    assert len(lines) == 3 and all("accepted by the bus, not stored within 1s" in line for line in lines), lines
    assert lines[0].startswith("error: pod/web: ") and "is the queue service running?" in lines[0]


async def test_get_pods_watch_follows_changes_and_events_tell_a_pod_s_story(
    services: StartServices, kubus: Any, cli_env: dict[str, str], redis: aioredis.Redis
) -> None:
    await services(nodes=3)
    watch = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kubus.cli", "get", "pods", "-A", "-w",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, **cli_env},
    )  # fmt: skip
    assert watch.stdout is not None
    seen: list[str] = []
    try:
        # the watch is up once it has printed the (empty) list: "No pods found" goes to stderr
        assert watch.stderr is not None
        assert b"No pods found" in await asyncio.wait_for(watch.stderr.readline(), 30)
        applied = await kubus("apply", "-f", "-", stdin=GOOD.encode())
        assert applied.code == 0, applied.err

        async def read_until_running() -> None:
            assert watch.stdout is not None
            while True:
                line = (await watch.stdout.readline()).decode()
                assert line, "the watch ended early"
                seen.append(line)
                running = {ln.split()[1] for ln in seen if len(ln.split()) > 2 and ln.split()[2] == "Running"}
                if {"web", "train", "infer"} <= running:
                    return

        await asyncio.wait_for(read_until_running(), 60)
    finally:
        watch.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(watch.wait(), 15)
    assert code == 0, (await watch.stderr.read()).decode() if watch.stderr else code
    phases = [ln.split()[2] for ln in seen if ln.split()[:2] == ["default", "train"]]
    # a line per change, as the change found it (an announcement repeated after a retry repeats its line)
    assert [phase for phase, _ in itertools.groupby(phases)] == ["Pending", "Bound", "Running"], seen

    events = await kubus("get", "events", "--for", "pod/train")
    assert events.code == 0, events.err
    lines = events.out.splitlines()
    assert lines[0].split()[:4] == ["LAST", "SEEN", "TYPE", "REASON"]
    assert all(" pod/train " in ln for ln in lines[1:]) and len(lines) >= 2, events.out
    everything = json.loads((await kubus("get", "events", "-A", "-o", "json")).out)["items"]
    assert {e["involvedObject"]["name"] for e in everything} == {"web", "train", "infer"}
    assert all(e["kind"] == "Event" and e["count"] >= 1 for e in everything)
    assert [e["lastTimestamp"] for e in everything] == sorted(e["lastTimestamp"] for e in everything)
    missing = await kubus("get", "events", "--for", "pod/nope")
    assert missing.code == 1 and 'pods "nope" not found' in one_error_line(missing)
    wrong = await kubus("get", "events", "--for", "node/n1")
    assert wrong.code == 2 and "expected pod/NAME" in one_error_line(wrong)


async def test_describe_says_how_long_until_running_pods_make_room(
    services: StartServices, kubus: Any, redis: aioredis.Redis
) -> None:
    """Two nodes of 8 GPUs, each filled by a pod that runs 120 s (the simulated agent knows it):
    a pod asking for 8 GPUs is pending now, and fits once one of them finishes."""
    await services(nodes=2, pod_duration=120)
    state = ClusterState(redis)
    fill = "".join(
        f"---\napiVersion: v1\nkind: Pod\nmetadata: {{name: fill-{i}}}\n"
        'spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: "8"}}}]}\n'
        for i in range(2)
    )
    assert (await kubus("apply", "-f", "-", stdin=fill.encode())).code == 0

    async def running() -> None:
        pods = await pods_by_name(state)
        assert all(pods[f"default/fill-{i}"].phase is PodPhase.RUNNING for i in range(2)), pods
        assert all(pods[f"default/fill-{i}"].ends_at > time.time() + 60 for i in range(2))

    await eventually(running, timeout=60, interval=0.2)
    waiting = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: next}\n"
        'spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: "8"}}}]}\n'
    )
    assert (await kubus("apply", "-f", "-", stdin=waiting.encode())).code == 0

    async def pending() -> None:
        record = (await pods_by_name(state))["default/next"]
        assert record.phase is PodPhase.PENDING and record.message, record

    await eventually(pending, timeout=60, interval=0.2)
    text = (await kubus("describe", "pod", "next")).out
    found = re.search(
        r"would fit: wait (\d+)s: (\d) running pod\(s\) finish by then -> (\d) node\(s\), e\.g\. sim-", text
    )
    assert found is not None, text
    seconds, finishing, nodes = (int(g) for g in found.groups())
    # both ran 120 s from about the same moment: one or both finish first, each freeing its node
    assert 60 <= seconds <= 120 and finishing == nodes and nodes in (1, 2)


async def test_describe_shows_per_plugin_reasons_grouped(
    services: StartServices, kubus: Any, redis: aioredis.Redis
) -> None:
    """Two kinds of rejection on one pod: nodes full of GPUs and a node selector nobody has."""
    cluster = await services(nodes=6)
    state = ClusterState(redis)
    pods = impossible_pods() + [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"fill-{i}"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": f"sim-0000{i}"},
                "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
            },
        }
        for i in range(2)
    ]
    result = await kubus("apply", "-f", "-", stdin=to_yaml(pods).encode())
    assert result.code == 0, result.err

    async def filled() -> None:
        by_key = await pods_by_name(state)
        assert by_key["default/fill-0"].phase in (PodPhase.BOUND, PodPhase.RUNNING)
        assert by_key["default/fill-1"].phase in (PodPhase.BOUND, PodPhase.RUNNING)
        assert by_key["default/pod-impossible-zone"].message

    try:
        await eventually(filled, timeout=60, interval=0.2)
    except AssertionError:
        pytest.fail(f"pods did not settle:\n{service_logs(cluster)}")
    text = (await kubus("describe", "pod", "pod-impossible-zone")).out
    assert "0/6 nodes are available: 6 node(s) didn't match Pod's node affinity/selector." in text, text
    assert "NodeAffinity" in text
    huge = (await kubus("describe", "pod", "pod-impossible-16gpus")).out
    # Every node lacks 16 GPUs: one group, all six nodes.
    assert "6 Insufficient nvidia.com/gpu" in huge, huge


# ---- kubus up, end to end ---------------------------------------------------------------------


async def _wait_for_endpoints(home: Path, proc: asyncio.subprocess.Process, timeout: float) -> Endpoints:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        recorded = read_endpoints(home)
        if recorded is not None and recorded.pid == proc.pid:
            return recorded
        assert proc.returncode is None, "kubus up exited"
        await asyncio.sleep(0.1)
    raise AssertionError("kubus up wrote no endpoints.json")


async def _read_until(stream: asyncio.StreamReader, needle: str, timeout: float) -> str:
    seen = []
    async with asyncio.timeout(timeout):
        while True:
            line = (await stream.readline()).decode()
            if not line:
                raise AssertionError("kubus up closed its output:\n" + "".join(seen))
            seen.append(line)
            if needle in line:
                return "".join(seen)


@pytest.mark.slow
async def test_kubus_up_schedules_2000_pods_on_200_nodes(tmp_path: Path) -> None:
    """`kubus up --nodes 200` as a user runs it; 2,000 pods through `kubus apply`; every pod ends
    bound, running or succeeded; the invariants hold in Redis; Ctrl-C stops it cleanly."""
    home = tmp_path / "home"
    env = {"KUBUS_HOME": str(home)}
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kubus.cli", "up", "--nodes", "200", "--pod-duration", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={**os.environ, **env},
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        banner = await _read_until(proc.stdout, "ready in", timeout=180)
        assert "logs" in banner and "nats://" in banner
        recorded = await _wait_for_endpoints(home, proc, 10)
        workload = tmp_path / "workload.yaml"
        workload.write_text(to_yaml(mixed_workload(2000, seed=7, namespace="e2e")))
        applied = await run_kubus("apply", "-f", str(workload), "-q", env=env, timeout=300)
        assert applied.code == 0, applied.err
        assert applied.out.strip() == "2000 pods: 2000 created"

        # The embedded servers admit only kubus' users: not an anonymous client, not a wrong
        # password; the CLI above logged in as `client` from <home>/access on its own.
        with pytest.raises(redis.exceptions.AuthenticationError):
            await aioredis.Redis.from_url(recorded.redis_url).ping()
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nats.connect(recorded.nats_url, allow_reconnect=False, max_reconnect_attempts=0)
        access = read_credentials(home / ACCESS_DIR)
        assert access is not None and stat.S_IMODE((home / ACCESS_DIR / "client.yaml").stat().st_mode) == 0o600
        client = aioredis.Redis.from_url(access.url(recorded.redis_url))
        state = ClusterState(client)
        try:

            async def all_placed() -> None:
                phases = [p.phase for p in (await pods_by_name(state)).values()]
                assert len(phases) == 2000
                assert all(p in (PodPhase.BOUND, PodPhase.RUNNING, PodPhase.SUCCEEDED) for p in phases), {
                    str(p): phases.count(p) for p in set(phases)
                }

            await eventually(all_placed, timeout=600, interval=1.0)
            elapsed = time.monotonic() - started

            async def all_running() -> None:  # quiet: nothing moves while the invariants are read
                phases = [p.phase for p in (await pods_by_name(state)).values()]
                assert all(p is PodPhase.RUNNING for p in phases)

            await eventually(all_running, timeout=120, interval=0.5)
            assert await check_invariants_settled(state) == []
            listed = await run_kubus("get", "pods", "-n", "e2e", "-o", "json", env=env)
            assert len(json.loads(listed.out)["items"]) == 2000
            print(f"\nkubus up + 2000 pods on 200 nodes: {elapsed:.1f}s")
        finally:
            await client.aclose()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
        rest = (await asyncio.wait_for(proc.stdout.read(), 60)).decode()
        code = await asyncio.wait_for(proc.wait(), 60)
    assert code == 0, rest
    assert "kubus up: stopped" in rest
    assert read_endpoints(home) is None  # removed on exit


@pytest.mark.slow
async def test_kubus_up_demo_runs_and_summarizes(tmp_path: Path) -> None:
    result = await run_kubus(
        "up", "--demo", "--nodes", "4", "--demo-pods", "60", "--pod-duration", "1", "--data-dir", str(tmp_path / "d"),
        env={"KUBUS_HOME": str(tmp_path)}, timeout=300,
    )  # fmt: skip
    assert result.code == 0, result.out + result.err
    out = result.out
    assert "demo summary" in out and "SUBMIT->BOUND p50" in out
    assert "demo-impossible-16gpus" in out
    assert "0/4 nodes are available" in out  # the describe of an impossible pod, before stopping
    assert "kubus up: stopped" in out


@pytest.mark.slow
async def test_kubus_bench_small(tmp_path: Path) -> None:
    result = await run_kubus(
        "bench", "--nodes", "50", "--pods", "300", "-o", "json", env={"KUBUS_HOME": str(tmp_path)}, timeout=400
    )
    assert result.code == 0, result.out + result.err
    report = json.loads(result.out)
    assert report["bound"] == 300 and report["invariant_violations"] == []
    assert report["pods_per_second"] > 0 and report["latency"]["p50"] is not None
    # every process of the run, with its CPU and its peak memory (a Python service holds some MiB)
    processes = {"queue", "binder", "gpu-agent", "nats-server", "valkey-server", "bench (this process)"}
    assert processes <= set(report["cpu_seconds"]) and processes <= set(report["peak_memory_bytes"])
    assert all(2**20 < peak < 2**34 for peak in report["peak_memory_bytes"].values()), report["peak_memory_bytes"]


def test_node_template_file_is_the_built_in_one() -> None:
    from kubus.api.manifests import load_manifests, parse_manifests

    assert load_manifests(REPO / "deploy/examples/node-template.yaml") == parse_manifests(NODE_TEMPLATE)
