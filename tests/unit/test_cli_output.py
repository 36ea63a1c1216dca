"""kubectl habits of the cluster commands: the -l syntax (kubus.api.label_selectors) read as
apimachinery's labels.Parse reads it and evaluated by the selector_matches the plugins use (bad
selectors are one clear line); GPU memory bars; colour only on a terminal; v1 objects, kubectl's
JSONPath templates, -o name, --no-headers, --sort-by, collapsed events; TYPE/NAME and -f DIR; a
reader that goes away (`| head`)."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kubus.api.label_selectors import LabelSelectorSyntaxError, parse_label_selector
from kubus.api.pod_affinity import selector_matches
from kubus.cli.cluster import gpu_bar, write_table
from kubus.cli.jsonpath import JSONPathError, parse, relaxed
from kubus.cli.kube_objects import (
    collapse_events,
    event_object,
    kube_quantity,
    node_object,
    pod_object,
    rfc3339,
    same_pod,
)
from kubus.cli.output import Listing, format_age, output_of, print_listing
from kubus.cli.resources import manifest_paths, objects_in_files, targets
from kubus.core import codec
from kubus.core.errors import UsageError
from kubus.store.records import EventType, NodeRecord, PodEvent, PodPhase, PodRecord

WEB = {"app": "web", "tier": "front", "env": "prod"}
DB = {"app": "db", "env": "dev"}
BARE: dict[str, str] = {}


@pytest.mark.parametrize(
    ("text", "matched"),
    [
        ("", ["web", "db", "bare"]),
        ("app=web", ["web"]),
        ("app==web", ["web"]),
        ("app!=web", ["db", "bare"]),  # != also selects a pod without the label
        ("app in (web, db)", ["web", "db"]),
        ("env notin (prod)", ["db", "bare"]),
        ("tier", ["web"]),
        ("!tier", ["db", "bare"]),
        ("app in (web,db),env!=dev", ["web"]),
        (" app = web , tier ", ["web"]),
        ("app=", []),  # the empty value: no pod here has app=""
    ],
)
def test_selectors_match_as_kubectl_s(text: str, matched: list[str]) -> None:
    selector = parse_label_selector(text)
    pods = {"web": WEB, "db": DB, "bare": BARE}
    assert [name for name, labels in pods.items() if selector_matches(selector, labels)] == matched


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("app in (web", 'unbalanced "("'),
        ("app)", 'unbalanced ")"'),
        ("app in ()", "a set needs at least one value"),
        ("app=web=db", "is not a requirement"),
        ("app>1", 'key "app>1" is not valid'),
        ("bad key!=x", "is not a requirement"),
        ("-app=web", 'key "-app" is not valid'),
        ("app=" + "x" * 64, "is not valid"),
    ],
)
def test_bad_selectors_say_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(LabelSelectorSyntaxError, match=re.escape(problem)) as info:
        parse_label_selector(text)
    assert str(info.value).startswith(f'label selector "{text}"')


def test_gpu_bars_show_any_use_and_never_overflow() -> None:
    assert gpu_bar(0, 80, width=10) == "[----------]"
    assert gpu_bar(1, 80, width=10) == "[#---------]"  # any use shows
    assert gpu_bar(40, 80, width=10) == "[#####-----]"
    assert gpu_bar(80, 80, width=10) == "[##########]"
    assert gpu_bar(90, 80, width=10) == "[##########]"
    assert gpu_bar(0, 0, width=4) == "[----]"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal_without_no_color_and_columns_stay_aligned(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [["NAME", "PHASE", "NODE"], ["a", "Running", "n1"], ["bb", "Pending", "n22"], ["c", "Odd", "-"]]
    plain = io.StringIO()
    write_table(rows, plain, colour_column=1)
    assert "\x1b[" not in plain.getvalue()  # not a terminal
    monkeypatch.delenv("NO_COLOR", raising=False)
    tty = _Terminal()
    write_table(rows, tty, colour_column=1)
    lines = tty.getvalue().splitlines()
    assert lines[0] == "NAME   PHASE     NODE"  # the header is never coloured
    assert lines[1] == "a      \x1b[32mRunning\x1b[0m   n1"
    assert lines[2] == "bb     \x1b[33mPending\x1b[0m   n22"
    assert lines[3] == "c      Odd       -"  # an unknown state keeps its text
    assert [re.sub(r"\x1b\[[0-9;]*m", "", ln) for ln in lines] == plain.getvalue().splitlines()
    monkeypatch.setenv("NO_COLOR", "1")
    no_color = _Terminal()
    write_table(rows, no_color, colour_column=1)
    assert no_color.getvalue() == plain.getvalue()


# ---- kube-shaped output: v1 objects, jsonpath, -o name, --no-headers, --sort-by -------------------

LIST = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {
            "metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "x"}},
            "spec": {"nodeName": "n1"},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "False"}]
            },
        },
        {"metadata": {"name": "b"}, "spec": {}},
    ],
}


@pytest.mark.parametrize(
    ("template", "printed"),
    [
        ("{.items[*].metadata.name}", "a b"),
        ('{range .items[*]}{.metadata.name}{"\\t"}{.spec.nodeName}{"\\n"}{end}', "a\tn1\nb\t\n"),
        ("{.items[0].metadata.name}", "a"),
        ("{.items[-1:].metadata.name}", "b"),
        ("{.items[0,1].metadata.name}", "a b"),
        ('{.items[0].status.conditions[?(@.type=="Ready")].status}', "True"),
        ('{.items[0].status.conditions[?(@.status!="True")].type}', "PodScheduled"),
        ("{.items[?(@.spec.nodeName)].metadata.name}", "a"),
        ("{.items[0].metadata.labels.app\\.kubernetes\\.io/name}", "x"),
        ("{.items[0].metadata.labels['app.kubernetes.io/name']}", "x"),
        ("{.items[0].metadata.labels}", '{"app.kubernetes.io/name":"x"}'),  # maps print as JSON
        ("{..name}", "a b"),
        ("{$.kind} has {.items[1].metadata.name}", "List has b"),
        ("{.items[*].metadata.missing}", ""),  # a missing key prints nothing, as kubectl's get
    ],
)
def test_jsonpath_templates_print_as_kubectl_s(template: str, printed: str) -> None:
    assert parse(template).render(LIST) == printed


@pytest.mark.parametrize("template", ["{.items[*", "{range .items[*]}{.x}", "{end}", "{.items[x]}", "{}"])
def test_bad_jsonpath_templates_are_one_line(template: str) -> None:
    with pytest.raises(JSONPathError, match="jsonpath"):
        parse(template)


def test_relaxed_expressions_for_sort_by_and_custom_columns() -> None:
    obj = {"metadata": {"name": "z"}}
    assert relaxed(".metadata.name").values(obj) == relaxed("metadata.name").values(obj) == ["z"]
    assert relaxed("{.metadata.name}").values(obj) == ["z"]


def _record(**fields: object) -> PodRecord:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "default", "uid": "u1", "labels": {"team": "ml"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    base: dict[str, object] = {
        "uid": "u1",
        "namespace": "default",
        "name": "train",
        "profile": "default-scheduler",
        "manifest": codec.dumps(manifest),
        "created_at": 1_700_000_000.0,
        "updated_at": 1_700_000_005.0,
    }
    return PodRecord(**{**base, **fields})  # type: ignore[arg-type]


def test_a_pod_is_its_manifest_with_kube_s_status_and_rfc3339_times() -> None:
    running = _record(phase=PodPhase.RUNNING, node="n1", gpu_devices=(0, 1), attempts=1)
    events = [
        PodEvent(1_700_000_001.0, EventType.NORMAL, "Scheduled"),
        PodEvent(1_700_000_002.0, EventType.NORMAL, "Started"),
    ]
    obj = pod_object(running, events=events)
    assert obj["metadata"]["creationTimestamp"] == "2023-11-14T22:13:20Z"
    assert obj["metadata"]["annotations"] == {"kubus.io/gpu-devices": "0,1"}
    assert obj["spec"]["nodeName"] == "n1" and obj["spec"]["containers"][0]["image"] == "i"
    status = obj["status"]
    assert status["phase"] == "Running" and status["startTime"] == "2023-11-14T22:13:22Z"
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["PodScheduled"]["status"] == "True"
    assert conditions["PodScheduled"]["lastTransitionTime"] == "2023-11-14T22:13:21Z"
    assert conditions["kubus.io/Phase"]["reason"] == "Running"
    pending = pod_object(_record(reason="Unschedulable", message="0/3 nodes are available"))
    scheduled = next(c for c in pending["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (scheduled["status"], scheduled["reason"], scheduled["message"]) == (
        "False",
        "Unschedulable",
        "0/3 nodes are available",
    )
    assert "nodeName" not in pending["spec"] and pending["status"]["phase"] == "Pending"
    reserved = pod_object(_record(phase=PodPhase.RESERVED, node="n2"))
    assert reserved["status"]["nominatedNodeName"] == "n2" and "nodeName" not in reserved["spec"]


def test_what_get_adds_is_the_server_s_so_applying_it_back_is_unchanged() -> None:
    record = _record(phase=PodPhase.RUNNING, node="n1", gpu_devices=(0, 1))
    printed = codec.dumps(pod_object(record))
    assert same_pod(record.manifest, printed, node="n1", devices=(0, 1))
    assert not same_pod(record.manifest, printed, node="n2", devices=(0, 1))  # another node is a change
    changed = pod_object(record)
    changed["spec"]["containers"][0]["image"] = "other"
    assert not same_pod(record.manifest, codec.dumps(changed), node="n1", devices=(0, 1))


def test_identical_events_collapse_with_their_count_and_span() -> None:
    failed = [PodEvent(100.0 + i, EventType.WARNING, "FailedScheduling", "0/3 nodes", "cycle") for i in range(4)]
    events = [*failed, PodEvent(110.0, EventType.NORMAL, "Scheduled", "assigned", "binder")]
    collapsed = collapse_events(events)
    assert [(c.reason, c.count, c.first, c.last) for c in collapsed] == [
        ("FailedScheduling", 4, 100.0, 103.0),
        ("Scheduled", 1, 110.0, 110.0),
    ]
    obj = event_object(collapsed[0], _record())
    assert obj["kind"] == "Event" and obj["count"] == 4 and obj["involvedObject"]["name"] == "train"
    assert obj["firstTimestamp"] == rfc3339(100.0) and obj["lastTimestamp"] == rfc3339(103.0)


def test_kube_quantities() -> None:
    assert [kube_quantity("cpu", 8000), kube_quantity("cpu", 500), kube_quantity("memory", 32 * 2**30)] == [
        "8",
        "500m",
        "32Gi",
    ]
    assert kube_quantity("memory", 1000) == "1000" and kube_quantity("nvidia.com/gpu", 8) == "8"


H, D = 3600, 86400


@pytest.mark.parametrize(
    ("seconds", "age"),
    [
        (-1.5, "0s"),  # a clock a little behind
        (-2, "<invalid>"),
        (0, "0s"),
        (5.9, "5s"),
        (70, "70s"),
        (119, "119s"),
        (120, "2m"),
        (190, "3m10s"),
        (70 * 60, "70m"),
        (179 * 60 + 59, "179m"),
        (3 * H, "3h"),
        (3 * H + 30 * 60, "3h30m"),
        (8 * H + 30 * 60, "8h"),
        (47 * H, "47h"),
        (49 * H, "2d1h"),
        (4 * D, "4d"),
        (8 * D + 2 * H, "8d"),
        (367 * D, "367d"),
        (365 * 2 * D + 25 * H, "2y1d"),
        (365 * 8 * D + 2 * H, "8y"),
    ],
)
def test_ages_print_as_kubectl_s(seconds: float, age: str) -> None:
    """apimachinery's duration.HumanDuration, which kubectl get's AGE column prints (cases from
    its duration_test.go and its boundaries)."""
    assert format_age(seconds) == age


def test_a_node_is_dated_by_its_own_creation_timestamp_else_its_first_registration() -> None:
    simulated = NodeRecord("sim", registered=1_714_564_800.0)
    assert simulated.created_at == 1_714_564_800.0
    assert node_object(simulated)["metadata"]["creationTimestamp"] == "2024-05-01T12:00:00Z"
    real = NodeRecord("real", creation_timestamp=1_700_000_000.0, registered=1_714_564_800.0)
    assert node_object(real)["metadata"]["creationTimestamp"] == rfc3339(1_700_000_000.0)
    assert "creationTimestamp" not in node_object(NodeRecord("never-stored"))["metadata"]


def _listing(single: bool = False) -> Listing:
    rows = [
        ({"kind": "Pod", "metadata": {"name": "b", "creationTimestamp": "2024-01-02T00:00:00Z"}}, ["b", "Running"]),
        ({"kind": "Pod", "metadata": {"name": "a", "creationTimestamp": "2024-01-03T00:00:00Z"}}, ["a", "Pending"]),
    ]
    return Listing("pod", ["NAME", "PHASE"], rows[:1] if single else rows, single=single)


def test_output_forms() -> None:
    def printed(output: str, **flags: object) -> str:
        out = io.StringIO()
        print_listing(_listing(), out, output_of(output, **flags))  # type: ignore[arg-type]
        return out.getvalue()

    assert printed("name") == "pod/b\npod/a\n"
    assert printed("table", no_headers=True) == "b   Running\na   Pending\n"
    assert [line.split() for line in printed("table", sort_by=".metadata.name").splitlines()] == [
        ["NAME", "PHASE"],
        ["a", "Pending"],
        ["b", "Running"],
    ]
    assert printed("name", sort_by="{.metadata.creationTimestamp}") == "pod/b\npod/a\n"
    assert printed("custom-columns=N:.metadata.name,X:.spec.nodeName") == "N   X\nb   <none>\na   <none>\n"
    as_list = codec.loads(printed("json"))
    assert as_list["kind"] == "List" and [i["metadata"]["name"] for i in as_list["items"]] == ["b", "a"]
    assert printed("jsonpath={.items[*].metadata.name}") == "b a"
    one = io.StringIO()
    print_listing(_listing(single=True), one, output_of("json"))
    assert codec.loads(one.getvalue())["metadata"]["name"] == "b"  # one name asked: the object itself
    with pytest.raises(UsageError, match="custom-columns"):
        output_of("custom-columns=NAME")
    with pytest.raises(UsageError, match="jsonpath"):
        output_of("jsonpath={.items[")


def test_kubectl_ways_of_naming_objects(tmp_path: Path) -> None:
    assert targets("pods", ["a", "b"]) == [("pods", ["a", "b"])]
    assert targets("Pod", []) == [("pods", [])]
    assert targets("pod/a", ["node/n", "po/b"]) == [("pods", ["a", "b"]), ("nodes", ["n"])]
    with pytest.raises(UsageError, match="resource/name form"):
        targets("pod", ["pod/a"])
    with pytest.raises(UsageError, match="single resource and name"):
        targets("pod/a", ["b"])
    (tmp_path / "sub").mkdir()
    (tmp_path / "b.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: b, namespace: shop}\n")
    (tmp_path / "a.json").write_text('{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}')
    (tmp_path / "notes.txt").write_text("not a manifest")
    (tmp_path / "sub" / "c.yml").write_text("kind: PodList\nitems: [{metadata: {name: c}}]\n")
    flat = manifest_paths([str(tmp_path)])
    assert flat == [str(tmp_path / "a.json"), str(tmp_path / "b.yaml")]
    every = manifest_paths([str(tmp_path)], recursive=True)
    assert every == [*flat, str(tmp_path / "sub" / "c.yml")]
    assert objects_in_files(every) == [("Namespace", "", "shop"), ("Pod", "shop", "b"), ("Pod", "default", "c")]
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no manifest"):
        manifest_paths([str(tmp_path / "empty")])


def test_a_reader_that_goes_away_is_no_error() -> None:
    """`kubus get pods | head -1`: no 'Broken pipe' line, the status of a process SIGPIPE ends."""
    code = (
        "import sys, kubus.cli.main\n"
        "m = sys.modules['kubus.cli.main']  # kubus.cli.main, the attribute, is the function\n"
        "def spew(parser, args):\n"
        "    for _ in range(20000):\n"
        "        sys.stdout.write('x' * 100 + '\\n')\n"
        "    return 0\n"
        "m._dispatch = spew\n"
        "sys.exit(m.main(['completion', 'bash']))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"xxx")
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=30) == 141 and err == "", err
