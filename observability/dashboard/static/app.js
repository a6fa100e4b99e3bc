// The dashboard's single page: a hash route per view, one WebSocket that sends the view this tab
// shows whenever it changes (the server limits that to a few times a second).
import { h, append, svg, clear, fmt, duration } from "./dom.js";

const token = new URLSearchParams(location.search).get("token");
const page = document.getElementById("page");
const crumbs = document.getElementById("crumbs");
const connection = document.getElementById("connection");
let socket = null;
let current = null; // {route, mounted view}

function withToken(url) {
  if (!token) return url;
  return url + (url.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(token);
}

const enc = encodeURIComponent;

// A run that is not live: finished, or silent (its processes stopped sending their status
// without a final one: killed outright, or its machine gone).
function silentOrFinished(silentSince) {
  if (silentSince == null) return h("span", { class: "badge" }, "finished");
  const at = new Date(silentSince * 1000).toLocaleTimeString();
  return h("span", { class: "badge bad", title: "no status since " + at + ": the run may have been killed" }, "silent since " + at);
}

function parseRoute() {
  const [path, search] = location.hash.replace(/^#/, "").split("?");
  const parts = (path || "/").split("/").filter(Boolean).map(decodeURIComponent);
  const query = Object.fromEntries(new URLSearchParams(search || ""));
  if (parts[0] === "run" && parts[1]) {
    if (parts[2] === "episodes") return { view: "episodes", run: parts[1], query };
    if (parts[2] === "episode" && parts[3]) return { view: "episode", run: parts[1], episode: parts[3] };
    return { view: "run", run: parts[1] };
  }
  return { view: "runs" };
}

function setCrumbs(route) {
  clear(crumbs);
  const links = [h("a", { href: "#/" }, "runs")];
  if (route.run) links.push(" / ", h("a", { href: `#/run/${enc(route.run)}` }, route.run));
  if (route.view === "episodes" || route.view === "episode")
    links.push(" / ", h("a", { href: `#/run/${enc(route.run)}/episodes` }, "episodes"));
  if (route.episode) links.push(" / ", h("span", {}, route.episode));
  append(crumbs, links);
}

function show() {
  const route = parseRoute();
  setCrumbs(route);
  clear(page);
  const views = { runs: RunsView, run: RunView, episodes: EpisodesView, episode: EpisodeView };
  current = { route, view: new views[route.view](route) };
  send(route);
}

function send(route) {
  if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(route));
}

function connect() {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  socket = new WebSocket(withToken(`${proto}//${location.host}/ws`));
  socket.onopen = () => {
    connection.textContent = "live";
    connection.className = "badge ok";
    if (current) send(current.route);
  };
  socket.onclose = () => {
    connection.textContent = "disconnected — retrying";
    connection.className = "badge bad";
    setTimeout(connect, 1000);
  };
  socket.onmessage = (event) => {
    const data = JSON.parse(event.data);
    if (!current) return;
    if (data.type === "missing") {
      current.view.missing?.(data);
      return;
    }
    if (data.type === "error") {
      current.view.error?.(data.error);
      return;
    }
    if (data.type === current.route.view) current.view.update(data);
  };
}

async function control(run, command, episode = "", reason = "") {
  const response = await fetch(withToken(`api/runs/${enc(run)}/control`), {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ command, episode, reason }),
  });
  return response.ok ? (await response.json()) : { ok: false, error: await response.text() };
}

function table(header, rows, attrs = {}) {
  return h("table", attrs, h("thead", {}, h("tr", {}, header.map((c) => h("th", {}, c)))), h("tbody", {}, rows));
}

function outcomeBadge(outcome) {
  return h("span", { class: `outcome outcome-${outcome}` }, outcome);
}

// Human players' seats of an episode (docs/humans.md): whom the game waits for, and links to
// join (each opens one role of this episode in a page of its own).
function seatLinks(seats) {
  return (seats || []).filter((s) => !s.finished).map((s) => [" ", h("a", {
    class: s.waiting ? "seat seat-waiting" : "seat", href: s.link, target: "_blank", rel: "noopener",
    dataset: { role: s.role },
  }, s.waiting ? `waiting for ${s.role}` : `${s.role} seat`)]);
}

