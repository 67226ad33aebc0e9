"""`commonplace import` as the notebook grows, against a baseline in the same run.

    .venv/bin/python bench/importing.py                    # N = 1k, 10k, 100k
    .venv/bin/python bench/importing.py --sizes 1000 5000
    .venv/bin/python bench/importing.py --sizes 2000 --slow   # also the per-file path

For each N it writes N markdown files in the mirror's format (dated notes over ten years:
a Zipf vocabulary, tags, [[wiki links]] to earlier and later notes, to dates and to weekly
letters, code blocks, headings, lists, a letter every week), then into a fresh data
directory:

  baseline  read and parse the same files (app/notebook/mirror.parse_file), one process:
            the least an import can do
  import    `commonplace import DIR` as the owner runs it (a subprocess: migrate, import,
            summary), timed end to end
  again     the same command on the same folder (idempotent: everything unchanged)

It prints entries/s per N, import/baseline, and the rate at the largest N over the rate at
the smallest (goal: 100k in <= 120 s on 2 cores, the rate flat with N). --slow also times
the per-file path (transfer.import_folder_slowly, a save per file) at each N for the ratio.
Timings are noisy on shared machines; compare within one run. bench/web.py builds its
corpus with the same `generate` and the same command (bench/corpus.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from app.notebook.isoweeks import iso_week  # noqa: E402
from app.notebook.mirror import parse_file  # noqa: E402

WORDS = [
    "gradient", "shard", "tensor", "allreduce", "pipeline", "stage", "bubble", "optimizer",
    "memory", "bandwidth", "latency", "kernel", "fusion", "attention", "batch", "token",
    "sequence", "checkpoint", "activation", "offload", "partition", "replica", "rank",
    "collective", "ring", "tree", "topology", "nvlink", "throughput", "warmup", "schedule",
    "loss", "spike", "precision", "bf16", "fp8", "overlap", "compute", "communication",
    "profile", "trace", "straggler", "elastic", "restart", "dataset", "loader", "prefetch",
    "cache", "expert", "router", "capacity", "dropless", "zero", "stage3", "fsdp", "megatron",
    "tp", "pp", "dp", "sp", "cp", "ulysses", "flash", "paged", "kv", "decode", "prefill",
    "speculative", "quantize", "calibrate", "outlier", "smooth", "garden", "coffee", "walk",
    "book", "letter", "friend", "recipe", "bread", "river", "morning", "evening", "idea",
]
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qu", "xi", "bo"]
TAGS = ["ml", "gpu", "reading", "ideas", "home", "zero", "pipeline", "moe", "inference",
        "kernels", "papers", "travel", "cooking", "garden", "music", "work/infra", "work/team"]
CODE = [
    ("python", "import torch\n\ndef step(model, batch):\n    loss = model(batch).mean()\n"
               "    loss.backward()\n    return loss.item()\n"),
    ("bash", "torchrun --nproc-per-node 8 train.py --zero 3 \\\n  --micro-batch 4\n"),
    ("yaml", "model: llama\nlayers: 32\nparallel:\n  tp: 2\n  pp: 4\n"),
    ("", "plain output\n  step 10 loss 2.31\n  step 20 loss 2.02\n"),
]


def vocabulary(rng: random.Random, size: int = 5000) -> tuple[list[str], list[float]]:
    """A Zipf vocabulary: a few words everywhere, a long tail of rare ones."""
    words = list(WORDS)
    while len(words) < size:
        words.append("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return words, [1 / (rank + 1) for rank in range(len(words))]


def _title(i: int, words: list[str], rng: random.Random) -> str:
    return f"{' '.join(rng.choices(words[:400], k=3)).capitalize()} {i}"


def generate(folder: Path, n: int, seed: int = 14) -> int:
    """Write n notes (about one in seven a weekly letter) under folder; returns n."""
    rng = random.Random(seed)
    words, weights = vocabulary(rng)
    start = dt.date(2016, 1, 1)
    days = 3650
    plan = []
    for i in range(n):
        date = start + dt.timedelta(days=i * days // max(n, 1))
        plan.append((date, _title(i, words, rng)))
    letters = set()
    for i, (date, title) in enumerate(plan):
        week = iso_week(date)
        if i % 7 == 3 and week not in letters:
            letters.add(week)
            kind, title = "week", f"Week {week}"
        else:
            kind = "entry"
        paragraphs = []
        for _ in range(rng.randint(2, 6)):
            sentence = rng.choices(words, weights, k=rng.randint(25, 70))
            for _ in range(rng.randint(0, 2)):
                j = min(n - 1, max(0, i + int(rng.gauss(0, 300))))
                sentence.insert(rng.randrange(len(sentence)), f"[[{plan[j][1]}]]")
            if rng.random() < 0.3:
                sentence.insert(rng.randrange(len(sentence)), "#" + rng.choice(TAGS))
            if rng.random() < 0.1:
                sentence.append(f"[[{(date - dt.timedelta(days=rng.randint(1, 30)))}]]")
            if rng.random() < 0.05:
                sentence.append(f"[[{iso_week(date - dt.timedelta(days=7))}|last week]]")
            paragraphs.append(" ".join(sentence).capitalize() + ".")
        if rng.random() < 0.3:
            lang, code = rng.choice(CODE)
            paragraphs.insert(rng.randrange(len(paragraphs) + 1), f"```{lang}\n{code}```")
        if rng.random() < 0.3:
            paragraphs.insert(1, "\n".join(f"- {' '.join(rng.choices(words, weights, k=6))}"
                                           for _ in range(rng.randint(2, 5))))
        if rng.random() < 0.2:
            paragraphs.insert(0, f"## {' '.join(rng.choices(words[:200], k=2)).capitalize()}")
            paragraphs.insert(len(paragraphs) // 2 + 1, "## More")
        meta: dict = {"title": title, "date": date}
        if kind == "week":
            meta.update(kind="week", week=iso_week(date))
        meta["tags"] = sorted(set(rng.choices(TAGS, k=rng.randint(0, 3))))
        meta["status"] = "draft" if rng.random() < 0.03 else "published"
        front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, default_flow_style=None)
        name = (f"{iso_week(date)}.md" if kind == "week"
                else f"{date.isoformat()}-{'-'.join(title.lower().split())}.md")
        path = folder / f"{date.year:04d}" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"---\n{front}---\n" + "\n\n".join(paragraphs) + "\n")
    return n


def baseline(folder: Path) -> float:
    """Seconds to read and parse every file, in this one process."""
    started = time.perf_counter()
    for path in sorted(folder.rglob("*.md")):
        parse_file(path)
    return time.perf_counter() - started


def commonplace(*args: str) -> list[str]:
    """The `commonplace` command line as the owner types it (the venv's entry point)."""
    return [str(Path(sys.executable).parent / "commonplace"), *args]


def cli_env(data: Path) -> dict[str, str]:
    """The environment of a `commonplace` command on data directory `data`: its database is
    the default <data>/commonplace.db."""
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data), "COMMONPLACE_TIMEZONE": "UTC"}
    env.pop("COMMONPLACE_DATABASE_URL", None)
    return env


