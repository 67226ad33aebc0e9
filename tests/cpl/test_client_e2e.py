"""The terminal client `cpl`, run as a real subprocess against the real processes: gunicorn
(`commonplace web`), the scheduler and a runner (the `Journal` of test_journal_e2e.py, with
its short lease settings), runs on CPU with gloo. One server for the module; each test has
its own config and state folders. Every wait has a deadline; every process is ended by PID.
"""

from __future__ import annotations

import json
import re
import signal
import stat
import sys
import urllib.request

import pytest

from tests.client_helpers import Terminal, editor, lines_of, wait_line
from tests.helpers import free_port, stop_process
from tests.journal_harness import Journal, api

# An $EDITOR during which the other side (a browser) saves a change to the same line.
CLASH = """
import json, os, re, urllib.request
entry_id = re.search(r"cpl-entry-(\\d+)-", path)[1]
url = os.environ["COMMONPLACE_SERVER"] + "/api/v1/entries/" + entry_id
now = json.load(urllib.request.urlopen(url))
theirs = now["body"].replace("- from the terminal", "- theirs: from the web")
urllib.request.urlopen(urllib.request.Request(url, method="PUT", headers={
    "Content-Type": "application/json"}, data=json.dumps(
    {"body": theirs, "base_revision": now["revision"]}).encode()))
text = text.replace("- from the terminal", "- mine: from the terminal")
"""
SLOW_GEMM = {"sizes": ["64", "128", "256", "512", "1024"], "iters": 30}  # some seconds on CPU


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    journal = Journal(tmp_path_factory.mktemp("cpl-server"))
    runner = None
    try:
        journal.start()
        runner = journal.runner("cpl-runner", plugin="broken_dp.py")  # data_parallel fails
        yield journal
    finally:
        if runner is not None:
            stop_process(runner)  # first: the web need not wait out its long poll
        journal.stop()


@pytest.fixture
def cpl(server, tmp_path) -> Terminal:
    return Terminal(tmp_path / "home", server.base)


def entry_at(server, url: str) -> dict:
    entry_id = re.search(r"/entries/(\d+)", url)[1]
    return api(server.base, f"/api/v1/entries/{entry_id}")[1]


def titled(server, title: str) -> list[dict]:
    entries = api(server.base, "/api/v1/entries?limit=500")[1]["entries"]
    return [e for e in entries if e["title"] == title]


def test_capture_from_argv_a_pipe_and_a_file(cpl, server, tmp_path):
    said = cpl("note", "argv capture: try 1F1B #pipeline [[2024-W13]]")
    assert said.rc == 0, said.err
    entry = entry_at(server, said.out)
    assert entry["title"] == "argv capture: try 1F1B 2024-W13"
    assert entry["body"] == "argv capture: try 1F1B #pipeline [[2024-W13]]"
    tagged = api(server.base, "/api/v1/entries?tag=pipeline")[1]["entries"]
    assert entry["id"] in [e["id"] for e in tagged]  # a #tag in the text is a tag

    piped = cpl("note", "--tag", "reading", "--draft", input="piped capture\nsecond line\n")
    assert piped.rc == 0, piped.err
    entry = entry_at(server, piped.out)
    assert (entry["title"], entry["body"], entry["status"]) == (
        "piped capture", "piped capture\nsecond line", "draft")
    assert entry["tags"] == ["reading"]

    source = tmp_path / "idea.md"
    source.write_text("# A file's own title\n\nbody from a file #gpu\n")
    with source.open() as handle:
        filed = cpl("note", "--date", "2024-03-27", stdin=handle)
    assert filed.rc == 0, filed.err
    entry = entry_at(server, filed.out)
    assert (entry["title"], entry["body"], entry["date"]) == (
        "A file's own title", "body from a file #gpu", "2024-03-27")

    as_json = cpl("note", "--json", "a capture as JSON").json()
    assert {"id", "title", "url", "body", "revision", "tags"} <= set(as_json)
    assert as_json["url"].startswith(server.base)


def test_a_capture_that_is_not_utf8_is_refused_and_kept_as_it_came(cpl, server, tmp_path):
    source = tmp_path / "latin1.md"
    source.write_bytes("caf\u00e9 in Latin-1 #reading\n".encode("latin-1"))
    before = api(server.base, "/api/v1/entries?limit=500")[1]["entries"]
    with source.open("rb") as handle:
        piped = cpl("note", stdin=handle)
    assert piped.rc == 2, piped.err
    assert "not UTF-8 (byte 0xe9 at offset 3)" in piped.err
    kept = re.search(r"kept as it came in (\S+):", piped.err)[1]
    assert open(kept, "rb").read() == source.read_bytes()
    assert api(server.base, "/api/v1/entries?limit=500")[1]["entries"] == before


