"""`kubus completion bash|zsh`: the script is made from the parser, and bash completes with it."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from kubus.cli.completion import completion_script
from kubus.cli.main import build_parser, main


def complete(*words: str) -> list[str]:
    """What bash offers after `kubus WORDS` (the last word being completed), with the script loaded."""
    script = completion_script(build_parser(), "bash")
    line = " ".join(["kubus", *words])
    program = (
        f"{script}\n"
        f"COMP_WORDS=(kubus {' '.join(repr(w) for w in words)}); COMP_CWORD={len(words)}; COMP_LINE={line!r}\n"
        '_kubus_complete; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True, timeout=30)
    return sorted(done.stdout.split())


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_commands_resources_options_and_their_choices() -> None:
    assert complete("ge") == ["get"]
    assert "completion" in complete("")
    assert complete("get", "ev") == ["ev", "event", "events"]
    assert complete("get", "pods", "-o", "") == [
        "custom-columns=",
        "json",
        "jsonpath-file=",
        "jsonpath=",
        "name",
        "table",
        "wide",
        "yaml",
    ]
    assert complete("describe", "no") == ["no", "node", "nodes"]
    assert complete("top", "nodes", "--g") == ["--gpus"]
    assert complete("completion", "") == ["bash", "zsh"]


def test_zsh_loads_it_through_bashcompinit_and_bad_shells_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert completion_script(build_parser(), "zsh").splitlines()[1] == "autoload -U +X bashcompinit && bashcompinit"
    with pytest.raises(ValueError, match="fish"):
        completion_script(build_parser(), "fish")
    with pytest.raises(SystemExit) as info:
        main(["completion", "fish"])
    assert info.value.code == 2 and "invalid choice" in capsys.readouterr().err
    assert main(["completion", "bash"]) == 0
    assert "complete -o default -F _kubus_complete kubus" in capsys.readouterr().out
