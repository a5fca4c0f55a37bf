# benches/common.sh — shell helpers the A/B bench scripts share (sourced, not run):
# reading a process's CPU time and context switches from /proc, waiting for a server to
# be ready, and printing one run's line from the load generator's JSON report.

# CPU ticks (user + system) of process $1.
ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }

# CPU ticks of every process named postgres (the server and its backends).
postgres_ticks() {
    local total=0 pid
    for pid in $(pgrep -x postgres || true); do
        total=$((total + $(ticks "$pid" 2>/dev/null || echo 0)))
    done
    echo "$total"
}

# postgres_per_request REPORT TICKS: "  postgres N us/req", Postgres' CPU per request of
# the load generator's JSON report REPORT, TICKS being postgres_ticks over the run.
postgres_per_request() {
    python3 - "$1" "$2" "$(getconf CLK_TCK)" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ops = r["succeeded"] + r["failed"]
print(f"  postgres {int(sys.argv[2]) / int(sys.argv[3]) * 1e6 / max(ops, 1):5.0f} us/req")
PY
}

# Context switches (voluntary and not) of every thread of process $1.
switches() {
    cat /proc/"$1"/task/*/status 2>/dev/null |
        awk '/^(voluntary|nonvoluntary)_ctxt_switches/ {n += $2} END {print n + 0}'
}

# Waits up to 20 s for $1/health/ready.
wait_ready() {
    for _ in $(seq 1 200); do
        curl -sf "$1/health/ready" >/dev/null && return 0
        sleep 0.1
    done
    echo "not ready: $1" >&2
    return 1
}

# report JSON SETUP SCENARIO ROUND TICKS SWITCHES: one line of throughput, latency, and
# CPU and switches per request of the processes measured.
report() {
    python3 - "$@" "$(getconf CLK_TCK)" <<'PY'
import json, sys
report, setup, scenario, rnd, ticks, switches, hz = sys.argv[1:]
r = json.load(open(report))
ops = r["succeeded"] + r["failed"]
lat = r["latencies"][0]
cpu_us = int(ticks) / int(hz) * 1e6 / max(ops, 1)
print(f"{setup:<9} {scenario:<11} round {rnd}: {r['succeeded_per_sec']:8.0f} ok/s "
      f"p50 {lat['p50_ms']:6.2f} ms  p99 {lat['p99_ms']:7.2f} ms  failed {r['failed']:4d}  "
      f"cpu {cpu_us:5.0f} us/req  switches {int(switches) / max(ops, 1):5.2f}/req "
      f"(includes warm-up)")
# The scenario's other measures (push: from each send to its event's arrival).
for other in r["latencies"][1:]:
    print(f"{'':<9} {'':<11}          {other['name']}: p50 {other['p50_ms']:8.2f} ms  "
          f"p99 {other['p99_ms']:8.2f} ms  ({other.get('count', '?')} measured)")
# ... and its counters (push: events delivered while the sends ran, and after).
for name, n in r.get("counters", {}).items():
    print(f"{'':<9} {'':<11}          {name}: {n}")
PY
}

# build_load ROOT TARGET_DIR: builds the release load generator (benches/load) of the
# checkout at ROOT into TARGET_DIR (a no-op when it is up to date) and prints its path.
build_load() {
    echo "building the load generator (release) in $2" >&2
    (cd "$1" && CARGO_TARGET_DIR="$2" cargo bench --bench load --no-run --quiet) >&2
    find "$2/release/deps" -maxdepth 1 -type f -executable -name 'load-*' -printf '%T@ %p\n' |
        sort -n | tail -n 1 | cut -d' ' -f2
}

# build_peer ROOT TARGET_DIR NAME: builds a server of benches/compare (ceiling, a2a-rs or
# turul-a2a) where benches/compare/run.sh builds it (a no-op when it is up to date) and
# prints its path.
build_peer() {
    local root="$1" target="$2"
    case "$3" in
        ceiling)
            (cd "$root" && CARGO_TARGET_DIR="$target" cargo build --locked --release --quiet \
                --example compare_ceiling) >&2
            echo "$target/release/examples/compare_ceiling"
            ;;
        a2a-rs)
            CARGO_TARGET_DIR="$target/compare-a2a-rs" cargo build --locked --release --quiet \
                --manifest-path "$root/benches/compare/a2a-rs/Cargo.toml" >&2
            echo "$target/compare-a2a-rs/release/compare-a2a-rs-echo"
            ;;
        turul-a2a)
            CARGO_TARGET_DIR="$target/compare-turul" cargo build --locked --release --quiet \
                --manifest-path "$root/benches/compare/turul/Cargo.toml" >&2
            echo "$target/compare-turul/release/compare-turul-echo"
            ;;
        *) echo "build_peer: no peer $3" >&2; return 2 ;;
    esac
}

# new_database NAME: creates database NAME on the server at PG_URL and registers it in
# DATABASES, which stop_and_clean drops (not in a subshell: DATABASES must keep it).
new_database() {
    psql -q -X "$PG_URL/postgres" -c "CREATE DATABASE \"$1\"" >/dev/null
    DATABASES+=("$1")
}

# The EXIT trap of the scripts that start servers: stops the processes in PIDS, drops the
# databases named in DATABASES on the server at PG_URL, and removes WORK (kept, with the
# servers' logs, when KEEP_WORK is set).
stop_and_clean() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    for db in "${DATABASES[@]}"; do
        psql -q -X "$PG_URL/postgres" -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true
    done
    [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"
}