function chart(points, key, label, unit) {
  const width = 420, height = 110, pad = 4;
  const values = points.map((p) => p[key] || 0);
  const max = Math.max(1e-9, ...values);
  const box = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img" });
  if (values.length > 1) {
    const step = (width - 2 * pad) / (values.length - 1);
    const coords = values.map((v, i) => `${(pad + i * step).toFixed(1)},${(height - pad - (v / max) * (height - 2 * pad)).toFixed(1)}`);
    box.append(svg("polyline", { points: coords.join(" "), fill: "none", stroke: "#3b6fd4", "stroke-width": 2 }));
  }
  const last = values.length ? values[values.length - 1] : null;
  return h("figure", {}, box, h("figcaption", {}, `${label}: ${fmt(last)} ${unit} (max ${fmt(max)})`));
}

class RunsView {
  constructor() {
    this.body = h("div", {}, h("p", { class: "muted" }, "waiting for runs…"));
    append(page, [h("h1", {}, "Runs"), this.body]);
  }
  update(data) {
    const rows = data.runs.map((r) =>
      h("tr", { dataset: { run: r.run } },
        h("td", {}, h("a", { href: `#/run/${enc(r.run)}` }, r.name)),
        h("td", {}, r.run),
        h("td", {}, r.live ? h("span", { class: "badge ok" }, r.paused ? "live, paused" : "live") : silentOrFinished(r.silent_since)),
        h("td", { class: "num run-finished" }, String(r.finished)),
        h("td", { class: "num" }, String(r.planned || r.episodes)),
        h("td", { class: "num" }, String(r.running)),
        h("td", {}, Object.entries(r.done).map(([k, v]) => h("span", { class: `outcome outcome-${k}` }, `${k} ${v} `)))));
    clear(this.body);
    append(this.body, data.runs.length ? table(["run", "id", "state", "finished", "planned", "running", "outcomes"], rows, { id: "runs" }) : h("p", { class: "muted" }, "no runs yet"));
  }
}

