// agenthub view: the page. Routes by the URL's hash; every number comes from the JSON API.
"use strict";

const KINDS = {
  prompt: "prompt (mask 0)",
  env: "env (mask 0)",
  model: "model-sampled (mask 1, logprob on hover)",
  human: "typed (mask 0: not sampled, not trained on)",
};
let refreshTimer = null;
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
  "#7f7f7f", "#bcbd22", "#17becf"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

async function api(path) {
  const response = await fetch(path);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function fmt(value) {
  if (value === null || value === undefined) return "–";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(4);
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

function notices(list) {
  return (list || []).map((n) =>
    el("div", { class: "notice" },
      typeof n === "string" ? n : `${n.file}${n.line ? ` line ${n.line}` : ""}: ${n.message}`));
}

function show(...nodes) {
  const main = document.getElementById("main");
  main.replaceChildren(...nodes.flat(Infinity).filter((n) => n !== null && n !== undefined));
}

// --- Runs

async function runsPage() {
  const runs = await api("/api/runs");
  show(el("h2", {}, `Runs (${runs.length})`), runs.map(runCard));
  if (runs.some((r) => r.live && r.live.going) || runs.some((r) => r.indexing)) {
    refreshTimer = setTimeout(route, 5000);
  }
}

function runCard(run) {
  const live = run.live
    ? el("span", { class: "badge" + (run.live.going ? " going" : "") },
        run.live.going ? `going: updated ${run.live.updated_s_ago}s ago` : "finished")
    : null;
  const rows = [
    ["kind", run.kind], ["env", run.env], ["model", run.model], ["path", run.path],
    ["episodes", run.episodes.count + (run.indexing ? " (indexing…)" : "")],
    ["tasks", run.episodes.tasks], ["mean reward", run.episodes.mean_reward],
    ["errors", Object.keys(run.episodes.errors).length ? run.episodes.errors : "none"],
  ];
  if (run.summary) {
    for (const key of ["mean_reward", "mean_score", "pass_at_k", "errors", "mean_turns"]) {
      rows.push([`summary: ${key}`, run.summary[key]]);
    }
  }
  if (run.train) {
    rows.push(["steps logged", run.train.steps_logged]);
    for (const key of ["train/reward", "eval/reward", "rollout/staleness_mean"]) {
      if (key in run.train.last) rows.push([`last ${key}`, run.train.last[key]]);
    }
    if (run.train.checkpoint) rows.push(["checkpoint", run.train.checkpoint.tag]);
  }
  return el("div", { class: "card run", "data-run": run.id },
    el("h3", {}, el("span", { class: "run-name" }, run.name), " ",
      el("span", { class: "badge" }, run.kind), " ", live),
    notices(run.notices),
    el("table", { class: "run-facts" },
      rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", { "data-key": k }, fmt(v))))),
    el("p", {},
      el("a", { href: `#/episodes/${run.id}` }, "episodes"), " · ",
      el("a", { href: `#/curves?runs=${run.id}` }, "curves")),
    el("details", {}, el("summary", {}, "config"),
      el("pre", {}, JSON.stringify(run.config, null, 2))));
}

// --- Curves

async function curvesPage(params) {
  const runs = await api("/api/runs");
  const wanted = params.get("runs") ? params.get("runs").split(",").map(Number) : runs.map((r) => r.id);
  let data = await Promise.all(runs.map((r) => api(`/api/runs/${r.id}/curves`)));
  const keys = [...new Set(data.flatMap((d) => Object.keys(d.series)))].sort();
  const chosenKeys = params.get("keys") ? params.get("keys").split(",")
    : keys.filter((k) => /reward/.test(k)).slice(0, 4);
  const runBoxes = runs.map((r) => el("label", {},
    el("input", Object.assign({ type: "checkbox", class: "run-box", value: r.id },
      wanted.includes(r.id) ? { checked: "" } : {})), ` ${r.name}`));
  const keyBoxes = keys.map((k) => el("label", {},
    el("input", Object.assign({ type: "checkbox", class: "key-box", value: k },
      chosenKeys.includes(k) ? { checked: "" } : {})), ` ${k}`, el("br")));
  const charts = el("div", { id: "charts" });
  const redraw = () => {
    const runIds = [...document.querySelectorAll(".run-box:checked")].map((b) => Number(b.value));
    const picked = [...document.querySelectorAll(".key-box:checked")].map((b) => b.value);
    drawCharts(charts, data.filter((d) => runIds.includes(d.run)), picked);
  };
  show(el("h2", {}, "Curves"),
    el("div", { class: "picker" },
      el("div", {}, el("div", { class: "muted" }, "runs"), runBoxes),
      el("div", {}, el("div", { class: "muted" }, "series"), el("div", { class: "keys" }, keyBoxes))),
    keys.length ? null : el("p", {}, "No series in these runs yet."),
    charts);
  document.querySelectorAll(".run-box, .key-box").forEach((b) => b.addEventListener("change", redraw));
  redraw();
  if (runs.some((r) => r.live && r.live.going)) {
    // A run going: new points every 10 s, keeping the zoom (plotly's uirevision).
    const follow = async () => {
      data = await Promise.all(runs.map((r) => api(`/api/runs/${r.id}/curves`)));
      redraw();
      refreshTimer = setTimeout(follow, 10000);
    };
    refreshTimer = setTimeout(follow, 10000);
  }
}

function drawCharts(container, runData, keys) {
  const existing = new Map([...container.querySelectorAll(".chart")].map((d) => [d.dataset.key, d]));
  container.replaceChildren();
  for (const key of keys) {
    const traces = runData.filter((d) => d.series[key]).map((d) => ({
      x: d.series[key].x, y: d.series[key].y, name: d.name, type: "scatter",
      line: { color: PALETTE[d.run % PALETTE.length] }, // one colour per run on every chart
      mode: d.series[key].x.length > 400 ? "lines" : "lines+markers",
    }));
    if (!traces.length) continue;
    const div = existing.get(key) || el("div", { class: "chart", "data-key": key });
    container.append(div);
    const xlabel = runData.find((d) => d.series[key]).series[key].xlabel;
    Plotly.react(div, traces, {
      title: { text: key }, margin: { t: 40, r: 20, b: 45, l: 55 }, uirevision: key,
      xaxis: { title: { text: xlabel } }, hovermode: "closest", showlegend: true,
    }, { responsive: true, displaylogo: false });
  }
}

// --- Episodes table

const COLUMNS = ["index", "task_id", "sample", "reward", "score", "error", "turns", "tokens",
  "generated", "policy_version"];

async function episodesPage(runId, params) {
  const runs = await api("/api/runs");
  const query = new URLSearchParams(params);
  if (!query.get("limit")) query.set("limit", "50");
  const page = await api(`/api/runs/${runId}/episodes?${query}`);
  const offset = Number(query.get("offset") || 0), limit = Number(query.get("limit"));
  const go = (changes) => {
    const next = new URLSearchParams(query);
    for (const [k, v] of Object.entries(changes)) {
      if (v === "" || v === null) next.delete(k); else next.set(k, v);
    }
    location.hash = `#/episodes/${runId}?${next}`;
  };
  const sort = query.get("sort") || "index", desc = query.get("desc") === "1";
  const head = el("tr", {}, COLUMNS.map((c) => el("th", {
    class: "sortable" + (c === sort ? (desc ? " sorted-desc" : " sorted-asc") : ""),
    "data-col": c,
    onclick: () => go({ sort: c, desc: c === sort && !desc ? "1" : "0", offset: 0 }),
  }, c)));
  const body = page.rows.map((row) => el("tr", {
    class: "episode-row", "data-index": row.index,
    onclick: () => { location.hash = `#/episode/${runId}/${row.index}`; },
  }, COLUMNS.map((c) => el("td", {}, fmt(row[c])))));
  const filter = (name, placeholder) => el("input", {
    name, placeholder, value: query.get(name) || "",
    onchange: (e) => go({ [name]: e.target.value, offset: 0 }),
  });
  const errorSelect = el("select", { name: "error", onchange: (e) => go({ error: e.target.value, offset: 0 }) },
    [["", "any outcome"], ["none", "no error"], ["any", "any error"], ...page.errors.map((c) => [c, c])]
      .map(([v, label]) => el("option", Object.assign({ value: v },
        (query.get("error") || "") === v ? { selected: "" } : {}), label)));
  const runSelect = el("select", { onchange: (e) => { location.hash = `#/episodes/${e.target.value}`; } },
    runs.map((r) => el("option", Object.assign({ value: r.id }, r.id === runId ? { selected: "" } : {}), r.name)));
  show(el("h2", {}, "Episodes of ", runSelect),
    notices(page.notices),
    el("div", { class: "filters" },
      filter("task", "task contains"), errorSelect,
      filter("min_reward", "min reward"), filter("max_reward", "max reward")),
    el("p", { class: "muted", id: "counts" },
      `${page.matching} matching of ${page.indexed} episodes`,
      page.complete ? "" : " (still indexing the file…)"),
    el("table", { id: "episodes" }, el("thead", {}, head), el("tbody", {}, body)),
    el("p", {},
      offset > 0 ? el("button", { onclick: () => go({ offset: Math.max(0, offset - limit) }) }, "← previous") : null,
      ` ${offset + 1}–${offset + page.rows.length} `,
      offset + limit < page.matching ? el("button", { onclick: () => go({ offset: offset + limit }) }, "next →") : null));
  if (!page.complete) refreshTimer = setTimeout(route, 2000);
}

// --- One episode

function tokenView(ep, asText) {
  const box = el("div", { class: "tokens" });
  if (asText) {
    let i = 0;
    while (i < ep.kinds.length) {
      let j = i;
      while (j < ep.kinds.length && ep.kinds[j] === ep.kinds[i]) j++;
      box.append(el("span", { class: `seg k-${ep.kinds[i]}` }, ep.pieces.slice(i, j).join("")));
      i = j;
    }
    return box;
  }
  ep.pieces.forEach((piece, i) => {
    const sampled = ep.loss_mask[i] === 1;
    const title = `#${i} id ${ep.tokens[i]} · ${ep.kinds[i]} · mask ${ep.loss_mask[i]}` +
      (sampled ? ` · logprob ${ep.logprobs[i].toFixed(4)}` : "") +
      (ep.policy_versions ? ` · policy v${ep.policy_versions[i]}` : "");
    box.append(el("span", {
      class: `tok k-${ep.kinds[i]}`, "data-i": i, "data-mask": ep.loss_mask[i], title,
    }, piece.replace(/\n/g, "↵\n").replace(/\t/g, "→")));
  });
  return box;
}

function turnsTable(ep) {
  const text = (span) => (span ? ep.pieces.slice(span[0], span[1]).join("") : "–");
  return el("table", { class: "turns" },
    el("tr", {}, ["turn", "reply by", "reward", "reply", "env's answer"].map((h) => el("th", {}, h))),
    ep.turns.map((t, n) => el("tr", {},
      el("td", {}, n + 1), el("td", {}, t.kind), el("td", {}, fmt(t.reward)),
      el("td", {}, el("pre", {}, text(t.reply))), el("td", {}, el("pre", {}, text(t.answer))))));
}

function episodeBlock(ep, asText) {
  const counts = {};
  ep.kinds.forEach((k) => { counts[k] = (counts[k] || 0) + 1; });
  const facts = [["task", ep.task_id], ["env", ep.env], ["sample", ep.sample], ["reward", ep.reward],
    ["score", ep.score], ["terminated", ep.terminated], ["truncated", ep.truncated],
    ["turns", ep.num_turns], ["timings", ep.timings], ["extra_logs", ep.extra_logs],
    ["line", ep.line]];
  return el("div", { class: "episode", "data-run": ep.run, "data-index": ep.index },
    el("h3", {}, `${ep.run_name} · episode ${ep.index}`),
    notices(ep.notices),
    ep.error ? el("div", { class: "error" }, `${ep.error.cause}: ${ep.error.message}`) : null,
    el("table", {}, facts.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, fmt(v))))),
    el("p", { class: "legend" }, `${ep.tokens.length} tokens: `,
      Object.entries(KINDS).map(([k, label]) =>
        el("span", { class: `seg k-${k}` }, `${counts[k] || 0} ${label}`))),
    tokenView(ep, asText),
    el("h4", {}, "Turns"), turnsTable(ep),
    el("p", { class: "muted" }, "Per-step info and observations as the env returned them are not " +
      "recorded in trajectories; the env's answer above is its tokens as the model saw them."));
}

