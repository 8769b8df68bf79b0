// The features party's console: the inbox of releases received, trainings with their loss
// curves followed live, model cards with their plots, exports and predictions. Data: the JSON API.
"use strict";

const C = Console;
const FOLLOWED = 10;  // the newest trainings whose event streams the page follows

async function inbox() {
  const items = await C.newest("v1/releases", 200);
  if (!items.length) return C.el("p", { class: "muted" }, "no release received yet");
  return C.el("div", {}, C.shown(items), C.table([
    ["release", r => C.el("span", { class: "id" }, r.id)],
    ["label set", r => C.el("span", { class: "id" }, r.label_set_id)],
    ["feature table", r => r.feature_table || "–"],
    ["mechanism", r => r.mechanism],
    ["ε", r => C.num(r.accounting.total_epsilon_micro / 1e6)],
    ["rows", r => C.num(r.row_count)],
    ["received", r => C.when(r.received_at)],
    ["signed by", r => C.el("span", { class: "id" }, r.signing_key_id || "–")],
  ], items, "inbox"));
}

function lossSeries(history) {
  return [
    { name: "train loss", points: history.map(h => [h.epoch, h.train_loss]) },
    { name: "validation loss", points: history.map(h => [h.epoch, h.val_loss]) },
  ];
}

function trainingCard(t) {
  const history = [...t.history];
  const chart = C.el("div", { class: "curve" });
  const state = C.el("span", { class: `state ${t.status}` }, t.status);
  const bar = C.el("progress", { max: 1, value: t.progress.fraction });
  const facts = C.el("span", {}, "");
  const card = C.el("div", { class: "card training", "data-id": t.id, "data-status": t.status, "data-events": 0 },
    C.el("h3", { class: "id" }, t.id),
    C.el("p", { class: "facts" }, state, " ", bar, " ", facts),
    chart);
  const draw = (s) => {
    state.className = `state ${s.status}`;
    state.textContent = s.status;
    bar.value = s.progress.fraction;
    card.dataset.status = s.status;
    facts.textContent = `epoch ${s.progress.epoch}/${s.progress.epochs} · release ${s.release_id} · ` +
      (s.model_id ? `model ${s.model_id}` : s.queue_position ? `queue position ${s.queue_position}` : s.device || "") +
      (s.error ? ` · ${s.error.code}: ${s.error.message}` : "");
    chart.replaceChildren(C.lines(lossSeries(history), { title: "loss per epoch (privatized labels)", xlabel: "epoch" }));
  };
  draw(t);
  card.follow = () => C.follow(`v1/trainings/${encodeURIComponent(t.id)}/events`, (name, s) => {
    if (name !== "training" && name !== "end") return;
    card.dataset.events = Number(card.dataset.events) + 1;
    const last = s.last_epoch;
    if (last && !history.some(h => h.epoch === last.epoch)) history.push(last);  // the curve grows live
    draw(s);
    if (name === "end") card.dataset.followed = "end";
  }).catch(err => { card.dataset.followed = "error"; card.title = err.message; });
  return card;
}

async function trainings() {
  const items = await C.newest("v1/trainings", 50);
  if (!items.length) return C.el("p", { class: "muted" }, "no trainings");
  const cards = items.map(trainingCard);
  cards.slice(0, FOLLOWED).forEach(c => c.follow());
  return C.el("div", {}, C.shown(items), C.el("div", { class: "cards" }, cards));
}

function fitPlot(m) {
  const t = m.metrics && m.metrics.true_label;
  if (!t) return null;
  return C.bars([
    { label: "model", value: t.test_mse, error: t.test_mse_se, title: `test MSE ${C.num(t.test_mse)} ± ${C.num(t.test_mse_se)}` },
    { label: "private mean", value: t.baseline_mse, error: t.baseline_mse_se, cls: "baseline",
      title: `baseline MSE ${C.num(t.baseline_mse)} ± ${C.num(t.baseline_mse_se)}` },
  ], { width: 300, title: "test MSE on true labels (± SE)" + (t.test_r2 === null || t.test_r2 === undefined ? "" :
    ` · R² ${C.num(t.test_r2)} ± ${C.num(t.test_r2_se)}`) });
}