class RunView {
  constructor(route) {
    this.route = route;
    this.title = h("h1", {}, route.run);
    this.progress = h("div", { class: "progress" });
    this.message = h("span", { class: "muted", id: "control-result" });
    const pause = h("button", { id: "pause", onclick: async () => this.say(await control(route.run, "pause")) }, "Pause");
    const resume = h("button", { id: "resume", onclick: async () => this.say(await control(route.run, "resume")) }, "Resume");
    this.body = h("div", {});
    append(page, [this.title, this.progress, h("p", { class: "controls" }, pause, " ", resume, " ",
      h("a", { href: `#/run/${enc(route.run)}/episodes`, id: "episodes-link" }, "episodes →"), " ", this.message), this.body]);
  }
  say(result) {
    this.message.textContent = result.ok ? `${result.command}: done (${result.via})` : `failed: ${result.error}`;
  }
  missing() { clear(this.body); append(this.body, h("p", { class: "muted" }, "no such run (yet)")); }
  update(d) {
    const s = d.status;
    this.title.textContent = `${d.name} `;
    this.title.append(d.live ? h("span", { class: "badge ok" }, s.paused ? "paused" : "live") : silentOrFinished(d.silent_since));
    const planned = s.planned || s.finished + s.running;
    const share = planned ? (100 * s.finished) / planned : 0;
    clear(this.progress);
    append(this.progress, [
      h("div", { class: "bar" }, h("div", { class: "fill", style: `width:${share.toFixed(1)}%` })),
      h("span", { id: "run-finished" }, String(s.finished)), ` of ${planned} episodes · running `,
      h("span", { id: "run-running" }, String(s.running)),
      ` · ${fmt(s.turns_per_s)} turns/s · ${fmt(s.requests_per_s)} requests/s · ETA ${duration(s.eta_s)}`,
      s.cost_usd !== null && s.cost_usd !== undefined ? ` · $${fmt(s.cost_usd, 2)}` : "",
      s.paused ? h("strong", { id: "paused-flag" }, " · paused") : "",
    ]);
    clear(this.body);
    const outcomes = h("p", { id: "outcomes" }, Object.entries(d.outcomes).map(([k, v]) =>
      h("a", { href: `#/run/${enc(d.run)}/episodes?outcome=${enc(k)}`, class: `outcome outcome-${k}` }, `${k} ${v}  `)));
    const charts = h("div", { class: "charts" },
      chart(d.history, "episodes_per_s", "episodes/s", ""),
      chart(d.history, "turns_per_s", "turns/s", ""),
      chart(d.history, "lag_p99_ms", "event-loop lag p99", "ms"));
    const pairings = table(["game", "pairing", "episodes", "success %", "main score", "95 % interval"],
      d.pairings.map((p) => h("tr", {},
        h("td", {}, p.game),
        h("td", {}, h("a", { href: `#/run/${enc(d.run)}/episodes?game=${enc(p.game)}&pairing=${enc(p.pairing)}` }, p.pairing)),
        h("td", { class: "num" }, String(p.episodes)),
        h("td", { class: "num" }, fmt(p.success_pct)),
        h("td", { class: "num" }, fmt(p.main)),
        h("td", { class: "num" }, p.low === null ? "–" : `${fmt(p.low)} – ${fmt(p.high)}`))), { id: "pairings" });
    const endpoints = d.endpoints.length ? table(["process", "model", "url", "limit", "in flight", "p50 s", "p99 s", "requests", "429s", "retries", "errors"],
      d.endpoints.map((e) => h("tr", {}, [e.process, e.model, e.url, e.limit, e.in_flight, fmt(e.latency_p50_s, 2), fmt(e.latency_p99_s, 2), e.requests, e.rate_limited, e.retries, e.errors].map((v) => h("td", {}, v ?? "–"))))) : h("p", { class: "muted" }, "no model endpoints");
    const processes = table(["process", "pid", "running", "turns/s", "lag p50 ms", "lag p99 ms", "paused"],
      d.processes.map((p) => h("tr", {}, [p.process, p.pid, p.running, fmt(p.turns_per_s), fmt(p.loop_lag_ms.p50), fmt(p.loop_lag_ms.p99), p.paused ? "yes" : ""].map((v) => h("td", {}, v ?? "–")))));
    const leaks = d.leaks.count ? h("div", {}, h("p", { class: "leak" }, `${d.leaks.count} disclosures of private facts`),
      table(["episode", "from", "to", "fact", "how", "match"], d.leaks.latest.map((l) => h("tr", {},
        h("td", {}, h("a", { href: `#/run/${enc(d.run)}/episode/${enc(l.episode)}` }, l.episode)),
        h("td", {}, l.from_role), h("td", {}, l.to_role), h("td", {}, l.fact), h("td", {}, l.kind), h("td", {}, l.match))))) : h("p", { class: "muted", id: "leaks" }, "no disclosures of private facts");
    append(this.body, [h("h2", {}, "Outcomes"), outcomes, charts, h("h2", {}, "Pairings"), pairings,
      h("h2", {}, "Endpoints"), endpoints, h("h2", {}, "Processes"), processes, h("h2", {}, "Leaks"), leaks]);
  }
}

