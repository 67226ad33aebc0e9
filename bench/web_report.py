"""bench/web.py's tables: the import against its baseline, each page kind under load
against bare+row, and kept pages after a commit."""

from __future__ import annotations

import os

from bench.corpus import Corpus

SEARCH_GOAL = 22.0  # ms, ranked search p95 at 100k
IMPORT_GOAL = 120.0  # s, 100k entries


def report_import(corpora: dict[int, Corpus]) -> None:
    print(f"\nimport: `commonplace import DIR` end to end against reading and parsing the "
          f"same files (load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    print("  (own s: the import's own time as it reports it, without the process start "
          "and the migration)")
    print(f"  {'N':>7} {'baseline s':>10} {'import s':>9} {'entries/s':>10} "
          f"{'x baseline':>10} {'cpu ms/e':>8} {'own s':>7} {'own e/s':>8}")
    for n, c in corpora.items():
        print(f"  {n:>7} {c.baseline_s:>10.1f} {c.import_s:>9.1f} {c.rate:>10.0f} "
              f"{c.import_s / c.baseline_s:>10.1f} {1000 * c.cpu_s / n:>8.2f} "
              f"{c.own_s:>7.1f} {n / c.own_s:>8.0f}")
    small, large = min(corpora), max(corpora)
    at_large, at_small = corpora[large], corpora[small]
    print(f"  rate at N={large} over N={small}: {at_large.rate / at_small.rate:.2f} end to "
          f"end, {at_small.own_s * large / (at_large.own_s * small):.2f} own "
          f"(goal: flat, ~1.0); {large} entries in {at_large.import_s:.0f} s, "
          f"{IMPORT_GOAL * large / 100_000:.0f} s at the goal's rate "
          f"(100k in <= {IMPORT_GOAL:.0f} s)")


def report(results: dict[int, dict[str, dict[str, float]]], corpora: dict[int, Corpus],
           concurrency: int) -> None:
    print(f"\nunder {concurrency} concurrent keep-alive clients (req/s, p50, p99 in ms), "
          "sequential p50 and p95, and cost against bare+row (its req/s over the kind's); "
          "then the server's CPU ms per request under that load and its ratio to bare+row's "
          "(the load generator shares the cores, so req/s ratios understate a page's own "
          "cost; CPU per request also drifts less with the machine)")
    for n, r in results.items():
        base = r["bare+row"]["rps"]
        print(f"\nN={n} (tag page: #{corpora[n].tag}, {corpora[n].tagged} entries; bare+row "
              f"req/s by round: {', '.join(f'{x:.0f}' for x in r['bare+row']['rounds'])})")
        print(f"  {'kind':<9} {'req/s':>8} {'p50':>8} {'p99':>8} {'seq p50':>8} "
              f"{'seq p95':>8} {'x bare+row':>11} {'cpu ms':>7} {'x cpu':>6}")
        for kind, m in r.items():
            print(f"  {kind:<9} {m['rps']:8.0f} {m['p50']:8.1f} {m['p99']:8.1f} "
                  f"{m['seq']:8.2f} {m['seq95']:8.2f} {base / m['rps']:10.2f}x "
                  f"{m['cpu']:7.2f} {m['cpu'] / r['bare+row']['cpu']:5.2f}x")
    small, large = min(results), max(results)
    print(f"\nper kind: x bare+row at N={large} (goal <= 2x) and that ratio at N={large} "
          f"over N={small} (goal <= 1.2: flat); the same two for server CPU per request")
    for kind in results[large]:
        at = {n: results[n]["bare+row"]["rps"] / results[n][kind]["rps"] for n in results}
        cpu = {n: results[n][kind]["cpu"] / results[n]["bare+row"]["cpu"] for n in results}
        print(f"  {kind:<9} {at[large]:6.2f}x   {at[large] / at[small]:6.2f}      "
              f"cpu {cpu[large]:5.2f}x   {cpu[large] / cpu[small]:5.2f}")
    search = results[large]["search"]["seq95"]
    print(f"search at N={large}: sequential p95 {search:.2f} ms (goal at 100k <= "
          f"{SEARCH_GOAL:g} ms: {'ok' if search <= SEARCH_GOAL else 'MISS'})")


def report_polls(polls: dict[int, dict[str, tuple[float, float]]]) -> None:
    print("\nkept pages, sequential p50 in ms: viewed again / each view right after a commit "
          "to the journal (a runner registering); goal: the same, ~1.0x")
    for n, found in polls.items():
        print(f"  N={n:>6}  " + "  ".join(f"{kind} {alone:.2f} / {after:.2f} "
                                          f"({after / alone:.2f}x)"
                                          for kind, (alone, after) in found.items()))
