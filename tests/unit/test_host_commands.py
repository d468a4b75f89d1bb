"""labkit.core.host_commands.run_host: the one way labkit runs a command on the controller host,
tried with real commands (true, false, sh, sleep, a program that does not exist): a failure is
the caller's labkit error on one line naming what, the command and the end of its stderr."""

import ast
import shutil
from pathlib import Path

import pytest

from labkit.core.host_commands import COMMAND_CHARS, command_line, output_tail, run_host
from labkit.errors import BackendError, BackendUnavailable, BenchmarkError, ConfigError

LABKIT = Path(__file__).resolve().parents[2] / "labkit"


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    # no traceback of the subprocess exception behind it
    assert exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__), repr(
        exc.__cause__ or exc.__context__
    )
    return text


def test_a_command_that_succeeds_gives_its_output_and_each_argument_stays_one():
    assert run_host(["/bin/true"], what="nothing", timeout=10).returncode == 0
    # a list, never a shell: the space and the $ reach printf as they are; a Path is str()-ed
    res = run_host(["printf", "%s|", "a b", "$HOME", Path("/x")], what="printing", timeout=10)
    assert res.stdout == "a b|$HOME|/x|"
    assert run_host(["cat"], what="echoing", timeout=10, input="fed in").stdout == "fed in"
    # without input, stdin is /dev/null: cat ends at once instead of waiting for a terminal
    assert run_host(["cat"], what="reading nothing", timeout=10).stdout == ""


def test_a_file_is_given_as_stdin_and_bytes_come_back_without_text(tmp_path):
    data = bytes(range(256))
    (tmp_path / "blob").write_bytes(data)
    with open(tmp_path / "blob", "rb") as fh:
        res = run_host(["cat"], what="copying", timeout=10, stdin=fh, text=False)
    assert res.stdout == data
    assert run_host(["pwd"], what="where", timeout=10, cwd=tmp_path).stdout.strip() == str(tmp_path)
    assert (
        run_host(
            ["sh", "-c", 'echo "$LABKIT_X"'],
            what="env",
            timeout=10,
            env={"LABKIT_X": "seen", "PATH": "/usr/bin:/bin"},
        ).stdout
        == "seen\n"
    )


def test_a_non_zero_exit_is_the_error_naming_what_the_command_and_its_stderr():
    with pytest.raises(BackendError) as err:
        run_host(["/bin/false"], what="trying false", timeout=10)
    text = one_line(err.value)
    assert text.startswith("trying false: /bin/false exited 1")
    with pytest.raises(ConfigError) as err:
        run_host(
            ["sh", "-c", "echo out; echo 'it broke' >&2; exit 3"],
            what="breaking it",
            timeout=10,
            error=ConfigError,
        )
    text = one_line(err.value)
    assert text.startswith(
        "breaking it: sh -c 'echo out; echo '\"'\"'it broke'\"'\"' >&2; exit 3' exited 3: "
    )
    assert text.endswith("it broke") and "out" not in text.split("exited 3")[1]  # stderr, not stdout
    # stdout when stderr is empty; a note when there is neither
    with pytest.raises(BackendError, match=r"exited 4: only on stdout$"):
        run_host(["sh", "-c", "echo only on stdout; exit 4"], what="x", timeout=10)
    with pytest.raises(BackendError, match=r"exited 5: \(no output\)$"):
        run_host(["sh", "-c", "exit 5"], what="x", timeout=10)
    # a command killed by a signal says which
    with pytest.raises(BackendError, match="was killed by SIGKILL"):
        run_host(["sh", "-c", "kill -9 $$"], what="x", timeout=10)


def test_without_check_a_non_zero_exit_is_returned():
    res = run_host(["sh", "-c", "echo why >&2; exit 3"], what="x", timeout=10, check=False)
    assert res.returncode == 3 and res.stderr == "why\n"


def test_a_long_stderr_is_cut_to_its_end_on_one_line():
    script = 'i=0; while [ $i -lt 3000 ]; do echo "line $i" >&2; i=$((i+1)); done; exit 2'
    with pytest.raises(BackendError) as err:
        run_host(["sh", "-c", script], what="talking", timeout=30)
    text = one_line(err.value)
    assert text.endswith("line 2998 | line 2999") and "line 10 |" not in text
    assert len(text) < 1200


def test_a_missing_program_is_the_error_saying_it_is_not_installed():
    with pytest.raises(BackendError) as err:
        run_host(["labkit-no-such-program", "--flag"], what="running the absent", timeout=10)
    text = one_line(err.value)
    assert text == (
        "running the absent: cannot run labkit-no-such-program --flag: "
        "labkit-no-such-program is not installed here (no such program)"
    )
    assert type(err.value) is BackendError
    with pytest.raises(
        BackendUnavailable, match=r"not installed here \(no such program\); apt-get install it$"
    ):
        run_host(
            ["labkit-no-such-program"],
            what="x",
            timeout=10,
            missing=BackendUnavailable,
            hint="apt-get install it",
        )
    with pytest.raises(BenchmarkError, match="cannot run /nonexistent/labkit-prog"):
        run_host(["/nonexistent/labkit-prog"], what="x", timeout=10, error=BenchmarkError)


def test_a_program_that_cannot_be_started_or_a_missing_directory_is_the_error(tmp_path):
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o600)  # no x bit: not even root may execute it
    with pytest.raises(BackendError) as err:
        run_host([script], what="starting it", timeout=10)
    assert one_line(err.value).startswith(f"starting it: cannot run {script}: Permission denied")
    with pytest.raises(BackendError) as err:
        run_host(["/bin/true"], what="moving", timeout=10, cwd=tmp_path / "absent")
    assert (
        one_line(err.value)
        == f"moving: cannot run /bin/true: its directory {tmp_path / 'absent'} does not exist"
    )


