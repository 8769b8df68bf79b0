// The console's common part (both services): the caller's key, API calls, the event-stream
// reader, tables and SVG charts. Plain browser JavaScript, no build step, no third-party code.
"use strict";

const KEY = "labeldp.console.key";

const Console = {
  // The key: from the URL fragment (#key=…, never sent to a server; removed from the address bar
  // at once), else what this tab kept in sessionStorage. Never put in a URL query.
  params: new URLSearchParams(location.hash.replace(/^#/, "")),

  key() {
    const given = this.params.get("key");
    if (given) {
      sessionStorage.setItem(KEY, given);
      const rest = new URLSearchParams(this.params);
      rest.delete("key");
      history.replaceState(null, "", location.pathname + (rest.toString() ? "#" + rest : ""));
    }
    return sessionStorage.getItem(KEY) || "";
  },

  // GET/POST `path` (relative to the service root, e.g. "v1/releases") with the caller's key;
  // JSON in and out. A non-2xx answer throws an Error carrying the envelope's code and status.
  async api(path, options = {}) {
    const headers = { Authorization: "Bearer " + this.key(), Accept: "application/json" };
    if (options.json !== undefined) headers["Content-Type"] = "application/json";
    const r = await fetch(new URL("../" + path, location.href), {
      method: options.method || (options.json !== undefined ? "POST" : "GET"),
      headers,
      body: options.json !== undefined ? JSON.stringify(options.json) : undefined,
      cache: "no-store",
    });
    if (options.raw && r.ok) return r;
    const body = await r.json().catch(() => ({}));
    if (!r.ok) {
      const err = new Error(`${r.status} ${body.code || ""}: ${body.message || r.statusText}`);
      err.status = r.status;
      err.code = body.code;
      throw err;
    }
    return body;
  },

  // The newest `n` items of a paged list, newest first (`order=desc`): pages of at most 500
  // until `n` are read, never the whole list; `more` says older items exist beyond them.
  async newest(path, n) {
    const items = [];
    let cursor = null;
    do {
      const sep = path.includes("?") ? "&" : "?";
      const limit = Math.min(500, n - items.length);
      const page = await this.api(path + sep + `order=desc&limit=${limit}` + (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""));
      items.push(...page.items);
      cursor = page.next_cursor;
    } while (cursor && items.length < n);
    items.more = Boolean(cursor);
    return items;
  },

  // What a list read by newest() shows: all of it, or the newest n and a word that there are more.
  shown(items) {
    const text = items.more ? `the newest ${this.num(items.length)} shown (more exist)` : `${this.num(items.length)} shown, newest first`;
    return this.el("p", { class: "muted" }, text);
  },

  // Streams followed whose first event has not been shown yet: the page is "ready" once each
  // has shown the live state (start() waits for them).
  waiting: new Set(),

  // Follow a Server-Sent Events route (fetch, so the key goes in a header as for every call):
  // onEvent(name, data) per event, until the stream ends (`end`, `closing`) or fails.
  follow(path, onEvent) {
    const token = {};
    this.waiting.add(token);
    return this._follow(path, (name, data) => { this.waiting.delete(token); onEvent(name, data); })
      .finally(() => this.waiting.delete(token));
  },

  async _follow(path, onEvent) {
    const r = await this.api(path, { raw: true });
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let name = "message";
        const data = [];
        for (const line of frame.split("\n")) {
          if (line.startsWith(":")) continue;
          const at = line.indexOf(":");
          const field = at < 0 ? line : line.slice(0, at);
          const v = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
          if (field === "event") name = v;
          else if (field === "data") data.push(v);
        }
        if (data.length) onEvent(name, JSON.parse(data.join("\n")));
      }
    }
  },

  // DOM helpers: el("td", {class: "x"}, "text", child, …). Text is always text, never HTML.
  el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    return this._fill(node, attrs, children);
  },
  svg(tag, attrs = {}, ...children) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    return this._fill(node, attrs, children);
  },
  _fill(node, attrs, children) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null) continue;
      if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, String(v));
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null) continue;
      node.append(c instanceof Node ? c : String(c));
    }
    return node;
  },

  num(x, digits = 3) {
    if (x === null || x === undefined) return "–";
    if (typeof x !== "number") return String(x);
    if (Number.isInteger(x)) return x.toLocaleString("en-US");
    const a = Math.abs(x);
    if (a !== 0 && (a >= 1e9 || a < 1e-3)) return x.toExponential(2);
    if (a >= 10 ** digits) return Math.round(x).toLocaleString("en-US");
    return x.toPrecision(digits).replace(/(\.\d*?)0+$/, "$1").replace(/\.$/, "");
  },
  when(ts) {
    return ts ? ts.replace("T", " ").replace(/\.\d+/, "").replace("+00:00", "Z") : "–";
  },

  // A table: columns are [header, row => cell]; each row's <tr> gets data-id = row.id.
  table(columns, rows, cls = "") {
    return this.el("table", { class: cls },
      this.el("thead", {}, this.el("tr", {}, columns.map(([h]) => this.el("th", {}, h)))),
      this.el("tbody", {}, rows.map(row =>
        this.el("tr", { "data-id": row.id }, columns.map(([, cell]) => this.el("td", {}, cell(row)))))));
  },

  // A bar chart: bars [{label, value, title}]; each <rect class="bar" data-value=…>.
  bars(bars, { width = 360, height = 140, title = "", unit = "" } = {}) {
    const pad = { l: 44, r: 8, t: 18, b: 30 };
    const w = width - pad.l - pad.r, h = height - pad.t - pad.b;
    const top = Math.max(1e-12, ...bars.map(b => b.value + (b.error || 0))) * (bars.length <= 4 ? 1.15 : 1);
    const step = w / Math.max(bars.length, 1);
    const y = v => pad.t + h - (v / top) * h;
    const svg = this.svg("svg", { class: "chart bars", viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
      "aria-label": title });
    svg.append(this.svg("text", { x: pad.l, y: 12, class: "title" }, title));
    svg.append(this.svg("line", { x1: pad.l, x2: pad.l + w, y1: pad.t + h, y2: pad.t + h, class: "axis" }));
    svg.append(this.svg("text", { x: pad.l - 4, y: pad.t + 4, class: "tick", "text-anchor": "end" }, this.num(top)));
    svg.append(this.svg("text", { x: pad.l - 4, y: pad.t + h, class: "tick", "text-anchor": "end" }, "0"));
    bars.forEach((b, i) => {
      const x = pad.l + i * step + step * 0.1;
      const v = Math.max(0, b.value);  // an estimate below zero (a debiased MSE can be) draws as 0
      svg.append(this.svg("rect", { class: "bar" + (b.cls ? " " + b.cls : ""), x, y: y(v),
        width: step * 0.8, height: pad.t + h - y(v), "data-value": b.value },
        this.svg("title", {}, b.title || `${b.label}: ${this.num(b.value)}${unit}`)));
      if (bars.length <= 4) {
        svg.append(this.svg("text", { x: x + step * 0.4, y: y(v) - 3, class: "tick", "text-anchor": "middle" }, this.num(b.value)));
      }
      if (b.error) {
        const cx = x + step * 0.4;
        svg.append(this.svg("line", { class: "whisker", x1: cx, x2: cx, y1: y(Math.max(0, b.value - b.error)), y2: y(b.value + b.error) }));
      }
      if (bars.length <= 12 || i % Math.ceil(bars.length / 12) === 0) {
        svg.append(this.svg("text", { x: x + step * 0.4, y: pad.t + h + 13, class: "tick", "text-anchor": "middle" }, b.label));
      }
    });
    return svg;
  },

  // A line chart: series [{name, points: [[x, y], …]}]; each point a <circle class="pt" data-series=…>.
  lines(series, { width = 360, height = 160, title = "", xlabel = "" } = {}) {
    const pad = { l: 52, r: 8, t: 18, b: 30 };
    const w = width - pad.l - pad.r, h = height - pad.t - pad.b;
    const all = series.flatMap(s => s.points).filter(p => Number.isFinite(p[1]));
    const svg = this.svg("svg", { class: "chart lines", viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
      "aria-label": title });
    svg.append(this.svg("text", { x: pad.l, y: 12, class: "title" }, title));
    if (!all.length) {
      svg.append(this.svg("text", { x: pad.l + w / 2, y: pad.t + h / 2, class: "tick", "text-anchor": "middle" }, "no points yet"));
      return svg;
    }
    const [x0, x1] = [Math.min(...all.map(p => p[0])), Math.max(...all.map(p => p[0]))];
    let [y0, y1] = [Math.min(...all.map(p => p[1])), Math.max(...all.map(p => p[1]))];
    if (y0 === y1) { y0 -= 1; y1 += 1; }
    const X = v => pad.l + (x1 === x0 ? w / 2 : ((v - x0) / (x1 - x0)) * w);
    const Y = v => pad.t + h - ((v - y0) / (y1 - y0)) * h;
    svg.append(this.svg("line", { x1: pad.l, x2: pad.l + w, y1: pad.t + h, y2: pad.t + h, class: "axis" }));
    svg.append(this.svg("line", { x1: pad.l, x2: pad.l, y1: pad.t, y2: pad.t + h, class: "axis" }));
    svg.append(this.svg("text", { x: pad.l - 4, y: pad.t + 4, class: "tick", "text-anchor": "end" }, this.num(y1)));
    svg.append(this.svg("text", { x: pad.l - 4, y: pad.t + h, class: "tick", "text-anchor": "end" }, this.num(y0)));
    svg.append(this.svg("text", { x: pad.l, y: pad.t + h + 13, class: "tick" }, this.num(x0)));
    svg.append(this.svg("text", { x: pad.l + w, y: pad.t + h + 13, class: "tick", "text-anchor": "end" }, this.num(x1)));
    svg.append(this.svg("text", { x: pad.l + w / 2, y: pad.t + h + 26, class: "tick", "text-anchor": "middle" }, xlabel));
    series.forEach((s, i) => {
      const pts = s.points.filter(p => Number.isFinite(p[1]));
      svg.append(this.svg("polyline", { class: `series s${i}`, "data-series": s.name,
        points: pts.map(p => `${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(" ") }));
      for (const p of pts) {
        svg.append(this.svg("circle", { class: `pt s${i}`, "data-series": s.name, cx: X(p[0]).toFixed(1),
          cy: Y(p[1]).toFixed(1), r: 2.5 }, this.svg("title", {}, `${s.name} ${this.num(p[0])}: ${this.num(p[1])}`)));
      }
      svg.append(this.svg("text", { x: pad.l + w - 4, y: pad.t + 10 + 12 * i, class: `legend s${i}`, "text-anchor": "end" }, s.name));
    });
    return svg;
  },

  // A section's body: replaced by what `render` returns, or by the error it threw.
  async section(id, render) {
    const host = document.getElementById(id);
    try {
      host.replaceChildren(await render());
      host.dataset.state = "ready";
    } catch (err) {
      host.dataset.state = "error";
      host.replaceChildren(this.el("p", { class: "error" }, err.message));
      if (!err.status) throw err;  // a bug of the page, not an answer of the API
    }
  },

  // The page: the key form, then `load()`; body[data-state] says "ready", "nokey" or "error"
  // (with #errors holding what went wrong) once everything rendered.
  async start(load) {
    const errors = document.getElementById("errors");
    const fail = msg => { document.body.dataset.state = "error"; errors.append(this.el("p", { class: "error" }, msg)); };
    window.addEventListener("error", e => fail(String(e.message)));
    window.addEventListener("unhandledrejection", e => fail(String(e.reason && e.reason.stack || e.reason)));
    const form = document.getElementById("keyform");
    form.addEventListener("submit", e => {
      e.preventDefault();
      sessionStorage.setItem(KEY, form.elements.key.value.trim());
      location.reload();
    });
    document.getElementById("forget").addEventListener("click", () => { sessionStorage.removeItem(KEY); location.reload(); });
    if (!this.key()) {
      document.body.dataset.state = "nokey";
      for (const host of document.querySelectorAll("div[data-state=loading]")) {
        host.replaceChildren(this.el("p", { class: "muted" }, "enter an API key above (or open this page with #key=…)"));
      }
      return;
    }
    form.elements.key.placeholder = "key kept for this tab";
    try {
      await load();
      // Each followed stream's first event (the current state) comes at once; wait for them in
      // short timer steps, so that a headless browser's virtual time runs the streams' tasks too.
      for (let i = 0; this.waiting.size && i < 500; i++) await new Promise(done => setTimeout(done, 20));
      if (document.body.dataset.state !== "error") document.body.dataset.state = "ready";
    } catch (err) {
      fail(err.stack || String(err));
    }
  },
};
