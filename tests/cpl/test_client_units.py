"""The terminal client's parts that need no server process: titles of captures, the
conflict buffer built from a real 409, colour choices, where the server and token come
from, parameter parsing, text charts, and the help of every command."""

from __future__ import annotations

import click
import pytest

from cpl import profile
from cpl.commands.capture import title_from
from cpl.commands.runs import coerce
from cpl.editor_loop import has_markers, with_markers
from cpl.main import cli
from cpl.run_views import bar, headline, sparkline
from cpl.terminal import colour_system, for_terminal, snippet
from tests.client_helpers import Terminal


@pytest.mark.parametrize(("text", "title", "body"), [
    ("try 1F1B #pipeline [[2024-W13]]", "try 1F1B 2024-W13", "try 1F1B #pipeline [[2024-W13]]"),
    ("see [[Pipeline notes|the notes]] again", "see the notes again",
     "see [[Pipeline notes|the notes]] again"),
    ("# Standup\n\n- shipped the runner", "Standup", "- shipped the runner"),
    ("# Only a heading", "Only a heading", "# Only a heading"),
    ("word " * 40, ("word " * 16).strip() + "…", "word " * 40),
    # what a coloured terminal pipes: no control character reaches the title
    ("\x1b[31mFAILED\x1b[0m\ttest_x \x07\nlog", "FAILED test_x",
     "\x1b[31mFAILED\x1b[0m\ttest_x \x07\nlog"),
])
def test_a_capture_without_a_title_gets_one(text, title, body):
    assert title_from(text) == (title, body)


def test_the_merge_buffer_marks_only_the_overlap(client):
    """A real 409 from the server, then the buffer `cpl` opens for the merge."""
    base = "## Notes\n\n- a line both change\n\n## Next\n\n- untouched"
    made = client.post("/api/v1/entries", json={"title": "Merge me", "body": base}).get_json()
    path = f"/api/v1/entries/{made['id']}"
    theirs = base.replace("- a line both change", "- theirs") + "\n- theirs appended"
    assert client.put(path, json={"body": theirs, "base_revision": 1}).status_code == 200
    mine = base.replace("- a line both change", "- mine")
    refused = client.put(path, json={"body": mine, "base_revision": 1})
    assert refused.status_code == 409
    error = refused.get_json()["error"]
    buffer = with_markers(error, error["current"], mine)
    assert buffer.splitlines()[2:7] == ["<<<<<<< theirs (revision 2, saved meanwhile)",
                                        "- theirs", "=======", "- mine", ">>>>>>> mine (your edit)"]
    assert buffer.endswith("- untouched\n- theirs appended")  # the clean change is kept
    assert has_markers(buffer)
    resolved = "\n".join(line for line in buffer.splitlines()
                         if not line.startswith(("<<<<<<<", "=======", ">>>>>>>")))
    assert not has_markers(resolved)
    assert not has_markers("A heading\n=======\n")  # a setext heading is not a marker


def test_without_hunks_the_whole_texts_are_marked():
    buffer = with_markers({}, {"revision": 4, "body": "theirs"}, "mine")
    assert buffer.splitlines() == ["<<<<<<< theirs (revision 4, saved meanwhile)", "theirs",
                                   "=======", "mine", ">>>>>>> mine (your edit)"]