def test_a_command_past_its_timeout_is_killed_and_the_error_says_so():
    with pytest.raises(BackendError) as err:
        run_host(["sh", "-c", "echo started >&2; exec sleep 5"], what="waiting", timeout=0.2)
    text = one_line(err.value)
    assert text.startswith(
        "waiting: sh -c 'echo started >&2; exec sleep 5' did not finish within 0.2 s and was killed"
    )
    with pytest.raises(ConfigError, match=r"^x: sleep 5 did not finish within 0.2 s and was killed$"):
        run_host(["sleep", "5"], what="x", timeout=0.2, error=ConfigError)


@pytest.mark.parametrize(
    "argv, kw, exc, words",
    [
        ("ls -l", {}, TypeError, "never a shell string"),
        (b"ls", {}, TypeError, "never a shell string"),
        ([], {}, ValueError, "argv is empty"),
        (["true"], {"timeout": 0}, ValueError, "timeout must be"),
        (["true"], {"timeout": float("inf")}, ValueError, "timeout must be"),
        (["true"], {"timeout": True}, ValueError, "timeout must be"),
        (["true"], {"what": ""}, ValueError, "what must say"),
        (["cat"], {"input": "a", "stdin": 0}, ValueError, "not both"),
    ],
)
def test_a_wrong_call_is_refused_before_anything_runs(argv, kw, exc, words):
    with pytest.raises(exc, match=words):
        run_host(argv, **{"what": "x", "timeout": 5, **kw})


def test_run_host_needs_a_timeout_and_what():
    with pytest.raises(TypeError):
        run_host(["true"], what="x")
    with pytest.raises(TypeError):
        run_host(["true"], timeout=5)


def test_the_command_in_a_message_is_quoted_and_shortened_on_one_line():
    assert command_line(["echo", "a b", Path("/p")]) == "echo 'a b' /p"
    long = command_line(["x"] + ["y" * 50] * 100)
    assert "\n" not in long and "characters omitted" in long and len(long) < COMMAND_CHARS + 100
    assert output_tail("a\n\n  b  \nc\n") == "a | b | c" and output_tail(b"\xffz") == "\ufffdz"
    assert output_tail(None) == "" and output_tail("0123456789", chars=4) == "...6789"
    assert output_tail("first\n" + "x" * 400, chars=600) == "first | " + "x" * 400  # shorter: all of it


def test_the_network_face_gives_stdout_and_keeps_the_netem_words():
    """network_factors.host_output (ip, tc, iptables) returns stdout; its error keeps tc's stderr,
    which shape() reads to say that the kernel has no netem."""
    from labkit.core import network_factors as netmod

    assert netmod.host_output(["printf", "ok"]) == "ok"
    with pytest.raises(
        BackendError, match=r"^running sh: sh -c .* exited 2: Error: Specified qdisc kind is unknown\.$"
    ):
        netmod.host_output(["sh", "-c", "echo 'Error: Specified qdisc kind is unknown.' >&2; exit 2"])


def test_a_missing_slurm_tool_is_unavailable_with_how_to_get_it(tmp_path, monkeypatch):
    from labkit.backends import slurm_cli

    monkeypatch.setenv("PATH", str(tmp_path))  # no Slurm tool (nor anything else) on it
    with pytest.raises(BackendUnavailable) as err:
        slurm_cli.run(["squeue", "-h"], timeout=10, what="listing jobs")
    text = one_line(err.value)
    assert text.startswith("listing jobs: cannot run squeue -h: squeue is not installed here")
    assert text.endswith(slurm_cli.TOOLS_HINT)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_a_failed_compilation_is_a_benchmark_error_with_the_compilers_words(tmp_path):
    from labkit.core import cbuild

    (tmp_path / "broken.c").write_text("int main(void) { return undeclared_name; }\n")
    with pytest.raises(BenchmarkError) as err:
        cbuild.compile_c(tmp_path / "broken.c", tmp_path / "broken")
    text = one_line(err.value)
    assert text.startswith("compiling broken.c: ") and "undeclared_name" in text and "exited 1" in text


def test_no_module_of_labkit_runs_a_host_command_around_the_helper():
    """Every waited-for host command goes through run_host: subprocess.run, check_output,
    check_call, call, os.system and os.popen appear in labkit/core/host_commands.py only
    (Popen, for children that stream or outlive the call, is not counted)."""
    banned = {
        ("subprocess", "run"),
        ("subprocess", "check_output"),
        ("subprocess", "check_call"),
        ("subprocess", "call"),
        ("os", "system"),
        ("os", "popen"),
    }
    found = []
    for path in sorted(LABKIT.rglob("*.py")):
        if path == LABKIT / "core" / "host_commands.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and (node.value.id, node.attr) in banned
            ):
                found.append(f"{path.relative_to(LABKIT.parent)}:{node.lineno} {node.value.id}.{node.attr}")
            elif (
                isinstance(node, ast.ImportFrom)
                and node.module in ("subprocess", "os")
                and any((node.module, a.name) in banned for a in node.names)
            ):
                found.append(f"{path.relative_to(LABKIT.parent)}:{node.lineno} from {node.module} import")
    assert found == [], "host commands around labkit.core.host_commands.run_host:\n" + "\n".join(found)
