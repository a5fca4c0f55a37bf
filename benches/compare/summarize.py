#!/usr/bin/env python3
"""Summarizes a benches/compare/run.sh output directory.

Reads the load generator's JSON reports (<target>-<round>.json), meta.txt and notes.txt,
prints a table, and writes summary.json and summary.md beside them: per target the
successful SendMessages per second (each round and their mean), p50/p99 latency (mean of
the rounds, and the worst p99), peak RSS of the server (highest of the rounds), errors,
the server's CPU time per successful request and the cores it used over the measured
window (from <target>-<round>.cpu.json), and the ratios of agent-a2a to each peer and to
the ceiling, then the issue's targets, met or missed and by how much.

    python3 benches/compare/summarize.py DIR
"""

import json
import re
import sys
from pathlib import Path

ORDER = ["python-sdk", "js-sdk", "turul-a2a", "a2a-rs", "ceiling", "turul-a2a-postgres",
         "a2a-protocol-postgres", "agent-a2a-sqlite", "agent-a2a-postgres"]

DESCRIPTION = {
    "python-sdk": ("a2a-sdk (Python), uvicorn", "in-memory"),
    "js-sdk": ("@a2a-js/sdk (Node), express", "in-memory"),
    "turul-a2a": ("turul-a2a (Rust, axum)", "in-memory"),
    "turul-a2a-postgres": ("turul-a2a (Rust, axum)", "Postgres, its own store"),
    "a2a-protocol-postgres": ("a2a-protocol-server (Rust, hyper)", "Postgres, its own store"),
    "a2a-rs": ("a2a-server-lf, official Rust SDK (axum)", "in-memory"),
    "ceiling": ("bare actix-web handler", "none"),
    "agent-a2a-sqlite": ("agent-a2a (release)", "SQLite, durable write-through"),
    "agent-a2a-postgres": ("agent-a2a (release)", "Postgres, durable write-through"),
}

OURS = ["agent-a2a-sqlite", "agent-a2a-postgres"]

# The open performance issues' targets (the Postgres path; the request path):
# (ours, peer, minimum ratio ours/peer), judged by the median of the rounds' ratios (the
# rounds are interleaved, so each round's ratio was measured under one load).
THROUGHPUT_TARGETS = [
    ("agent-a2a-postgres", "a2a-rs", 1.0),
    ("agent-a2a-postgres", "turul-a2a", 2.0),
    ("agent-a2a-sqlite", "a2a-rs", 1.25),
]
P99_LIMIT_MS = 10.0
# The push scenario (agent-a2a only): p99 from a send to its event's arrival at the
# receiver (the push-speed issue); the send targets above do not apply to it.
PUSH_P99_LIMIT_MS = 250.0
# Server CPU time per request at this concurrency.
CPU_LIMIT_US = {"agent-a2a-sqlite": 60.0, "agent-a2a-postgres": 60.0}
# Postgres' own CPU time per request (every postgres process).
POSTGRES_CPU_LIMIT_US = 60.0


def median(values):
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return float("nan")
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def round_ratio(targets, ours, peer):
    """The median of the per-round ratios ours/peer (the ratio of means if the round
    counts differ)."""
    a = targets[ours]["throughput_per_round"]
    b = targets[peer]["throughput_per_round"]
    if len(a) == len(b) and all(x > 0 for x in b):
        return median([x / y for x, y in zip(a, b)])
    return targets[ours]["throughput"] / targets[peer]["throughput"]


def mean(values):
    return sum(values) / len(values) if values else float("nan")