async function download(m, format, out) {
  out.textContent = "exporting…";
  const r = await C.api(`v1/models/${encodeURIComponent(m.id)}/export?format=${format}`, { raw: true });
  const blob = await r.blob();
  const name = `${m.id}.${format === "onnx" ? "onnx" : "pt"}`;
  const a = C.el("a", { href: URL.createObjectURL(blob), download: name, class: "export", "data-bytes": blob.size },
    `${name} (${C.num(blob.size)} bytes)`);
  out.replaceChildren(a);
  return a;
}

async function predict(m, text, out) {
  const ids = text.split(/[\s,]+/).filter(Boolean);
  if (!ids.length) { out.textContent = "give ids of the model's feature table"; return; }
  out.textContent = "predicting…";
  try {
    const body = await C.api(`v1/models/${encodeURIComponent(m.id)}/predict`, { json: { ids } });
    out.replaceChildren(C.el("table", { class: "predictions" },
      C.el("tbody", {}, ids.map((id, i) => C.el("tr", { "data-id": id },
        C.el("td", { class: "id" }, id), C.el("td", { class: "prediction" }, C.num(body.predictions[i], 5)))))));
  } catch (err) {
    if (!err.status) throw err;
    out.replaceChildren(C.el("p", { class: "error" }, err.message));
  }
}

function modelCard(m, training) {
  const exportOut = C.el("span", { class: "export-out" });
  const predictOut = C.el("div", { class: "predict-out" });
  const ids = C.el("textarea", { rows: 2, placeholder: "ids of the feature table, comma or space separated" });
  const fail = err => { exportOut.textContent = err.message; };
  const card = C.el("div", { class: "card model", "data-id": m.id },
    C.el("h3", { class: "id" }, m.id),
    C.el("p", { class: "facts" },
      `${m.task}${m.classes ? ` (${m.classes.length} classes)` : ""} · ${m.mechanism} at ε ${C.num(m.epsilon)} · ` +
      `${C.num(m.n_train)} train / ${C.num(m.n_validation)} validation rows · ${m.architecture} · ${m.device}`),
    C.el("p", { class: "facts" }, `feature table ${m.feature_table} · release ${m.release_id} · ${C.when(m.created_at)}`),
    C.el("div", {},
      training ? C.lines(lossSeries(training.history), { title: "loss per epoch (privatized labels)", xlabel: "epoch" }) : null,
      fitPlot(m)),
    C.el("p", { class: "muted" }, m.metrics_note || ""),
    C.el("p", {}, "export: ",
      C.el("button", { type: "button", onclick: () => download(m, "onnx", exportOut).catch(fail) }, "ONNX"), " ",
      C.el("button", { type: "button", onclick: () => download(m, "torchscript", exportOut).catch(fail) }, "TorchScript"),
      " ", exportOut),
    C.el("div", {}, ids,
      C.el("button", { type: "button", onclick: () => predict(m, ids.value, predictOut) }, "Predict"),
      predictOut));
  // A link may ask for one model's export or predictions at once: #export=mdl_…, #predict=mdl_…&ids=a,b
  if (C.params.get("export") === m.id) download(m, "onnx", exportOut).catch(fail);
  if (C.params.get("predict") === m.id) {
    ids.value = C.params.get("ids") || "";
    card.predicted = predict(m, ids.value, predictOut);
  }
  return card;
}

async function models() {
  const newest = await C.newest("v1/models", 30);
  if (!newest.length) return C.el("p", { class: "muted" }, "no models");
  // Each card whole (a list item leaves out the true-label fit), with its training's history.
  const items = await Promise.all(newest.map(m => C.api(`v1/models/${encodeURIComponent(m.id)}`)));
  const runs = await Promise.all(items.map(m =>
    C.api(`v1/trainings/${encodeURIComponent(m.training_id)}`).catch(err => { if (!err.status) throw err; return null; })));
  const cards = items.map((m, i) => modelCard(m, runs[i]));
  await Promise.all(cards.map(c => c.predicted));
  return C.el("div", {}, C.shown(newest), C.el("div", { class: "cards" }, cards));
}

document.addEventListener("DOMContentLoaded", () => C.start(() => Promise.all([
  C.section("inbox", inbox),
  C.section("trainings", trainings),
  C.section("models", models),
])));