def test_the_offline_queue_sends_each_capture_once(cpl, server):
    server.web.send_signal(signal.SIGQUIT)  # the server goes away (gunicorn's quick stop)
    server.web.wait(timeout=30)
    first = cpl("note", "offline capture one")
    second = cpl("note", "offline capture two")
    assert (first.rc, second.rc) == (0, 0), first.err + second.err
    assert "queued offline" in first.err
    queued = cpl("queue", "--json").json()["queued"]
    assert [q["title"] for q in queued] == ["offline capture one", "offline capture two"]
    server.start_web()  # ... and comes back

    # The first capture reached the server once before, but its answer was lost on the way:
    # the same request with the same key, as the client had sent it.
    capture = json.loads(next((cpl.state / "outbox").glob(f"*{queued[0]['key']}.json"))
                         .read_text())
    request = urllib.request.Request(
        server.base + "/api/v1/entries", data=json.dumps(capture["fields"]).encode(),
        method="POST", headers={"Content-Type": "application/json",
                                "Idempotency-Key": queued[0]["key"]})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201

    online = cpl("note", "online capture")  # sends the queue first, then itself
    assert online.rc == 0, online.err
    assert "sent 2 queued note(s) (1 had arrived already: not made twice)" in online.err
    assert cpl("queue", "--json").json() == {"queued": []}
    again = cpl("queue", "flush")
    assert again.rc == 0 and "nothing queued" in again.err
    for title in ("offline capture one", "offline capture two", "online capture"):
        assert len(titled(server, title)) == 1, title


def test_week_edit_no_change_change_and_a_conflict(cpl, server, tmp_path):
    letter = lambda: api(server.base, f"/api/v1/weeks/{week}")[1]["letter"]  # noqa: E731
    week = cpl("week", "--json").json()["week"]
    before = letter()

    unchanged = cpl("week", "--edit", env={"EDITOR": editor(tmp_path, "same", "")})
    assert unchanged.rc == 0, unchanged.err
    assert "no changes: nothing sent" in unchanged.err
    assert letter()["revision"] == before["revision"]

    add = editor(tmp_path, "add", "text = text.replace('## Notes', "
                                  "'## Notes\\n\\n- from the terminal', 1)")
    changed = cpl("week", "--edit", env={"EDITOR": add})
    assert changed.rc == 0, changed.err
    assert "saved entry" in changed.err
    assert "- from the terminal" in letter()["body"]

    # The editor's file ends in a newline: a line appended at its end is a line of its own.
    last = letter()["body"].rstrip("\n").splitlines()[-1]
    append = editor(tmp_path, "append", "text += '- appended at the end\\n'")
    assert cpl("week", "--edit", env={"EDITOR": append}).rc == 0
    assert letter()["body"].rstrip("\n").splitlines()[-2:] == [last, "- appended at the end"]

    # While the editor is open the other side (a browser) changes the same line.
    clash = editor(tmp_path, "clash", CLASH)
    conflict = cpl("week", "--edit", env={"EDITOR": clash})
    assert conflict.rc == 3, conflict.err
    assert "both changed the same lines" in conflict.err
    assert "+- theirs: from the web" in conflict.err  # both sides, as diffs
    assert "+- mine: from the terminal" in conflict.err
    drafts = list((cpl.state / "drafts").glob(f"entry-{before['id']}-base-*.md"))
    assert len(drafts) == 1 and stat.S_IMODE(drafts[0].stat().st_mode) == 0o600
    assert "- mine: from the terminal" in drafts[0].read_text()  # nothing typed is lost
    assert "- theirs: from the web" in letter()["body"]
    listed = cpl("drafts", "--json").json()["drafts"]
    assert listed[0]["entry_id"] == before["id"]

    # Merge: the editor opens both sides marked; a text still holding markers is never sent.
    unresolved = cpl("week", "--resume", "--on-conflict", "merge",
                     env={"EDITOR": editor(tmp_path, "leave", "")})
    assert unresolved.rc == 3 and "conflict markers" in unresolved.err
    assert "<<<<<<<" not in letter()["body"]
    (marked,) = (cpl.state / "drafts").glob("*.md")
    assert "<<<<<<< theirs" in marked.read_text()

    resolve = editor(tmp_path, "resolve", "text = '\\n'.join(l for l in text.split('\\n') "
                                          "if not l.startswith(('<<<<<<<', '=======', '>>>>>>>')))")
    merged = cpl("week", "--resume", "--on-conflict", "merge", env={"EDITOR": resolve})
    assert merged.rc == 0, merged.err
    body = letter()["body"]
    assert "- theirs: from the web" in body and "- mine: from the terminal" in body
    assert "<<<<<<<" not in body
    assert not list((cpl.state / "drafts").glob("*.md"))