def load(out: Path):
    runs = {}
    for path in sorted(out.glob("*.json")):
        m = re.fullmatch(r"(.+)-(\d+)\.json", path.name)
        if not m or m.group(1) not in DESCRIPTION:
            continue
        runs.setdefault(m.group(1), []).append((int(m.group(2)), json.loads(path.read_text())))
    targets = {}
    for name, reports in runs.items():
        reports.sort(key=lambda r: r[0])
        rs = [r for _, r in reports]
        lat = [r["latencies"][0] for r in rs]
        mem = [r.get("memory") or {} for r in rs]
        label, store = DESCRIPTION[name]
        cpu = []
        pg_cpu = []
        for (rnd, r) in reports:
            path = out / f"{name}-{rnd}.cpu.json"
            if path.exists() and r["succeeded"] > 0:
                c = json.loads(path.read_text())
                secs = c["cpu_ticks"] / c["clk_tck"]
                cpu.append((secs / r["succeeded"] * 1e6, secs / r["elapsed_secs"]))
                if c.get("postgres_ticks"):
                    pg_cpu.append(c["postgres_ticks"] / c["clk_tck"] / r["succeeded"] * 1e6)
        targets[name] = {
            "server": label,
            "store": store,
            "dialect": rs[0]["dialect"],
            "url": rs[0]["url"],
            "rounds": len(rs),
            "throughput_per_round": [r["succeeded_per_sec"] for r in rs],
            "throughput": mean([r["succeeded_per_sec"] for r in rs]),
            "p50_ms_per_round": [x["p50_ms"] for x in lat],
            "p99_ms_per_round": [x["p99_ms"] for x in lat],
            "p50_ms": mean([x["p50_ms"] for x in lat]),
            "p99_ms": mean([x["p99_ms"] for x in lat]),
            "p99_ms_worst": max(x["p99_ms"] for x in lat),
            "cpu_us_per_request_per_round": [c[0] for c in cpu],
            "cpu_us_per_request": mean([c[0] for c in cpu]) if cpu else None,
            "server_cores": mean([c[1] for c in cpu]) if cpu else None,
            "postgres_cpu_us_per_request": mean(pg_cpu) if pg_cpu else None,
            "peak_rss_mib": max(m.get("rss_peak_kib", 0) for m in mem) / 1024,
            "succeeded": sum(r["succeeded"] for r in rs),
            "failed": sum(r["failed"] for r in rs),
            "errors": merge_counts(r["errors"] for r in rs),
            "outcomes": merge_counts(r["outcomes"] for r in rs),
        }
    return targets


def merge_counts(dicts):
    merged = {}
    for d in dicts:
        for k, v in d.items():
            merged[k] = merged.get(k, 0) + v
    return merged


def read_meta(out: Path):
    meta = {}
    path = out / "meta.txt"
    if path.exists():
        for line in path.read_text().splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                meta[k] = v
    notes = (out / "notes.txt").read_text().splitlines() if (out / "notes.txt").exists() else []
    return meta, notes


def read_loadavg(out: Path):
    """run -> the 1-minute load average before it started (from loadavg.txt)."""
    loads = {}
    path = out / "loadavg.txt"
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[1] == "before":
                loads[parts[0]] = float(parts[2])
    return loads


def ratios(targets):
    """ours/peer for every peer and both stores."""
    result = {}
    for ours in OURS:
        if ours not in targets:
            continue
        for peer in ORDER:
            if peer in targets and peer not in OURS and targets[peer]["throughput"] > 0:
                result[f"{ours}/{peer}"] = targets[ours]["throughput"] / targets[peer]["throughput"]
    return result


def p99_verdicts(targets, limit, what):
    """Each of ours against a p99 limit in milliseconds (`what` names the latency)."""
    out = []
    for ours in OURS:
        if ours not in targets:
            continue
        got = targets[ours]["p99_ms"]
        entry = {
            "target": f"{ours} {what} ≤ {limit:g} ms",
            "want": limit,
            "got": got,
            "worst_round": targets[ours]["p99_ms_worst"],
            "met": got <= limit,
        }
        if got > limit:
            entry["excess_ms"] = got - limit
        out.append(entry)
    return out


