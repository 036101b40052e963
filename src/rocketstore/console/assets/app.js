"use strict";
// The console's page: plain JS, no library. Every figure comes from the console's /api/.

const main = document.getElementById("main");
const notice = document.getElementById("notice");
const state = { view: "cluster", login: false, user: null, resend: "", chartTimer: null };

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, "");
    else if (v !== false && v !== null && v !== undefined) el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function show(message, ok) {
  notice.textContent = message;
  notice.className = ok ? "ok" : "";
  notice.hidden = !message;
}

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Console": "1" },
    body: JSON.stringify(body),
  };
  const r = await fetch(path, init);
  let doc = {};
  try { doc = await r.json(); } catch (e) { doc = { error: r.statusText }; }
  if (r.status === 401) { askLogin(); throw new Error(doc.error || "sign in first"); }
  if (!r.ok) throw new Error(doc.error || r.statusText);
  return doc;
}

function time(ms) { return ms > 0 ? new Date(ms).toLocaleString() : "-"; }
function num(v) { return h("td", { class: "num" }, v); }
function table(headers, rows) {
  const body = rows instanceof HTMLTableSectionElement ? rows : h("tbody", {}, rows);
  return h("table", {}, h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))), body);
}
function input(name, attrs) { return h("input", Object.assign({ name }, attrs || {})); }
function label(text, el) { return h("label", {}, text, el); }

async function guarded(fn) {
  try { await fn(); } catch (e) { show(e.message); }
}

// ---- cluster -------------------------------------------------------------------------------
async function viewCluster() {
  const doc = await api("/api/cluster");
  const rows = doc.brokers.map((b) => h("tr", {},
    h("td", {}, b.cluster), h("td", {}, b.brokerName), num(b.brokerId), h("td", {}, b.address),
    h("td", {}, b.role), num(b.epoch !== undefined ? b.epoch : "-"),
    h("td", {}, b.syncStateSet !== undefined ? b.syncStateSet || "-" : "-"),
    h("td", {}, b.error ? h("span", { class: "bad" }, b.error) : b.version),
    num(b.putTps !== undefined ? b.putTps.toFixed(2) : "-"),
    num(b.getTps !== undefined ? b.getTps.toFixed(2) : "-"),
    h("td", {}, b.disk || "-"),
    num(b.haLagBytes !== undefined ? b.haLagBytes : "-"),
    num(b.msgPutTotalTodayNow !== undefined ? b.msgPutTotalTodayNow : "-")));
  main.replaceChildren(h("h2", {}, "Brokers"),
    table(["Cluster", "Broker", "ID", "Address", "Role", "Epoch", "SyncStateSet", "Version",
      "Put TPS", "Get TPS",
      "Disk", "HA lag (bytes)", "Messages put"], rows),
    h("p", { class: "muted" }, "Read at " + time(doc.time)));
}

// ---- topics --------------------------------------------------------------------------------
async function viewTopics() {
  const doc = await api("/api/topics");
  const showSystem = h("input", { type: "checkbox", id: "show-system" });
  const list = h("tbody");
  const detail = h("div", { id: "topic-detail" });
  const fill = () => {
    list.replaceChildren(...doc.topics.filter((t) => showSystem.checked || t.kind === "normal")
      .map((t) => h("tr", { class: "clickable", "data-topic": t.topic,
        onclick: () => guarded(() => topicDetail(t.topic, detail)) },
      h("td", {}, t.topic), h("td", {}, t.kind))));
  };
  showSystem.addEventListener("change", fill);
  fill();
  const form = h("form", { class: "inline", id: "create-topic" },
    label("Topic", input("topic", { required: true, maxlength: 127 })),
    label("Read queues", input("readQueueNums", { type: "number", value: 4, min: 1, max: 1024 })),
    label("Write queues", input("writeQueueNums", { type: "number", value: 4, min: 1, max: 1024 })),
    label("Permission", h("select", { name: "perm" }, h("option", { value: 6 }, "RW"),
      h("option", { value: 4 }, "R"), h("option", { value: 2 }, "W"))),
    h("button", { type: "submit" }, "Create topic"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    guarded(async () => {
      const r = await api("/api/topic/create", {
        topic: f.get("topic"), readQueueNums: Number(f.get("readQueueNums")),
        writeQueueNums: Number(f.get("writeQueueNums")), perm: Number(f.get("perm")) });
      show(`Topic ${r.topic} created on ${r.brokers.join(", ")}`, true);
      await viewTopics();
      await topicDetail(r.topic, document.getElementById("topic-detail"));
    });
  });
  main.replaceChildren(h("h2", {}, "Topics"), form,
    h("label", {}, showSystem, " show retry, DLQ and system topics"),
    table(["Topic", "Kind"], list), detail);
}