@pytest.mark.parametrize(("choice", "env", "tty", "system"), [
    ("auto", {}, True, "standard"),
    ("auto", {}, False, None),
    ("auto", {"NO_COLOR": "1"}, True, None),
    ("auto", {"TERM": "dumb"}, True, None),
    ("auto", {"CLICOLOR_FORCE": "1"}, False, "standard"),
    ("never", {}, True, None),
    ("always", {"NO_COLOR": "1"}, False, "standard"),  # a flag beats the environment
])
def test_colour_comes_from_the_16_colour_palette_unless_turned_off(monkeypatch, choice, env,
                                                                    tty, system):
    for name in ("NO_COLOR", "CLICOLOR_FORCE", "TERM"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert colour_system(choice, "standard", tty) == system


def test_server_and_token_are_found_in_order(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    for name in ("COMMONPLACE_SERVER", "COMMONPLACE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert profile.resolve(None, None).server == "http://127.0.0.1:8000"
    profile.save_config({"server": "https://notes.tail1.ts.net",
                         "tokens": {"https://notes.tail1.ts.net": "cp_file"}})
    found = profile.resolve(None, None)
    assert (found.server, found.server_source, found.token, found.token_source) == (
        "https://notes.tail1.ts.net", "config", "cp_file", "config")
    monkeypatch.setenv("COMMONPLACE_SERVER", "notes.tail2.ts.net")
    monkeypatch.setenv("COMMONPLACE_TOKEN", "cp_env")
    found = profile.resolve(None, None)
    assert (found.server, found.token_source) == ("https://notes.tail2.ts.net", "env")
    found = profile.resolve("http://127.0.0.1:9", "cp_flag")
    assert (found.server, found.server_source, found.token) == ("http://127.0.0.1:9", "flag",
                                                                 "cp_flag")
    assert oct(profile.config_file().stat().st_mode & 0o777) == "0o600"


def test_parameters_are_typed_by_the_catalogue():
    assert coerce("micro_batches", {"type": "int"}, "8") == 8
    assert coerce("lr", {"type": "float"}, "0.5") == 0.5
    assert coerce("measure_overhead", {"type": "bool"}, "no") is False
    assert coerce("sizes", {"type": "str_list"}, "64, 128") == ["64", "128"]
    with pytest.raises(click.BadParameter):
        coerce("micro_batches", {"type": "int"}, "eight")


def test_text_charts():
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert bar(1, 2, 8) == "████" and bar(1, 16, 2) == "▏" and bar(1, 100, 2) == ""
    assert headline({"peak_flops": 1e9, "copy_bandwidth_Bps": 2e9, "duration_s": 3}) == {
        "peak FLOP/s": 1e9, "copy bandwidth": 2e9, "duration": 3}
    assert for_terminal("a\n```run\nid: 42\n```\nb") == "a\n> ▸ run 42: `cpl runs show 42`\nb"


def _commands(group: click.Group, prefix: str = ""):
    for name, command in group.commands.items():
        yield f"{prefix}{name}", command
        if isinstance(command, click.Group):
            yield from _commands(command, f"{prefix}{name} ")


def test_every_command_has_help_with_examples():
    for name, command in _commands(cli):
        with click.Context(command, info_name=name) as ctx:
            text = command.get_help(ctx)
        assert "Example" in text, name


def test_shell_completion(tmp_path):
    cpl = Terminal(tmp_path, "http://127.0.0.1:9")
    script = cpl("completion", "bash")
    assert script.rc == 0 and "_CPL_COMPLETE" in script.out
    offered = cpl(env={"_CPL_COMPLETE": "bash_complete", "COMP_WORDS": "cpl ru",
                       "COMP_CWORD": "1"})
    assert "plain,run" in offered.out and "plain,runs" in offered.out


def test_a_snippet_spanning_lines_prints_as_one():
    """Its line breaks would start lines outside the result's indent."""
    text = "def step():\n    <mark>loss</mark> = f(x)\n\n    return &lt;loss&gt;"
    assert snippet(text, False) == "def step(): loss = f(x) return <loss>"
    rich = snippet(text, True)
    assert rich.plain == "def step(): loss = f(x) return <loss>" and "\n" not in rich.plain
    assert [rich.plain[s.start:s.end] for s in rich.spans] == ["loss"]


def test_runs_show_keeps_strategy_names_whole_on_a_narrow_terminal():
    import io

    from rich.console import Console

    from cpl import run_card
    from cpl.terminal import Out

    out = Out(color="never")
    out.console = Console(file=io.StringIO(), width=60, color_system=None)
    result = {"strategies": [{"strategy": "dp", "label": "data parallel, no overlap",
                              "correctness": {"passed": True},
                              "step_time_s": {"median": 0.01, "p10": 0.009, "p90": 0.012}}]}
    run_card._strategies(out, result)
    assert "data parallel, no overlap" in out.console.file.getvalue()


def test_runs_show_fits_data_parallel_in_80_columns():
    """Labels too long to sit beside the numbers: each row is named by its id, the labels
    follow as a key, and every number stays whole on its row."""
    import io

    from rich.console import Console

    from cpl import run_card
    from cpl.terminal import Out

    out = Out(color="never")
    out.console = Console(file=io.StringIO(), width=80, color_system=None)
    labels = {"single": "single device (reference)",
              "dp_naive": "data parallel, naive (all-reduce after backward)"}
    result = {"strategies": [
        {"strategy": key, "label": label, "correctness": {"passed": True},
         "step_time_s": {"median": median, "p10": median * 0.9, "p90": median * 1.1},
         "prediction": {"step_time_s": 0.0365, "dominant": "op_overhead"},
         "ratios": {"step_time": 4.55}, "tokens_per_s": 1540.0, "mfu": {"value": 0.03}}
        for (key, label), median in zip(labels.items(), (0.0107, 0.166), strict=True)]}
    run_card._strategies(out, result)
    lines = out.console.file.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines)
    rows = {line.split()[0]: line.split() for line in lines[1:3]}
    assert rows["dp_naive"][:8] == ["dp_naive", "✓", "166", "ms", "36.5", "ms", "4.55×",
                                    "op_overhead"]
    assert rows["single"][2:4] == ["10.7", "ms"]
    for key, label in labels.items():
        assert any(line.split(None, 1) == [key, label] for line in lines)


@pytest.mark.parametrize("width", [80, 60, 50])
def test_runs_show_keeps_each_strategy_on_one_line_whatever_its_terms_are_called(width):
    """A cost-model term's name longer than its column, or a failed gate's reason, never
    folds through the numbers: the term is cut with an ellipsis to the room the numbers
    leave (on a phone's terminal tokens/s, MFU, then the predicted time go first: the
    ratio stays), the reason follows the table."""
    import io

    from rich.console import Console

    from cpl import run_card
    from cpl.terminal import Out

    out = Out(color="never")
    out.console = Console(file=io.StringIO(), width=width, color_system=None)
    terms = {"single": "op_overhead", "tp_megatron": "memory_traffic",
             "dp_overlap": "all_reduce_exposed_after_the_last_bucket"}
    result = {"strategies": [
        {"strategy": key, "label": f"{key}, in more words than fit beside the numbers",
         "correctness": {"passed": key != "dp_overlap",
                         "reason": "the loss is 3e-2 off the reference's"},
         "step_time_s": {"median": 0.166, "p10": 0.15, "p90": 0.18},
         "prediction": {"step_time_s": 0.0365, "dominant": term},
         "ratios": {"step_time": 4.55}, "tokens_per_s": 1540.0, "mfu": {"value": 0.03}}
        for key, term in terms.items()]}
    run_card._strategies(out, result)
    lines = out.console.file.getvalue().splitlines()
    assert all(len(line) <= width for line in lines)
    rows = {line.split()[0]: line.split() for line in lines[1:4]}
    assert list(rows) == list(terms)
    whole = width == 80  # with all its columns; narrower, its least needed went first
    assert lines[0].split() == ["strategy", "ok", "step", *(["pred."] if whole else []),
                                "meas/pred", "dominant", *(["tok/s", "MFU"] if whole else [])]
    for key, cells in rows.items():
        assert cells[1:4] == ["✗" if key == "dp_overlap" else "✓", "166", "ms"]
        assert cells[4:] == (["36.5", "ms", "4.55×", cells[7], "1.54", "k", "3%"] if whole
                             else ["4.55×", cells[5]])
    shown = {key: cells[7 if whole else 5] for key, cells in rows.items()}
    assert (shown["single"], shown["tp_megatron"]) == ("op_overhead", "memory_traffic")
    assert shown["dp_overlap"].startswith("all_reduce_") and shown["dp_overlap"].endswith("…")
    # under the table, the reason in words, wrapped in its own column where it must be
    assert "dp_overlap ✗ the loss is 3e-2 off the reference's" in " ".join(
        " ".join(lines[4:]).split())


@pytest.mark.parametrize("width", [80, 60])
def test_an_experiments_parameters_keep_their_names_whole(width):
    """`cpl experiments NAME`: a parameter's name, a default's or a choice's never folds
    ("dp_b / ucket"); a list wraps between its items, and the meanings read beside them,
    or on a phone's terminal under the table."""
    import io

    from rich.console import Console

    from cpl import run_views
    from cpl.terminal import Out

    out = Out(color="never")
    out.tty, out.console = True, Console(file=io.StringIO(), width=width, color_system=None)
    names = ["single", "dp_naive", "dp_bucket", "ddp"]
    params = {
        "bucket_cap_mb": {"type": "float", "default": 0.25, "min": 0.001, "max": 1024.0,
                          "description": "Bucket size for the bucketed strategy and DDP (MB)."},
        "precision": {"type": "str", "default": "fp32_sgd", "choices": ["fp32_sgd", "bf16_adamw"],
                      "description": "Training recipe: fp32 weights with SGD and momentum, "
                                     "or bf16 compute with fp32 master weights and AdamW."},
        "strategies": {"type": "str_list", "default": names, "choices": names,
                       "description": "Strategies to check and time."}}
    run_views.show_experiments(out, [{"name": "data_parallel", "title": "Data parallel",
                                      "description": "Every rank holds the model.",
                                      "params": params}], detailed=True)
    lines = out.console.file.getvalue().splitlines()
    assert all(len(line) <= width for line in lines)
    words = {w.strip(",|") for line in lines for w in line.split()}
    assert {"bucket_cap_mb", "0.001..1024.0", "fp32_sgd", "bf16_adamw", *names} <= words
    beside = next(line for line in lines if line.startswith("bucket_cap_mb"))
    assert ("Bucket size" in beside) == (width == 80)
    assert " ".join(" ".join(lines).split()).count(
        "Bucket size for the bucketed strategy and DDP (MB).") == 1
    out.console.file = io.StringIO()  # the whole catalogue: no meanings
    run_views.show_experiments(out, [{"name": "data_parallel", "params": params}], False)
    lines = out.console.file.getvalue().splitlines()
    assert lines[1].split() == ["param", "type", "default", "bounds"]
    assert all(len(line) <= width for line in lines) and "Bucket" not in "".join(lines)


@pytest.mark.parametrize("width", [80, 50])
def test_a_runs_series_stays_on_its_line(width):
    """`cpl runs show`'s sparklines: the last values that fit beside the name (cut with an
    ellipsis past 18 columns) and the latest value, never wrapped onto a second line."""
    import io

    from rich.console import Console

    from cpl import run_card
    from cpl.terminal import Out

    out = Out(color="never")
    out.console = Console(file=io.StringIO(), width=width, color_system=None)
    run = {"id": 7, "status": "SUCCEEDED", "params": {"steps": 100}, "url": "/runs/7"}
    run_card.show_card(out, run, "Data parallel", {
        "tokens_per_s": [[i, 1000.0 + i] for i in range(100)],
        "a_series_named_at_length": [[i, float(i % 7)] for i in range(100)]})
    lines = out.console.file.getvalue().splitlines()
    assert all(len(line) <= width for line in lines)
    series = [line for line in lines if "(last of 100)" in line]
    assert [line.split()[0] for line in series] == ["a_series_named_at…", "tokens_per_s"]
    assert all(line.endswith("(last of 100)") for line in series)


@pytest.mark.parametrize("width", [80, 200])
def test_runs_compare_names_strategies_by_id_where_their_labels_do_not_fit(width):
    """`cpl runs compare` at 80 columns: a row named by a long label wrapped, its metric
    landing under the numbers as if a row of its own. Where the labels do not fit, the
    rows are named by the strategies' ids, and the labels follow as a key."""
    import io

    from rich.console import Console

    from cpl import run_views
    from cpl.terminal import Out

    out = Out(color="never")
    out.tty, out.console = True, Console(file=io.StringIO(), width=width, color_system=None)
    label = "data parallel, naive (all-reduce after backward)"
    runs = [{"id": n, "experiment": "data_parallel", "status": "SUCCEEDED", "result": {
        "strategies": [{"strategy": "dp_naive", "label": label,
                        "step_time_s": {"median": median}, "tokens_per_s": 3480.0}]}}
        for n, median in ((1, 0.0735), (3, 0.0641))]
    run_views.show_comparison(out, {"runs": runs, "differing_params": []})
    lines = out.console.file.getvalue().splitlines()
    assert all(len(line) <= width for line in lines)
    name = "dp_naive" if width == 80 else label
    rows = {line.rsplit("  ", 2)[0].strip(): line for line in lines if " ms" in line}
    assert list(rows) == [f"{name} step time"]
    assert rows[f"{name} step time"].endswith("73.5 ms  64.1 ms (0.87×)")
    assert any(line.split(None, 1) == ["dp_naive", label] for line in lines) == (width == 80)