def verdicts(targets, scenario="send"):
    if scenario == "push":
        return p99_verdicts(targets, PUSH_P99_LIMIT_MS, "p99 from a send to its event")
    out = []
    for ours, peer, want in THROUGHPUT_TARGETS:
        if ours not in targets or peer not in targets:
            out.append({"target": f"{ours} ≥ {want:g}× {peer}", "status": "not measured"})
            continue
        got = round_ratio(targets, ours, peer)
        ours_cpu, peer_cpu = targets[ours]["cpu_us_per_request"], targets[peer]["cpu_us_per_request"]
        entry = {
            "target": (f"{ours} ≥ {want:.0%} of the ceiling" if peer == "ceiling"
                       else f"{ours} ≥ {want:g}× {peer}"),
            "want": want,
            "got": got,
            "met": got >= want,
            # The same comparison by CPU time per request (peer's ÷ ours): steadier than
            # throughput when other work on the machine takes a varying share of the CPU.
            "got_by_cpu": peer_cpu / ours_cpu if ours_cpu and peer_cpu else None,
        }
        if got < want:
            entry["shortfall"] = 1 - got / want
            entry["needed_speedup"] = want / got
        out.append(entry)
    for ours, limit in CPU_LIMIT_US.items():
        if ours not in targets or targets[ours]["cpu_us_per_request"] is None:
            continue
        got = targets[ours]["cpu_us_per_request"]
        entry = {"target": f"{ours} server CPU ≤ {limit:g} µs/request", "want": limit,
                 "got": got, "met": got <= limit, "unit": "µs"}
        if got > limit:
            entry["excess"] = got - limit
        out.append(entry)
    if targets.get("agent-a2a-postgres", {}).get("postgres_cpu_us_per_request") is not None:
        got = targets["agent-a2a-postgres"]["postgres_cpu_us_per_request"]
        entry = {"target": f"agent-a2a-postgres Postgres' own CPU ≤ {POSTGRES_CPU_LIMIT_US:g} "
                           "µs/request", "want": POSTGRES_CPU_LIMIT_US,
                 "got": got, "met": got <= POSTGRES_CPU_LIMIT_US, "unit": "µs"}
        if got > POSTGRES_CPU_LIMIT_US:
            entry["excess"] = got - POSTGRES_CPU_LIMIT_US
        out.append(entry)
    return out + p99_verdicts(targets, P99_LIMIT_MS, "p99")


def fmt_ratio(x):
    return f"{x:.2f}×" if x < 10 else f"{x:.1f}×"


def table(targets, rs):
    header = ["server", "store", "dialect", "ok/s (each round)", "ok/s mean", "p50 ms",
              "p99 ms", "server CPU µs/req", "Postgres CPU µs/req", "server cores", "peak RSS MiB", "errors", "agent-a2a SQLite ÷", "agent-a2a Postgres ÷"]
    rows = []
    for name in ORDER:
        if name not in targets:
            continue
        t = targets[name]
        rounds = " / ".join(f"{x:.0f}" for x in t["throughput_per_round"])
        cells = [t["server"], t["store"], t["dialect"], rounds, f"{t['throughput']:.0f}",
                 f"{t['p50_ms']:.2f}", f"{t['p99_ms']:.2f}",
                 "?" if t["cpu_us_per_request"] is None else f"{t['cpu_us_per_request']:.0f}",
                 "–" if t.get("postgres_cpu_us_per_request") is None
                 else f"{t['postgres_cpu_us_per_request']:.0f}",
                 "?" if t["server_cores"] is None else f"{t['server_cores']:.2f}",
                 f"{t['peak_rss_mib']:.1f}",
                 str(t["failed"])]
        for ours in OURS:
            key = f"{ours}/{name}"
            if name in OURS:
                cells.append("–")
            elif key in rs:
                cells.append(fmt_ratio(rs[key]) if name != "ceiling" else f"{rs[key]:.0%}")
            else:
                cells.append("n/a")
        rows.append(cells)
    return header, rows


def markdown(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def plain(header, rows):
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*header), fmt.format(*("-" * w for w in widths))]
                     + [fmt.format(*r) for r in rows])