def test_an_edit_saved_in_another_encoding_is_kept_and_not_sent(cpl, server, tmp_path):
    made = cpl("note", "--title", "Encoded", "--json", input="plain text\n").json()
    latin1 = tmp_path / "latin1_editor.py"
    latin1.write_text("import sys\nopen(sys.argv[1], 'wb').write('caf\\u00e9\\n'"
                      ".encode('latin-1'))\n")
    edited = cpl("edit", str(made["id"]), env={"EDITOR": f"{sys.executable} {latin1}"})
    assert edited.rc == 1 and "not UTF-8 (byte 0xe9 at offset 3)" in edited.err, edited.err
    kept = re.search(r"kept as it was in (\S+)", edited.err)[1]
    assert open(kept, "rb").read() == "caf\u00e9\n".encode("latin-1")  # nothing typed is lost
    assert entry_at(server, made["url"])["body"] == "plain text"


def test_overwrite_after_a_conflict_keeps_theirs_in_the_history(cpl, server, tmp_path):
    made = cpl("note", "--title", "Overwrite me", "--json", input="- from the terminal\n")
    entry_id = made.json()["id"]
    saved = cpl("edit", str(entry_id), "--on-conflict", "overwrite",
                env={"EDITOR": editor(tmp_path, "clash", CLASH)})
    assert saved.rc == 0, saved.err
    assert api(server.base, f"/api/v1/entries/{entry_id}")[1]["body"] == \
        "- mine: from the terminal"
    history = api(server.base, f"/api/v1/entries/{entry_id}/revisions")[1]["revisions"]
    assert len(history) == 3  # made, theirs, mine: theirs can be restored
    assert not list((cpl.state / "drafts").glob("*.md"))


def test_search_json(cpl, server):
    assert cpl("note", "zeppelin bubbles in the pipeline schedule #gpu").rc == 0
    found = cpl("search", "zeppelin tag:gpu", "--json", "-n", "5").json()
    assert found["query"] == "zeppelin tag:gpu" and found["has_more"] is False
    hit = found["results"][0]
    assert hit["title"] == "zeppelin bubbles in the pipeline schedule"
    assert "zeppelin" in hit["snippet"] and "<mark>" not in hit["snippet"]
    assert {"id", "date", "week", "tags", "url", "score", "snippet"} <= set(hit)
    plain = cpl("search", "zeppelin")
    assert plain.out.split("\t")[0] == str(hit["id"])


def test_a_watched_run_sets_the_exit_status(cpl, server):
    good = cpl("run", "gemm_roofline", "-p", "sizes=64", "-p", "iters=1", "--watch",
               "--exit-status", "--interval", "0.5")
    assert good.rc == 0, good.out + good.err
    run_id = int(good.out.splitlines()[0])
    assert good.out.splitlines()[-1].startswith(f"run {run_id} SUCCEEDED")

    # the broken strategy alone (broken_dp.py): PyTorch's DDP beside it would cost each
    # rank ~2 s of CPU importing torch._dynamo, and it would pass
    bad = cpl("run", "data_parallel", "-p", "steps=1", "-p", "warmup=0", "-p",
              "strategies=dp_naive", "--watch", "--exit-status", "--interval", "0.5",
              timeout=180)
    assert bad.rc == 7, bad.out + bad.err
    bad_id = int(bad.out.splitlines()[0])
    assert f"run {bad_id} FAILED" in bad.out
    assert cpl("runs", "watch", str(bad_id)).rc == 0  # without --exit-status

    listed = cpl("runs", "--json", "-n", "5").json()["runs"]
    assert {r["id"]: r["status"] for r in listed}[run_id] == "SUCCEEDED"
    compared = cpl("runs", "compare", str(run_id), str(bad_id), "--json").json()
    assert "experiment" not in compared["differing_params"]
    assert [r["id"] for r in compared["runs"]] == [run_id, bad_id]
    card = cpl("runs", "show", str(run_id))
    assert "Compute roofline" in card.out and "FLOP/s" in card.out
    assert "progress step=" in cpl("runs", "logs", str(run_id), "-f").out  # ended: returns
    again = cpl("runs", "rerun", str(run_id), "--watch", "--exit-status", "--json",
                "--interval", "0.5")
    assert again.rc == 0, again.err
    rerun = again.json()
    assert (rerun["status"], rerun["parent_id"]) == ("SUCCEEDED", run_id)