async function episodePage(runId, index, params) {
  const ep = await api(`/api/runs/${runId}/episodes/${index}`);
  const asText = params.get("text") === "1";
  const toggle = el("label", {}, el("input", Object.assign({
    type: "checkbox", id: "text-toggle",
    onchange: (e) => { location.hash = `#/episode/${runId}/${index}${e.target.checked ? "?text=1" : ""}`; },
  }, asText ? { checked: "" } : {})), " show text instead of tokens");
  show(el("p", {}, el("a", { href: `#/episodes/${runId}` }, "← episodes"), " · ", toggle,
    " · ", el("a", { href: `#/compare?a=${runId}&ai=${index}&task=${encodeURIComponent(ep.task_id)}` },
      "compare with another run")),
    episodeBlock(ep, asText));
}

// --- Compare

async function comparePage(params) {
  const runs = await api("/api/runs");
  if (!runs.length) return show(el("p", {}, "No runs."));
  const a = Number(params.get("a") ?? runs[0].id);
  const b = Number(params.get("b") ?? (runs.length > 1 ? runs[1].id : runs[0].id));
  const [ta, tb] = await Promise.all([api(`/api/runs/${a}/tasks`), api(`/api/runs/${b}/tasks`)]);
  const common = Object.keys(ta.tasks).filter((t) => t in tb.tasks);
  const task = params.get("task") && common.includes(params.get("task")) ? params.get("task") : common[0];
  const go = (changes) => {
    const next = new URLSearchParams(params);
    for (const [k, v] of Object.entries(changes)) next.set(k, v);
    location.hash = `#/compare?${next}`;
  };
  const pick = (name, options, value, label) => el("label", {}, label, " ",
    el("select", { name, onchange: (e) => go(name === "task" ? { task: e.target.value, ai: "", bi: "" } : { [name]: e.target.value }) },
      options.map(([v, text]) => el("option", Object.assign({ value: v }, String(v) === String(value) ? { selected: "" } : {}), text))));
  const runOptions = runs.map((r) => [r.id, r.name]);
  const header = el("div", { class: "picker" },
    pick("a", runOptions, a, "left run"), pick("b", runOptions, b, "right run"),
    pick("task", common.map((t) => [t, t]), task, "task"));
  if (!task) return show(el("h2", {}, "Compare"), header, el("p", {}, "These runs share no task."));
  const ai = Number(params.get("ai") || ta.tasks[task][0]);
  const bi = Number(params.get("bi") || tb.tasks[task][a === b && tb.tasks[task].length > 1 ? 1 : 0]);
  const sample = (name, indexes, value) => pick(name, indexes.map((i) => [i, `episode ${i}`]), value, "");
  const [ea, eb] = await Promise.all([api(`/api/runs/${a}/episodes/${ai}`), api(`/api/runs/${b}/episodes/${bi}`)]);
  show(el("h2", {}, "Compare"), header,
    el("div", { class: "compare" },
      el("div", { class: "side", id: "left" }, sample("ai", ta.tasks[task], ai), episodeBlock(ea, false)),
      el("div", { class: "side", id: "right" }, sample("bi", tb.tasks[task], bi), episodeBlock(eb, false))));
}

// --- Routing

async function route() {
  clearTimeout(refreshTimer);
  const [path, query] = (location.hash.slice(1) || "/").split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean);
  const page = parts[0] || "runs";
  document.querySelectorAll("header nav a").forEach((a) =>
    a.classList.toggle("active", a.dataset.page === (page === "episode" ? "episodes" : page)));
  try {
    if (page === "runs") await runsPage();
    else if (page === "curves") await curvesPage(params);
    else if (page === "episodes") await episodesPage(Number(parts[1] || 0), params);
    else if (page === "episode") await episodePage(Number(parts[1]), Number(parts[2]), params);
    else if (page === "compare") await comparePage(params);
    else show(el("p", {}, `No page ${path}.`));
  } catch (error) {
    show(el("div", { class: "error" }, String(error.message || error)));
  }
  document.body.dataset.ready = location.hash;
}

window.addEventListener("hashchange", route);
route();