async function topicDetail(topic, into) {
  const doc = await api("/api/topic?topic=" + encodeURIComponent(topic));
  const queues = doc.queues.map((q) => h("tr", {}, h("td", {}, q.brokerName), num(q.queueId),
    num(q.minOffset), num(q.maxOffset), h("td", {}, time(q.lastUpdateTimestamp))));
  const brokers = Object.entries(doc.route.brokers).map(([name, ids]) => h("tr", {},
    h("td", {}, name), h("td", {}, Object.entries(ids).map(([i, a]) => `${i}: ${a}`).join(", ")),
    h("td", {}, doc.perm[name] || "-")));
  const perm = h("select", { name: "perm" }, h("option", { value: 6 }, "RW"),
    h("option", { value: 4 }, "R"), h("option", { value: 2 }, "W"));
  const permForm = h("form", { class: "inline" }, label("Permission", perm),
    h("button", { type: "submit" }, "Change permission"),
    h("button", { type: "button", class: "danger", onclick: () => guarded(async () => {
      if (!confirm(`Delete topic ${topic} from every broker and name server?`)) return;
      await api("/api/topic/delete", { topic });
      show(`Topic ${topic} deleted`, true);
      await viewTopics();
    }) }, "Delete topic"));
  permForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    guarded(async () => {
      const r = await api("/api/topic/perm", { topic, perm: Number(perm.value) });
      show(`Permission of ${topic} set on ${r.brokers.join(", ")}`, true);
      await topicDetail(topic, into);
    });
  });
  into.replaceChildren(h("h2", {}, "Topic " + topic), permForm,
    table(["Broker", "Addresses (id: address)", "Permission"], brokers),
    table(["Broker", "Queue", "Min offset", "Max offset", "Last stored"], queues),
    h("p", {}, "Consumer groups: ", doc.groups.length ? doc.groups.join(", ") : "none"));
}

// ---- consumer groups -----------------------------------------------------------------------
async function viewGroups() {
  const doc = await api("/api/groups");
  const detail = h("div", { id: "group-detail" });
  const showSystem = h("input", { type: "checkbox", id: "show-system-groups" });
  const list = h("tbody");
  const fill = () => {
    list.replaceChildren(...doc.groups.filter((g) => showSystem.checked || g.kind === "normal")
      .map((g) => h("tr", { class: "clickable", "data-group": g.group,
        onclick: () => guarded(() => groupDetail(g.group, detail)) },
      h("td", {}, g.group), h("td", {}, g.kind))));
  };
  showSystem.addEventListener("change", fill);
  fill();
  main.replaceChildren(h("h2", {}, "Consumer groups"),
    h("label", {}, showSystem, " show built-in groups"), table(["Group", "Kind"], list), detail);
}

function localInput(ms) {
  const d = new Date(ms - new Date().getTimezoneOffset() * 60000);
  return d.toISOString().slice(0, 19);
}