def test_ctrl_c_detaches_and_the_run_goes_on(cpl, server):
    run_id = server.create("gemm_roofline", **SLOW_GEMM)
    proc = cpl.popen("runs", "watch", str(run_id), "--interval", "0.3")
    try:
        wait_line(lines_of(proc), f"run {run_id} RUNNING", 60)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 130
        message = proc.stderr.read()
    finally:
        stop_process(proc)
    assert "detached" in message and f"cpl runs watch {run_id}" in message
    final = server.wait_status(run_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, 120)
    assert final["status"] == "SUCCEEDED" and final["cancel_requested"] is False


def test_a_progress_bar_on_a_terminal_and_plain_lines_in_a_pipe(cpl, server):
    run_id = server.create("gemm_roofline", **SLOW_GEMM)
    piped = cpl.popen("runs", "watch", str(run_id), "--interval", "0.3")
    try:
        shown = cpl.on_pty("runs", "watch", str(run_id), "--interval", "0.3", timeout=150)
        out, _ = piped.communicate(timeout=60)
    finally:
        stop_process(piped)
    assert shown.rc == 0, shown.out
    assert "━" in shown.out and re.search(r"step \d+/", shown.out)  # the bar and its steps
    assert "\x1b[" in shown.out and f"run {run_id} SUCCEEDED" in shown.out
    assert piped.returncode == 0 and "\x1b" not in out
    lines = out.splitlines()
    assert lines and all(line.startswith(f"run {run_id} ") for line in lines)
    assert lines[-1].startswith(f"run {run_id} SUCCEEDED in ")
    assert any("loading torch" in line for line in lines)  # said before any step


def test_no_color_output_has_no_escape_codes(cpl, server):
    run_id = server.create("gemm_roofline", sizes=["64"], iters=1)
    assert cpl("note", "colourless note about zebras #gpu").rc == 0
    assert "\x1b[" in cpl.on_pty("runs").out  # a terminal gets colour by default
    for args in (["runs"], ["week"], ["search", "zebras"], ["runs", "show", str(run_id)],
                 ["experiments"], ["show", "1"]):
        shown = cpl.on_pty(*args, env={"NO_COLOR": "1"})
        assert shown.rc == 0, (args, shown.out)
        assert "\x1b" not in shown.out, args
    assert "\x1b" not in cpl.on_pty("--color", "never", "week").out
    assert "\x1b" not in cpl("--color", "auto", "week").out  # a pipe: plain


def test_login_tokens_and_the_config_file(cpl, server):
    login = cpl("login", "--server", server.base)
    assert login.rc == 0, login.err
    assert "signed in as owner@localhost, owner, via dev" in login.err
    assert stat.S_IMODE(cpl.config_file.stat().st_mode) == 0o600
    assert server.base in cpl.config_file.read_text()

    token = server.cli("token", "create", "cpl-test", "--role", "owner").strip()
    no_keyring = cpl("login", "--with-token", input=token + "\n")
    assert no_keyring.rc == 5 and "--insecure-storage" in no_keyring.err
    stored = cpl("login", "--with-token", "--insecure-storage", input=token + "\n")
    assert stored.rc == 0, stored.err
    assert "token:cpl-test, owner, via token" in stored.err
    me = cpl("whoami", "--json").json()
    assert (me["login"], me["via"], me["token_source"]) == ("token:cpl-test", "token", "config")

    cpl.config_file.chmod(0o644)
    assert "readable by others" in cpl("whoami").err
    refused = cpl("--token", "cp_not_a_token", "whoami")
    assert refused.rc == 5 and "commonplace token create" in refused.err
    assert cpl("logout").rc == 0
    assert cpl("whoami", "--json").json()["token_source"] == "none"


def test_errors_say_what_happened_with_their_exit_codes(cpl, server):
    gone = cpl("--server", f"http://127.0.0.1:{free_port()}", "search", "x")
    assert gone.rc == 6 and "cannot reach" in gone.err
    assert cpl("show", "999999").rc == 4
    assert cpl("run", "gemm_roofline", "-p", "iters=many").rc == 2
    refused = cpl("run", "gemm_roofline", "-p", "device=cuda")  # no GPU runner: refused
    assert refused.rc != 0 and "no runner can take this run" in refused.err
    assert "cpl run --anyway queues it" in refused.err
    waiting = cpl("run", "gemm_roofline", "-p", "device=cuda", "--anyway")  # then it waits
    run_id = waiting.out.strip()
    assert waiting.rc == 0 and "waits" in waiting.err
    assert cpl("runs", "cancel", run_id).rc == 0
    again = cpl("runs", "cancel", run_id)
    assert again.rc == 1 and "nothing to cancel" in again.err
