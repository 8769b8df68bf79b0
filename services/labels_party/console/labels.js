// The labels party's console: privacy domains with the spent-ε histogram of their ids, label
// sets, releases with their delivery followed live, the audit log. Data: the JSON API only.
"use strict";

const C = Console;
const FINAL = new Set(["delivered", "rejected", "failed"]);
const STAGES = ["accepted", "privatizing", "queued", "sending", "retrying", "delivered"];
const FOLLOWED = 20;  // the newest releases whose event streams the page follows

function domainCard(d, hist) {
  const n = hist.bins.length;
  const chart = C.bars(hist.bins.map((b, i) => ({
    label: C.num(b.low, 2), value: b.ids, cls: i === n - 1 && d.ids_exhausted ? "exhausted" : "",
    title: `${b.ids} ids spent ε in [${C.num(b.low)}, ${C.num(b.high)}${i === n - 1 ? "]" : ")"}`,
  })), { title: `ids by spent ε (of ${C.num(hist.epsilon_per_id)} per id)${hist.sampled ? `, sample of ${C.num(hist.ids_read)}` : ""}` });
  return C.el("div", { class: "card domain", "data-name": d.name },
    C.el("h3", {}, d.name),
    C.el("p", { class: "facts" },
      `id source ${d.id_source} · ε ${C.num(d.budget_per_id.epsilon)} per id · δ ${C.num(d.budget_per_id.delta)} · `,
      C.el("span", { class: "ids" }, `${C.num(d.ids)} ids`), " · ",
      C.el("span", { class: "exhausted", "data-count": d.ids_exhausted }, `${C.num(d.ids_exhausted)} exhausted`),
      ` · most spent ε ${C.num(d.max_spent_epsilon)}`),
    chart);
}

async function domains() {
  const items = await C.newest("v1/privacy-domains", 20);  // each histogram reads up to 10⁶ ids of the ledger
  if (!items.length) return C.el("p", { class: "muted" }, "no privacy domains");
  const hists = await Promise.all(items.map(d =>
    C.api(`v1/privacy-domains/${encodeURIComponent(d.id)}/spent-histogram?bins=10`)));
  return C.el("div", {}, C.shown(items),
    C.el("div", { class: "cards" }, items.map((d, i) => domainCard(d, hists[i]))));
}

async function labelSets() {
  const items = await C.newest("v1/label-sets", 500);
  if (!items.length) return C.el("p", { class: "muted" }, "no label sets");
  return C.el("div", {}, C.shown(items), C.table([
    ["name", s => s.name],
    ["id", s => C.el("span", { class: "id" }, s.id)],
    ["privacy domain", s => s.privacy_domain],
    ["type", s => s.label_type],
    ["ids · labeled · missing", s => `${C.num(s.counts.ids)} · ${C.num(s.counts.labeled)} · ${C.num(s.counts.missing)}`],
    ["ε spent", s => C.num(s.spent_epsilon)],
    ["labels", s => s.labels_deleted ? "deleted" : "kept"],
    ["created", s => C.when(s.created_at)],
  ], items, "label-sets"));
}

function releaseCells(r) {
  const at = Math.max(0, STAGES.indexOf(r.stage));
  return [
    C.el("span", { class: `state ${r.status}` }, r.status),
    C.el("span", { class: "stage" }, r.stage),
    C.el("progress", { max: STAGES.length - 1, value: r.status === "failed" || r.status === "rejected" ? 0 : at }),
    `${r.attempts}`,
    r.last_error || (typeof r.error === "string" ? r.error : r.error?.message) || "",
  ];
}

function releaseRow(r) {
  const cells = releaseCells(r).map(c => C.el("td", {}, c));
  return C.el("tr", { "data-id": r.id, "data-status": r.status, "data-events": 0 },
    C.el("td", {}, C.el("span", { class: "id" }, r.id)),
    C.el("td", { class: "id" }, r.label_set_id),
    C.el("td", {}, r.mechanism),
    C.el("td", {}, C.num(r.epsilon)),
    C.el("td", {}, C.num(r.row_count)),
    ...cells,
    C.el("td", {}, C.when(r.created_at)));
}

function follow(row, id) {
  // Live: each event of the release's stream redraws its state cells; `end` closes it.
  C.follow(`v1/releases/${encodeURIComponent(id)}/events`, (name, r) => {
    if (name !== "release" && name !== "end") return;
    row.dataset.events = Number(row.dataset.events) + 1;
    row.dataset.status = r.status;
    const tds = row.children;
    releaseCells(r).forEach((c, i) => tds[5 + i].replaceChildren(c));
    if (name === "end") row.dataset.followed = "end";
  }).catch(err => { row.dataset.followed = "error"; row.title = err.message; });
}

async function releases() {
  const items = await C.newest("v1/releases", 200);
  if (!items.length) return C.el("p", { class: "muted" }, "no releases");
  const head = ["release", "label set", "mechanism", "ε", "rows", "status", "stage", "progress", "attempts", "last error", "created"];
  const rows = items.map(releaseRow);
  rows.slice(0, FOLLOWED).forEach(row => follow(row, row.dataset.id));
  return C.el("div", {}, C.shown(items), C.el("table", { class: "releases" },
    C.el("thead", {}, C.el("tr", {}, head.map(h => C.el("th", {}, h)))),
    C.el("tbody", {}, rows)));
}

async function audit() {
  let items;
  try {
    items = await C.newest("v1/audit-events", 500);
  } catch (err) {
    if (err.status === 403) return C.el("p", { class: "muted" }, "the audit log needs a key with the admin scope");
    throw err;
  }
  if (!items.length) return C.el("p", { class: "muted" }, "no audit events");
  return C.el("div", {}, C.shown(items), C.table([
    ["when", e => C.when(e.created_at)],
    ["action", e => e.action],
    ["privacy domain", e => e.privacy_domain || "–"],
    ["key", e => C.el("span", { class: "id" }, e.key_id || "the service")],
    ["scope", e => e.scope || "–"],
    ["details", e => C.el("code", {}, JSON.stringify(e.details))],
  ], items, "audit"));
}

document.addEventListener("DOMContentLoaded", () => C.start(() => Promise.all([
  C.section("domains", domains),
  C.section("label-sets", labelSets),
  C.section("releases", releases),
  C.section("audit", audit),
])));