async function groupDetail(group, into) {
  const doc = await api("/api/group?group=" + encodeURIComponent(group));
  const rows = doc.queues.map((q) => h("tr", {}, h("td", {}, q.topic), h("td", {}, q.brokerName),
    num(q.queueId), num(q.brokerOffset), num(q.consumerOffset), num(q.lag),
    h("td", {}, time(q.lastTimestamp))));
  const topicSel = h("select", { name: "topic" }, doc.topics.map((t) => h("option", { value: t }, t)));
  const when = input("time", { type: "datetime-local", step: 1, value: localInput(Date.now() - 3600000) });
  const supported = doc.reset.supported && doc.topics.length > 0;
  const reason = !doc.reset.supported ? doc.reset.how
    : doc.topics.length ? doc.reset.how : "the group has no offsets of any topic yet";
  const reset = h("form", { class: "inline", id: "reset-offset" }, label("Topic", topicSel),
    label("Reset to messages stored from", when),
    h("button", { type: "submit", disabled: !supported, title: reason }, "Reset offset"),
    h("span", { class: "muted" }, reason));
  reset.addEventListener("submit", (ev) => {
    ev.preventDefault();
    guarded(async () => {
      const ts = new Date(when.value).getTime();
      if (Number.isNaN(ts)) throw new Error("pick a time");
      const r = await api("/api/group/reset", { group, topic: topicSel.value, timestamp: ts });
      show(`Offsets of ${group} on ${r.topic} reset: ` +
        r.queues.map((q) => `${q.brokerName}/${q.queueId} ${q.old}→${q.new}`).join(", "), true);
      await groupDetail(group, into);
    });
  });
  into.replaceChildren(h("h2", {}, "Group " + group),
    h("p", {}, `Members: ${doc.members.length ? doc.members.join(", ") : "none online"} · ` +
      `total lag ${doc.totalLag} · consume TPS ${doc.consumeTps.toFixed(2)}`),
    reset,
    table(["Topic", "Broker", "Queue", "Broker offset", "Consumer offset", "Lag", "Last consumed"], rows));
}

// ---- messages ------------------------------------------------------------------------------
function messageRows(messages) {
  return messages.map((m) => h("tr", {},
    h("td", {}, h("div", {}, m.msgId), h("div", { class: "muted" }, m.offsetMsgId)),
    h("td", {}, m.topic + " / " + m.queueId + " @" + m.queueOffset),
    h("td", {}, m.tags || ""), h("td", {}, (m.keys || []).join(" ")),
    h("td", {}, time(m.storeTimestamp)),
    h("td", {}, h("pre", { class: "body" }, m.bodyText !== null ? m.bodyText : "hex " + m.bodyHex),
      m.bodyTruncated ? h("span", { class: "muted" }, `first 2 KiB of ${m.bodySize} bytes`) : null)));
}

async function viewMessages() {
  const results = h("div", { id: "message-results" });
  const run = (path) => guarded(async () => {
    const doc = await api(path);
    results.replaceChildren(
      h("p", {}, `${doc.messages.length} message(s)` + (doc.truncated ? " (more exist: narrow the search)" : "")),
      table(["Message id / offset id", "Topic / queue @offset", "Tags", "Keys", "Stored", "Body"],
        messageRows(doc.messages)));
  });
  const byTime = h("form", { class: "inline", id: "by-time" },
    label("Topic", input("topic", { required: true })),
    label("From", input("begin", { type: "datetime-local", step: 1, value: localInput(Date.now() - 3600000) })),
    label("To", input("end", { type: "datetime-local", step: 1, value: localInput(Date.now() + 60000) })),
    h("button", { type: "submit" }, "Search by time"));
  byTime.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new FormData(byTime);
    const q = new URLSearchParams({ topic: f.get("topic"),
      begin: new Date(f.get("begin")).getTime(), end: new Date(f.get("end")).getTime() });
    run("/api/messages/time?" + q);
  });
  const byKey = h("form", { class: "inline", id: "by-key" },
    label("Topic", input("topic", { required: true })), label("Key", input("key", { required: true })),
    h("button", { type: "submit" }, "Search by key"));
  byKey.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new FormData(byKey);
    run("/api/messages/key?" + new URLSearchParams({ topic: f.get("topic"), key: f.get("key") }));
  });
  const byId = h("form", { class: "inline", id: "by-id" },
    label("Message id or offset message id", input("id", { required: true, size: 34 })),
    label("Topic (for a client's message id)", input("topic")),
    h("button", { type: "submit" }, "Find by id"));
  byId.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new FormData(byId);
    const q = new URLSearchParams({ id: f.get("id") });
    if (f.get("topic")) q.set("topic", f.get("topic"));
    run("/api/messages/id?" + q);
  });
  main.replaceChildren(h("h2", {}, "Messages"), byTime, byKey, byId,
    h("p", { class: "muted", id: "resend-note" }, "Resend: " + state.resend), results);
}

// ---- throughput charts ---------------------------------------------------------------------
const COLORS = ["#1f6feb", "#d97706", "#16a34a", "#c026d3", "#dc2626", "#0891b2"];
const series = new Map(); // broker -> [{t, put, get}]