class EpisodesView {
  constructor(route) {
    this.route = route;
    this.query = { sort: "started_at", desc: "1", offset: 0, limit: 50, ...route.query };
    route.query = { ...this.query }; // what the socket asks for, defaults included
    this.filters = {};
    const filter = (name) => {
      const select = h("select", { id: `filter-${name}`, onchange: () => { this.query[name] = select.value; this.query.offset = 0; this.push(); } }, h("option", { value: "" }, `every ${name}`));
      this.filters[name] = select;
      return h("label", {}, `${name} `, select);
    };
    const sort = h("select", { id: "sort", onchange: () => { this.query.sort = sort.value; this.push(); } },
      ["started_at", "episode", "game", "pairing", "outcome", "main_score", "turns", "duration_s"].map((s) => h("option", { value: s }, s)));
    sort.value = this.query.sort;
    const desc = h("input", { type: "checkbox", id: "desc", onchange: () => { this.query.desc = desc.checked ? "1" : "0"; this.push(); } });
    desc.checked = this.query.desc === "1";
    this.total = h("span", { id: "episodes-total" }, "…");
    this.list = h("div", {});
    this.pager = h("p", {});
    append(page, [h("h1", {}, "Episodes"), h("p", { class: "filters" }, filter("game"), filter("pairing"), filter("outcome"),
      h("label", {}, "sort ", sort), h("label", {}, desc, " descending")), h("p", {}, this.total, " episodes match"), this.list, this.pager]);
  }
  push() {
    const params = new URLSearchParams(Object.entries(this.query).filter(([, v]) => v !== "" && v !== undefined));
    history.replaceState(null, "", `#/run/${enc(this.route.run)}/episodes?${params}`);
    this.route.query = { ...this.query };
    send({ view: "episodes", run: this.route.run, query: this.query });
  }
  error(text) { this.total.textContent = text; }
  update(d) {
    for (const [name, choices] of [["game", d.games], ["pairing", d.pairings], ["outcome", Object.keys(d.outcomes)]]) {
      const select = this.filters[name];
      const want = this.query[name] || "";
      clear(select);
      select.append(h("option", { value: "" }, `every ${name}`));
      for (const c of new Set([...choices, ...(want ? [want] : [])])) select.append(h("option", { value: c }, name === "outcome" ? `${c} (${d.outcomes[c] ?? 0})` : c));
      select.value = want;
    }
    this.total.textContent = String(d.total);
    const rows = d.rows.map((r) => h("tr", { class: "episode-row", dataset: { outcome: r.outcome, game: r.game } },
      h("td", {}, h("a", { href: `#/run/${enc(this.route.run)}/episode/${enc(r.episode)}` }, r.episode)),
      h("td", {}, r.game), h("td", {}, r.pairing), h("td", {}, outcomeBadge(r.outcome), seatLinks((d.seats || {})[r.episode])),
      h("td", { class: "num" }, fmt(r.main_score)), h("td", { class: "num" }, String(r.turns)),
      h("td", { class: "num" }, r.duration_s === null ? "–" : fmt(r.duration_s, 2)),
      h("td", {}, r.leaks ? h("span", { class: "leak" }, `${r.leaks} leak${r.leaks > 1 ? "s" : ""}`) : "")));
    clear(this.list);
    append(this.list, table(["episode", "game", "pairing", "outcome", "main", "turns", "seconds", "leaks"], rows, { id: "episodes" }));
    clear(this.pager);
    const offset = Number(d.offset), limit = Number(d.limit);
    const go = (to) => { this.query.offset = to; this.push(); };
    append(this.pager, [
      h("button", { disabled: offset <= 0, onclick: () => go(Math.max(0, offset - limit)) }, "← previous"),
      ` ${d.total ? offset + 1 : 0}–${Math.min(offset + limit, d.total)} of ${d.total} `,
      h("button", { disabled: offset + limit >= d.total, onclick: () => go(offset + limit) }, "next →"),
    ]);
  }
}

