// The operators' dashboard of agent-a2a: polls /dashboard/stats.json every two seconds
// and draws small canvas charts. No libraries, nothing from other origins.
//
// For automated checks the page reports on itself in data attributes: <body> carries
// data-state (loading | live | offline), data-polls (successful refreshes),
// data-fetch-failures and data-errors (script errors, unhandled rejections, console
// errors and Content-Security-Policy violations); every chart's <canvas> carries
// data-points (values drawn) and data-nonzero (values above zero).
"use strict";

(function () {
  const STATS_URL = "/dashboard/stats.json";
  const REFRESH_MS = 2000;
  const COLORS = ["#58a6ff", "#f0883e", "#3fb950", "#d2a8ff", "#f85149"];
  const GRID = "#2a323c";
  const AXIS_TEXT = "#8a96a3";
  const FONT = "11px system-ui, sans-serif";

  const body = document.body;
  let errors = 0;

  function noteError(text) {
    errors += 1;
    body.dataset.errors = String(errors);
    const slot = document.getElementById("last-error");
    if (slot) {
      slot.textContent = "Page error: " + text;
    }
  }

  window.addEventListener("error", (e) => noteError(e.message || "script error"));
  window.addEventListener("unhandledrejection", (e) => noteError(String(e.reason)));
  document.addEventListener("securitypolicyviolation", (e) =>
    noteError("blocked by Content-Security-Policy: " + e.violatedDirective));
  const consoleError = console.error.bind(console);
  console.error = function (...args) {
    noteError(args.map(String).join(" "));
    consoleError(...args);
  };

  // Numbers for people: at most three significant digits, no trailing noise.
  function fmt(v) {
    if (v === null || v === undefined || Number.isNaN(v)) {
      return "–";
    }
    const a = Math.abs(v);
    if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
    if (a >= 100 || Number.isInteger(v)) return String(Math.round(v));
    if (a >= 10) return v.toFixed(1);
    return v.toFixed(2);
  }

  function fmtMs(v) {
    return v === null || v === undefined ? "–" : fmt(v) + " ms";
  }

  function fmtDuration(secs) {
    const d = Math.floor(secs / 86400);
    const h = Math.floor((secs % 86400) / 3600);
    const m = Math.floor((secs % 3600) / 60);
    if (d > 0) return d + "d " + h + "h";
    if (h > 0) return h + "h " + m + "m";
    return m + "m " + (secs % 60) + "s";
  }

  // The smallest 1, 2 or 5 × 10^k at or above v (1 for an empty chart).
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) {
      if (m * p >= v) return m * p;
    }
    return 10 * p;
  }

  // A canvas sized to its box in device pixels, with a context in CSS pixels.
  function prepare(canvas) {
    const ratio = window.devicePixelRatio || 1;
    const box = canvas.getBoundingClientRect();
    const width = Math.max(1, Math.round(box.width));
    const height = Math.max(1, Math.round(box.height));
    if (canvas.width !== width * ratio || canvas.height !== height * ratio) {
      canvas.width = width * ratio;
      canvas.height = height * ratio;
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = FONT;
    return { ctx, width, height };
  }

  function legend(ctx, width, series) {
    let x = width - 6;
    ctx.textAlign = "right";
    ctx.textBaseline = "top";
    for (let i = series.length - 1; i >= 0; i -= 1) {
      const s = series[i];
      ctx.fillStyle = AXIS_TEXT;
      ctx.fillText(s.label, x, 2);
      x -= ctx.measureText(s.label).width + 4;
      ctx.fillStyle = s.color;
      ctx.fillRect(x - 10, 6, 10, 3);
      x -= 20;
    }
  }

  function report(canvas, values) {
    const drawn = values.filter((v) => v !== null && v !== undefined);
    canvas.dataset.points = String(drawn.length);
    canvas.dataset.nonzero = String(drawn.filter((v) => v > 0).length);
  }

  // Line chart of one or more series over the window; null values leave gaps.
  function lineChart(canvas, times, series) {
    const { ctx, width, height } = prepare(canvas);
    const left = 44;
    const right = 6;
    const top = 18;
    const bottom = 18;
    const plotW = width - left - right;
    const plotH = height - top - bottom;
    const all = series.flatMap((s) => s.values).filter((v) => v !== null && v !== undefined);
    const max = niceMax(Math.max(0, ...all));

    ctx.strokeStyle = GRID;
    ctx.lineWidth = 1;
    ctx.fillStyle = AXIS_TEXT;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let i = 0; i <= 4; i += 1) {
      const y = top + plotH - (plotH * i) / 4;
      ctx.beginPath();
      ctx.moveTo(left, Math.round(y) + 0.5);
      ctx.lineTo(left + plotW, Math.round(y) + 0.5);
      ctx.stroke();
      ctx.fillText(fmt((max * i) / 4), left - 4, y);
    }
    const n = times.length;
    const span = n > 1 ? times[n - 1] - times[0] : 0;
    ctx.textBaseline = "top";
    // A tick every 30 s back from now.
    for (let back = 0; span > 0 && back <= span; back += 30) {
      const x = left + plotW - (plotW * back) / span;
      ctx.textAlign = back === 0 ? "right" : "center";
      ctx.fillText(back === 0 ? "now" : "-" + back + "s", x, top + plotH + 4);
    }

    const xAt = (i) => left + (n > 1 ? (plotW * i) / (n - 1) : plotW);
    const yAt = (v) => top + plotH - (plotH * v) / max;
    for (const s of series) {
      ctx.strokeStyle = s.color;
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      const missing = (v) => v === null || v === undefined;
      let open = false;
      s.values.forEach((v, i) => {
        if (missing(v)) {
          open = false;
        } else if (open) {
          ctx.lineTo(xAt(i), yAt(v));
        } else {
          ctx.moveTo(xAt(i), yAt(v));
          open = true;
        }
      });
      ctx.stroke();
      // A point between two gaps has no line: mark it with a dot.
      ctx.fillStyle = s.color;
      s.values.forEach((v, i) => {
        if (!missing(v) && missing(s.values[i - 1]) && missing(s.values[i + 1])) {
          ctx.beginPath();
          ctx.arc(xAt(i), yAt(v), 2, 0, 2 * Math.PI);
          ctx.fill();
        }
      });
    }
    legend(ctx, width, series);
    report(canvas, series.flatMap((s) => s.values));
  }

  // Horizontal bars, one per task state.
  function barChart(canvas, counts) {
    const { ctx, width, height } = prepare(canvas);
    const entries = Object.entries(counts);
    if (entries.length === 0) {
      ctx.fillStyle = AXIS_TEXT;
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText("not counted yet (metrics.census_interval_secs)", width / 2, height / 2);
      report(canvas, []);
      return;
    }
    const labelW = 96;
    const valueW = 48;
    const rowH = Math.min(20, (height - 4) / entries.length);
    const max = niceMax(Math.max(...entries.map(([, v]) => v)));
    ctx.textBaseline = "middle";
    entries.forEach(([state, value], i) => {
      const y = 2 + i * rowH;
      ctx.fillStyle = AXIS_TEXT;
      ctx.textAlign = "right";
      ctx.fillText(state.split("_").join(" "), labelW - 6, y + rowH / 2);
      ctx.fillStyle = COLORS[i % COLORS.length];
      const w = ((width - labelW - valueW) * value) / max;
      ctx.fillRect(labelW, y + 3, Math.max(value > 0 ? 1 : 0, w), rowH - 6);
      ctx.fillStyle = AXIS_TEXT;
      ctx.textAlign = "left";
      ctx.fillText(fmt(value), labelW + w + 4, y + rowH / 2);
    });
    report(canvas, entries.map(([, v]) => v));
  }

  function text(id, value) {
    const el = document.getElementById(id);
    if (el) el.textContent = value;
  }

  function sum(values) {
    return values.reduce((a, v) => a + (v || 0), 0);
  }

  function render(stats) {
    const s = stats.series;
    const chart = (name) => document.querySelector('canvas[data-chart="' + name + '"]');
    const line = (label, values, i) => ({ label, values, color: COLORS[i] });

    lineChart(chart("requests"), s.time, [
      line("requests", s.requests, 0),
      line("server errors", s.serverErrors, 4),
    ]);
    lineChart(chart("latency"), s.time, [
      line("p50", s.latencyP50Ms, 0),
      line("p99", s.latencyP99Ms, 1),
    ]);
    lineChart(chart("errors"), s.time, [line("A2A errors", s.errors, 4)]);
    lineChart(chart("threads"), s.time, [
      line("active threads", s.threadsActive, 0),
      line("thread actors", s.threadActors, 2),
    ]);
    lineChart(chart("sse"), s.time, [line("open streams", s.sseSubscribers, 3)]);
    lineChart(chart("rate-limited"), s.time, [line("refused", s.rateLimited, 1)]);
    lineChart(chart("persist-queue"), s.time, [line("queued", s.persistQueue, 0)]);
    lineChart(chart("push"), s.time, [
      line("delivered", s.pushDelivered, 0),
      line("given up", s.pushLost, 4),
      line("owed", s.pushOutbox, 2),
    ]);
    lineChart(chart("remote"), s.time, [
      line("remote answered", s.remoteAnswered, 0),
      line("remote failed", s.remoteFailed, 4),
      line("MCP answered", s.mcpAnswered, 2),
      line("MCP failed", s.mcpFailed, 1),
    ]);
    lineChart(chart("commit-latency"), s.time, [
      line("p50", s.commitP50Ms, 0),
      line("p99", s.commitP99Ms, 1),
    ]);
    barChart(chart("tasks"), stats.tasksByState);

    const last10 = s.requests.slice(-10);
    text("tile-rps", fmt(sum(last10) / Math.max(1, last10.length)));
    text("tile-p99", fmtMs(stats.window.latencyP99Ms));
    text("tile-errors", fmt(stats.window.errors));
    text("tile-threads", fmt(stats.current.threadsActive));
    text("tile-actors", fmt(stats.current.threadActors));
    text("tile-sse", fmt(stats.current.sseSubscribers));
    text("tile-queue", fmt(stats.current.persistQueue));
    text("tile-limited", fmt(stats.window.rateLimited));
    text("tile-push", fmt(stats.current.pushOutbox));
    text("version", stats.version);
    text("uptime", fmtDuration(stats.uptimeSecs));
    if (stats.cluster) {
      document.getElementById("node-meta").hidden = false;
      const role = stats.cluster.leader ? ", leader" : "";
      text("node", `${stats.cluster.node}${role} · ${stats.cluster.liveNodes} live`);
    }
    text("window", String(stats.windowSecs));
  }

  let polls = 0;
  let failures = 0;

  async function refresh() {
    let stats = null;
    try {
      const response = await fetch(STATS_URL, { cache: "no-store" });
      if (!response.ok) {
        throw new Error("HTTP " + response.status);
      }
      stats = await response.json();
    } catch (e) {
      // An unreachable server is the dashboard's news, not a page error.
      failures += 1;
      body.dataset.fetchFailures = String(failures);
      body.dataset.state = "offline";
      text("status", "offline: " + (e && e.message ? e.message : String(e)));
    }
    if (stats !== null) {
      try {
        render(stats);
        polls += 1;
        body.dataset.polls = String(polls);
        body.dataset.state = "live";
        text("status", "live");
      } catch (e) {
        noteError("cannot draw the charts: " + (e && e.message ? e.message : String(e)));
      }
    }
    window.setTimeout(refresh, REFRESH_MS);
  }

  refresh();
})();