function drawChart(title, key) {
  const W = 760, H = 220, P = 40;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  svg.setAttribute("class", "chart");
  const all = [...series.values()].flat();
  const t0 = Math.min(...all.map((p) => p.t)), t1 = Math.max(...all.map((p) => p.t), t0 + 1);
  const vmax = Math.max(1, ...all.map((p) => p[key])) * 1.1;
  const add = (tag, attrs, text) => {
    const el = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text !== undefined) el.textContent = text;
    svg.append(el);
  };
  add("text", { x: P, y: 16, "font-size": 13, "font-weight": 600 }, title);
  for (let i = 0; i <= 4; i++) {
    const y = H - P + (-(H - 2 * P) * i) / 4;
    add("line", { x1: P, x2: W - 10, y1: y, y2: y, stroke: "#e5e7eb" });
    add("text", { x: 4, y: y + 4, "font-size": 10, fill: "#667085" }, (vmax * i / 4).toFixed(1));
  }
  let c = 0;
  for (const [, pts] of series) {
    const d = pts.map((p, i) => {
      const x = P + ((p.t - t0) / (t1 - t0)) * (W - P - 10);
      const y = H - P - (p[key] / vmax) * (H - 2 * P);
      return (i ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1);
    }).join(" ");
    add("path", { d, fill: "none", stroke: COLORS[c++ % COLORS.length], "stroke-width": 2 });
  }
  add("text", { x: P, y: H - 10, "font-size": 10, fill: "#667085" },
    `${new Date(t0).toLocaleTimeString()} – ${new Date(t1).toLocaleTimeString()}`);
  return svg;
}

async function pollCharts() {
  const doc = await api("/api/throughput");
  for (const b of doc.brokers) {
    const pts = series.get(b.broker) || [];
    pts.push({ t: doc.time, put: b.putTps, get: b.getTps });
    while (pts.length > 150) pts.shift();
    series.set(b.broker, pts);
  }
  if (state.view !== "charts") return;
  let c = 0;
  const legend = h("p", { class: "legend" }, [...series.keys()].map((name) => {
    const sw = h("span", { class: "swatch" });
    sw.style.background = COLORS[c++ % COLORS.length];
    return h("span", {}, sw, name);
  }));
  main.replaceChildren(h("h2", {}, "Throughput (every 2 s)"), legend,
    drawChart("Put TPS", "put"), drawChart("Get TPS", "get"));
}

async function viewCharts() {
  await pollCharts();
  state.chartTimer = setInterval(() => guarded(pollCharts), 2000);
}

// ---- frame ---------------------------------------------------------------------------------
const VIEWS = { cluster: viewCluster, topics: viewTopics, groups: viewGroups,
  messages: viewMessages, charts: viewCharts };

function go(view) {
  if (state.chartTimer) { clearInterval(state.chartTimer); state.chartTimer = null; }
  state.view = view;
  for (const b of document.querySelectorAll("#tabs button")) {
    b.classList.toggle("active", b.dataset.view === view);
  }
  show("");
  main.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  guarded(VIEWS[view]);
}

function askLogin() { document.getElementById("login").hidden = false; }

function renderUser() {
  const el = document.getElementById("user");
  if (!state.login) { el.replaceChildren(h("span", {}, "no ACL sign-in")); return; }
  el.replaceChildren(state.user ? h("span", {}, "signed in as " + state.user,
    h("button", { id: "logout", onclick: () => guarded(async () => {
      await api("/api/logout", {});
      state.user = null; renderUser(); askLogin();
    }) }, "Sign out")) : "");
}

document.getElementById("login-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const form = ev.target;
  const f = new FormData(form);
  const error = document.getElementById("login-error");
  error.textContent = "";
  (async () => {
    const r = await api("/api/login", { accessKey: f.get("accessKey"), secretKey: f.get("secretKey") });
    form.reset();
    state.user = r.user;
    document.getElementById("login").hidden = true;
    renderUser();
    go(state.view);
  })().catch((e) => { error.textContent = e.message; });
});

for (const b of document.querySelectorAll("#tabs button")) {
  b.addEventListener("click", () => go(b.dataset.view));
}

(async () => {
  const s = await api("/api/session");
  Object.assign(state, { login: s.login, user: s.user, resend: s.resend });
  renderUser();
  if (s.login && !s.user) askLogin();
  else go(location.hash.slice(1) in VIEWS ? location.hash.slice(1) : "cluster");
})().catch((e) => show(e.message));