class EpisodeView {
  constructor(route) {
    this.route = route;
    this.items = 0;
    this.states = [];
    this.follow = true;
    this.roles = null;
    this.title = h("h1", {}, route.episode);
    this.meta = h("p", { id: "episode-meta" });
    this.message = h("span", { class: "muted", id: "control-result" });
    this.abort = h("button", { id: "abort", onclick: async () => {
      const result = await control(route.run, "abort", route.episode, "from the episode page");
      this.message.textContent = result.ok ? `abort: sent (${result.via})` : `failed: ${result.error}`;
    } }, "Abort episode");
    this.slider = h("input", { type: "range", id: "timeline", min: 0, max: 0, value: 0, oninput: () => {
      this.follow = Number(this.slider.value) === this.states.length - 1;
      this.showState(Number(this.slider.value));
    } });
    this.stateLabel = h("span", { id: "state-label", class: "muted" }, "no state yet");
    this.stateImages = h("div", { id: "state-images" });
    this.stateText = h("pre", { id: "state-text" });
    this.scores = h("div", { id: "scores" });
    this.head = h("tr", {});
    this.rows = h("tbody", {});
    append(page, [this.title, this.meta, h("p", { class: "controls" }, this.abort, " ", this.message),
      h("section", { class: "state" }, h("h2", {}, "State"), h("p", {}, this.slider, " ", this.stateLabel), this.stateImages, this.stateText),
      this.scores,
      h("h2", {}, "Transcript"), h("table", { class: "transcript", id: "transcript" }, h("thead", {}, this.head), this.rows)]);
  }
  missing() { this.meta.textContent = "no such episode (yet)"; }
  setColumns(roles) {
    const columns = ["gm", ...roles.filter((r) => r !== "gm")];
    if (this.roles && this.roles.join() === columns.join()) return;
    this.roles = columns;
    clear(this.head);
    append(this.head, [h("th", { class: "n" }, "#"), columns.map((c) => h("th", {}, c === "gm" ? "game master" : c))]);
    for (const row of [...this.rows.children]) row.remove();
    this.items = 0;
  }
  update(d) {
    this.setColumns(d.roles || []);
    this.title.textContent = `${d.episode} `;
    this.title.append(outcomeBadge(d.outcome));
    clear(this.meta);
    append(this.meta, [d.game, d.pairing ? ` · ${d.pairing}` : "", d.seed !== undefined && d.seed !== null ? ` · seed ${d.seed}` : "",
      d.reason ? ` · ${d.reason}` : "", ` · ${d.source === "live" ? "live from the bus" : "from the run folder"}`]);
    this.abort.disabled = !d.live;
    if (d.items_from < this.items) {
      [...this.rows.children].slice(d.items_from).forEach((row) => row.remove());
      this.items = d.items_from;
    }
    for (const item of d.items) this.addItem(item);
    if (d.states_from < this.states.length) this.states = this.states.slice(0, d.states_from);
    this.states.push(...d.states);
    if (this.states.length) {
      this.slider.max = String(this.states.length - 1);
      if (this.follow) {
        this.slider.value = String(this.states.length - 1);
        this.showState(this.states.length - 1);
      }
    }
    clear(this.scores);
    const scores = Object.entries(d.scores || {});
    if (scores.length || d.main_score !== null && d.main_score !== undefined)
      append(this.scores, [h("h2", {}, d.live ? "Scores so far" : "Scores"), table(["score", "value"],
        [["main", d.main_score], ...scores].map(([k, v]) => h("tr", {}, h("td", {}, k), h("td", { class: "num" }, fmt(v, 2)))), { id: "score-table" })]);
  }
  addItem(item) {
    this.items += 1;
    const classes = ["msg", `kind-${item.kind}`, `vis-${item.visibility}`];
    if (item.disclosed) classes.push("disclosed");
    const body = h("div", { class: classes.join(" "), title: item.disclosed ? `discloses: ${item.disclosed.join("; ")}` : null },
      h("div", { class: "who" }, item.who, " ", h("span", { class: `badge vis vis-${item.visibility}` }, item.visibility),
        item.disclosed ? h("span", { class: "badge leak" }, `discloses ${item.disclosed.join("; ")}`) : null),
      item.system ? h("details", {}, h("summary", {}, "system prompt"), h("div", { class: "text" }, item.system)) : null,
      item.parts.map((p) => p.image ? h("img", { class: "stim", src: withToken(`images/${p.image}`), alt: `image ${p.image.slice(0, 12)}` }) : h("div", { class: "text" }, p.text)),
      item.data ? h("details", {}, h("summary", {}, "data"), h("code", {}, item.data)) : null);
    const column = this.roles.includes(item.column) ? item.column : "gm";
    append(this.rows, h("tr", { class: "item" }, h("td", { class: "n" }, String(this.items)),
      this.roles.map((c) => h("td", {}, c === column ? body : null))));
  }
  showState(i) {
    const s = this.states[i];
    if (!s) return;
    this.stateLabel.textContent = `state ${i + 1} of ${this.states.length} · turn ${s.turn}${s.final ? " · final" : ""}` +
      (s.progress !== null && s.progress !== undefined ? ` · progress ${fmt(100 * s.progress, 0)} %` : "");
    this.stateLabel.append(" ", h("span", { class: `badge vis vis-${s.visibility}` }, s.visibility));
    clear(this.stateImages);
    for (const sha of s.images) this.stateImages.append(h("img", { class: "state-image", src: withToken(`images/${sha}`), alt: `state ${s.step}` }));
    this.stateText.textContent = s.text;
  }
}

window.addEventListener("hashchange", show);
show();
connect();
