"""kubectl habits of the cluster commands: the -l syntax (kubus.api.label_selectors) read as
apimachinery's labels.Parse reads it and evaluated by the selector_matches the plugins use (bad
selectors are one clear line); GPU memory bars; colour only on a terminal."""

from __future__ import annotations

import io
import re

import pytest

from kubus.api.label_selectors import LabelSelectorSyntaxError, parse_label_selector
from kubus.api.pod_affinity import selector_matches
from kubus.cli.cluster import gpu_bar, write_table

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