def timed_import(folder: Path, data: Path) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (the command and its worker processes), its summary."""
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(commonplace("import", str(folder)), env=cli_env(data),
                          capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"import failed:\n{done.stdout}\n{done.stderr[-2000:]}")
    used = after.ru_utime - cpu.ru_utime + after.ru_stime - cpu.ru_stime
    return seconds, used, done.stdout.strip()


def timed_slow(folder: Path, data: Path) -> float:
    from app import create_app, upgrades
    from app.notebook import transfer

    app = create_app({"DATA_DIR": data, "DATABASE_URL": f"sqlite:///{data}/commonplace.db",
                      "TIMEZONE": "UTC"})
    upgrades.upgrade(app.extensions["db"], data / "backups")
    started = time.perf_counter()
    transfer.import_folder_slowly(app.extensions["db"], folder)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--slow", action="store_true", help="also time a save per file")
    args = parser.parse_args()
    rates = {}
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (other work "
          "slows the wall times; CPU ms/entry is steadier)")
    print(f"{'N':>7} {'baseline s':>10} {'import s':>9} {'entries/s':>10} {'x baseline':>10} "
          f"{'cpu ms/e':>8} {'again s':>8}"
          + (f" {'slow s':>8} {'slow/bulk':>9}" if args.slow else ""))
    for n in args.sizes:
        work = Path(tempfile.mkdtemp(prefix=f"cp-import-{n}-"))
        try:
            folder = work / "notes-in"
            generate(folder, n)
            base = baseline(folder)
            seconds, cpu, summary = timed_import(folder, work / "data")
            again, _, summary_again = timed_import(folder, work / "data")
            assert f"created {n}," in summary and f"unchanged {n}," in summary_again, summary
            rates[n] = n / seconds
            line = (f"{n:>7} {base:>10.1f} {seconds:>9.1f} {rates[n]:>10.0f} "
                    f"{seconds / base:>10.1f} {1000 * cpu / n:>8.2f} {again:>8.1f}")
            if args.slow:
                slow = timed_slow(folder, work / "slow")
                line += f" {slow:>8.1f} {slow / seconds:>9.1f}"
            print(line, flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if len(rates) > 1:
        small, large = min(rates), max(rates)
        print(f"rate at {large} / rate at {small}: {rates[large] / rates[small]:.2f} "
              f"(flat: ~1.0); {large} entries in {large / rates[large]:.0f} s; "
              f"load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