def verdict_lines(vs):
    lines = []
    for v in vs:
        by_cpu = ""
        if v.get("got_by_cpu") is not None:
            x = v["got_by_cpu"]
            by_cpu = (f"{x:.0%}" if "ceiling" in v["target"] else fmt_ratio(x))
            # The database server's own CPU is another process's, not counted.
            pg = ", Postgres' own CPU not counted" if "postgres" in v["target"] else ""
            by_cpu = f" (by server CPU per request: {by_cpu}{pg})"
        if v.get("status") == "not measured":
            lines.append(f"- {v['target']}: not measured")
        elif v.get("unit") == "µs":
            lines.append(f"- {v['target']}: met — {v['got']:.0f} µs" if v["met"] else
                         f"- {v['target']}: **missed** — {v['got']:.0f} µs, "
                         f"{v['excess']:.0f} µs over")
        elif "excess_ms" in v:
            lines.append(f"- {v['target']}: **missed** — {v['got']:.2f} ms (worst round "
                         f"{v['worst_round']:.2f} ms), {v['excess_ms']:.2f} ms over")
        elif "worst_round" in v:
            lines.append(f"- {v['target']}: met — {v['got']:.2f} ms (worst round {v['worst_round']:.2f} ms)")
        elif v["met"]:
            got = f"{v['got']:.0%}" if "ceiling" in v["target"] else fmt_ratio(v["got"])
            lines.append(f"- {v['target']}: met — {got}{by_cpu}")
        else:
            got = f"{v['got']:.0%}" if "ceiling" in v["target"] else fmt_ratio(v["got"])
            lines.append(f"- {v['target']}: **missed** — {got}, {v['shortfall']:.0%} short "
                         f"(needs {v['needed_speedup']:.2f}× its throughput){by_cpu}")
    return lines


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    targets = load(out)
    if not targets:
        sys.exit(f"summarize.py: no reports in {out}")
    meta, notes = read_meta(out)
    loads = read_loadavg(out)
    for name, t in targets.items():
        t["loadavg_1m_before"] = [loads.get(f"{name}-{i}") for i in range(1, t["rounds"] + 1)]
    rs = ratios(targets)
    scenario = meta.get("scenario", "send")
    vs = verdicts(targets, scenario)
    header, rows = table(targets, rs)

    if scenario == "push":
        scenario = ("push (ok/s: events delivered; p50/p99: from a send to its event's "
                    "arrival; CPU per event)")
    if scenario == "multi-turn":
        scenario = f"multi-turn ({meta.get('turns', '?')} messages a conversation, agent-a2a at 16 resident threads)"
    settings = (f"{scenario}, c={meta.get('connections', '?')}, {meta.get('warmup', '?')} warm-up + "
                f"{meta.get('duration', '?')} measured, {meta.get('rounds', '?')} round(s), "
                f"closed loop")
    print(settings)
    print(plain(header, rows))
    print()
    print("\n".join(line.replace("**", "") for line in verdict_lines(vs)))
    for n in notes:
        print(f"note: {n}")

    (out / "summary.json").write_text(json.dumps(
        {"meta": meta, "notes": notes, "targets": targets, "ratios": rs, "verdicts": vs},
        indent=2, ensure_ascii=False) + "\n")
    md = [f"Run of {meta.get('date_utc', '?')}, commit {meta.get('commit', '?')}"
          f"{' (dirty)' if meta.get('dirty') == 'yes' else ''}, {meta.get('cpus', '?')} CPUs "
          f"({meta.get('cpu_model', '?')}); {settings}.", "",
          markdown(header, rows), "", *verdict_lines(vs)]
    if loads:
        md += ["", "1-minute load average of the machine before each run (the load generator "
               "and other users' work share it): " + "; ".join(
                   f"{n} " + " / ".join("?" if x is None else f"{x:.1f}" for x in t["loadavg_1m_before"])
                   for n, t in ((n, targets[n]) for n in ORDER if n in targets)) + "."]
    if notes:
        md += ["", *(f"Note: {n}" for n in notes)]
    versions = [v if v.lower().startswith(k) else f"{k} {v}" for k, v in meta.items()
                if k in ("a2a_sdk", "python", "a2a_js_sdk", "node", "turul_a2a", "a2a_server_lf",
                         "rustc", "postgres")]
    if versions:
        md += ["", "Versions: " + "; ".join(versions) + "."]
    (out / "summary.md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
