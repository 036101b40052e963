"use strict";
// The console's page: plain JS, no library. Every figure comes from the console's /api/.
// What is shown is named by the URL's hash, "#view?param=value&...", so a reload or a shared
// link opens the same page, topic, group, broker or message.

const main = document.getElementById("main");
const notice = document.getElementById("notice");
const state = { view: "cluster", params: {}, login: false, user: null, resend: "", chartTimer: null };

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
function fixed(v) { return v === null || v === undefined ? "-" : v.toFixed(2); }
function table(headers, rows) {
  const body = rows instanceof HTMLTableSectionElement ? rows : h("tbody", {}, rows);
  return h("table", {}, h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))), body);
}
function input(name, attrs) { return h("input", Object.assign({ name }, attrs || {})); }
function label(text, el) { return h("label", {}, text, el); }

async function guarded(fn) {
  try { await fn(); } catch (e) { show(e.message); }
}

// ---- the URL -------------------------------------------------------------------------------
function parseHash() {
  const text = location.hash.replace(/^#\/?/, "");
  const [view, query] = text.split("?");
  return { view: view in VIEWS ? view : "cluster", params: Object.fromEntries(new URLSearchParams(query || "")) };
}

function hashOf(view, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") q.set(k, v);
  }
  const s = q.toString();
  return "#" + view + (s ? "?" + s : "");
}

// a new history entry (the hashchange listener renders it)
function navigate(view, params) {
  const target = hashOf(view, params);
  if (location.hash === target) render();
  else location.hash = target;
}

// change the current entry's parameters without rendering again (sort order, form fields)
function remember(params) {
  const merged = Object.assign({}, state.params, params);
  state.params = merged;
  history.replaceState(null, "", hashOf(state.view, merged));
}

function link(text, view, params) {
  return h("a", { href: hashOf(view, params) }, text);
}

// A table whose columns sort on a click of their heading; the order is kept in the URL
// (sort=<key>, desc=1). columns: [{key, label, num, cell(row) -> node or text}]
function sortable(id, columns, rows, rowAttrs) {
  const key = state.params.sort || columns[0].key;
  const desc = state.params.desc === "1";
  const col = columns.find((c) => c.key === key) || columns[0];
  const value = (r) => r[col.key];
  const sorted = rows.slice().sort((a, b) => {
    const x = value(a), y = value(b);
    if (x === y) return 0;
    if (x === null || x === undefined) return 1;
    if (y === null || y === undefined) return -1;
    const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
    return desc ? -c : c;
  });
  const head = h("tr", {}, columns.map((c) => h("th", {
    class: "sortable" + (c.key === col.key ? (desc ? " desc" : " asc") : ""),
    "data-sort": c.key,
    onclick: () => {
      remember({ sort: c.key, desc: c.key === col.key && !desc ? "1" : "" });
      render();
    },
  }, c.label)));
  const body = h("tbody", {}, sorted.map((r) => h("tr", rowAttrs(r), columns.map((c) => {
    const v = c.cell ? c.cell(r) : r[c.key];
    return c.num ? num(v === null || v === undefined ? "-" : v) : h("td", {}, v === null || v === undefined ? "-" : v);
  }))));
  return h("table", { id }, h("thead", {}, head), body);
}

// ---- cluster -------------------------------------------------------------------------------
function haLag(b) {
  if (b.haLagBytes !== null && b.haLagBytes !== undefined) return b.haLagBytes;
  if (b.error) return "-";
  return b.brokerId === 0 ? "no slave" : "-";
}

async function viewCluster() {
  const doc = await api("/api/cluster");
  const rows = doc.brokers.map((b) => h("tr", { "data-broker": b.address },
    h("td", {}, b.cluster), h("td", {}, b.brokerName), num(b.brokerId), h("td", {}, b.address),
    h("td", {}, b.role), num(b.epoch !== undefined ? b.epoch : "-"),
    h("td", {}, b.syncStateSet !== undefined ? b.syncStateSet || "-" : "-"),
    h("td", {}, b.error ? h("span", { class: "bad" }, b.error) : b.version),
    num(fixed(b.putTps)), num(fixed(b.getTps)),
    h("td", {}, b.disk || "-"),
    h("td", { class: "num ha-lag" }, haLag(b)),
    num(b.msgPutTotalTodayNow !== undefined ? b.msgPutTotalTodayNow : "-"),
    h("td", {}, link("Status", "cluster", { broker: b.address, show: "runtime" }), " ",
      link("Config", "cluster", { broker: b.address, show: "config" }))));
  const detail = h("div", { id: "broker-detail" });
  main.replaceChildren(h("h2", {}, "Brokers"),
    table(["Cluster", "Broker", "ID", "Address", "Role", "Epoch", "SyncStateSet", "Version",
      "Put TPS", "Get TPS", "Disk", "HA lag (bytes)", "Messages put today", ""], rows),
    h("p", { class: "muted" }, "Read at " + time(doc.time)), detail);
  const { broker, show: which } = state.params;
  if (broker) await brokerDetail(broker, which === "config" ? "config" : "runtime", detail);
}

async function brokerDetail(broker, which, into) {
  const path = which === "config" ? "/api/broker/config" : "/api/broker/runtime";
  const doc = await api(path + "?broker=" + encodeURIComponent(broker));
  const filter = input("filter", { placeholder: "filter keys", value: state.params.filter || "" });
  const body = h("tbody");
  const fill = () => {
    const f = filter.value.toLowerCase();
    body.replaceChildren(...doc.entries.filter(([k]) => k.toLowerCase().includes(f))
      .map(([k, v]) => h("tr", {}, h("td", {}, k), h("td", {}, h("code", {}, v)))));
  };
  filter.addEventListener("input", () => { remember({ filter: filter.value }); fill(); });
  fill();
  into.replaceChildren(
    h("h2", {}, (which === "config" ? "Configuration of " : "Runtime figures of ") + broker),
    h("p", {}, filter, " ", which === "config"
      ? link("show its runtime figures", "cluster", { broker, show: "runtime" })
      : link("show its configuration", "cluster", { broker, show: "config" })),
    table(["Key", "Value"], body));
}

// ---- topics --------------------------------------------------------------------------------
const TOPIC_COLUMNS = [
  { key: "topic", label: "Topic" },
  { key: "kind", label: "Kind" },
  { key: "brokerCount", label: "Brokers", num: true },
  { key: "writeQueues", label: "Write queues", num: true },
  { key: "readQueues", label: "Read queues", num: true },
  { key: "messages", label: "Messages", num: true },
  { key: "putTps", label: "Put TPS", num: true, cell: (r) => fixed(r.putTps) },
];

async function viewTopics() {
  const doc = await api("/api/topics");
  const all = state.params.all === "1";
  const showSystem = h("input", { type: "checkbox", id: "show-system", checked: all });
  showSystem.addEventListener("change", () => { remember({ all: showSystem.checked ? "1" : "" }); render(); });
  const rows = doc.topics.filter((t) => all || t.kind === "normal")
    .map((t) => Object.assign({ brokerCount: t.brokers.length }, t));
  const list = sortable("topic-list", TOPIC_COLUMNS, rows, (t) => ({
    class: "clickable" + (t.topic === state.params.topic ? " selected" : ""), "data-topic": t.topic,
    onclick: () => navigate("topics", Object.assign({}, state.params, { topic: t.topic })),
  }));
  const detail = h("div", { id: "topic-detail" });
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
      state.pendingNotice = [`Topic ${r.topic} created on ${r.brokers.join(", ")}`, true];
      navigate("topics", Object.assign({}, state.params, { topic: r.topic }));
    });
  });
  main.replaceChildren(h("h2", {}, "Topics"), form,
    h("label", {}, showSystem, " show retry, DLQ and system topics"), list, detail);
  if (state.params.topic) await topicDetail(state.params.topic, detail);
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
      state.pendingNotice = [`Topic ${topic} deleted`, true];
      navigate("topics", Object.assign({}, state.params, { topic: "" }));
    }) }, "Delete topic"));
  permForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    guarded(async () => {
      const r = await api("/api/topic/perm", { topic, perm: Number(perm.value) });
      show(`Permission of ${topic} set on ${r.brokers.join(", ")}`, true);
      await topicDetail(topic, into);
    });
  });
  const send = h("form", { class: "inline", id: "send-message" },
    label("Tags", input("tags", { maxlength: 255 })),
    label("Keys (space-separated)", input("keys", { maxlength: 255 })),
    label("Body", h("textarea", { name: "body", rows: 2, cols: 40, required: true })),
    h("button", { type: "submit" }, "Send a test message"));
  const sent = h("div", { id: "send-result" });
  send.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new FormData(send);
    guarded(async () => {
      const r = await api("/api/topic/send", { topic, tags: f.get("tags"), keys: f.get("keys"), body: f.get("body") });
      show(`Sent to ${r.brokerName}/${r.queueId} @${r.queueOffset}: ${r.status}`, true);
      sent.replaceChildren(table(["Status", "Message id", "Offset message id", "Queue", ""], [h("tr", {},
        h("td", {}, r.status), h("td", {}, r.msgId), h("td", {}, r.offsetMsgId),
        h("td", {}, `${r.brokerName}/${r.queueId} @${r.queueOffset}`),
        h("td", {}, link("View", "messages", { id: r.msgId, topic }), " ",
          link("Trace", "trace", { id: r.msgId })))]));
    });
  });
  into.replaceChildren(h("h2", {}, "Topic " + topic), permForm,
    table(["Broker", "Addresses (id: address)", "Permission"], brokers),
    table(["Broker", "Queue", "Min offset", "Max offset", "Last stored"], queues),
    h("p", {}, "Consumer groups: ", doc.groups.length
      ? doc.groups.flatMap((g, i) => [i ? ", " : "", link(g, "groups", { group: g })]) : "none", " · ",
      link("producers of this topic", "producers", { topic })),
    h("h3", {}, "Send a test message"), send, sent);
}

// ---- consumer groups -----------------------------------------------------------------------
const GROUP_COLUMNS = [
  { key: "group", label: "Group" },
  { key: "consumers", label: "Consumers online", num: true },
  { key: "consumeType", label: "Type", cell: (g) => ({ CONSUME_ACTIVELY: "PULL", CONSUME_PASSIVELY: "PUSH", CONSUME_POP: "POP" }[g.consumeType] || g.consumeType) },
  { key: "messageModel", label: "Model" },
  { key: "consumeTps", label: "Consume TPS", num: true, cell: (g) => fixed(g.consumeTps) },
  { key: "totalLag", label: "Total lag", num: true },
];

async function viewGroups() {
  const doc = await api("/api/groups");
  const all = state.params.all === "1";
  const showSystem = h("input", { type: "checkbox", id: "show-system-groups", checked: all });
  showSystem.addEventListener("change", () => { remember({ all: showSystem.checked ? "1" : "" }); render(); });
  const rows = doc.groups.filter((g) => all || g.kind === "normal");
  const list = sortable("group-list", GROUP_COLUMNS, rows, (g) => ({
    class: "clickable" + (g.group === state.params.group ? " selected" : ""), "data-group": g.group,
    onclick: () => navigate("groups", Object.assign({}, state.params, { group: g.group })),
  }));
  const detail = h("div", { id: "group-detail" });
  main.replaceChildren(h("h2", {}, "Consumer groups"),
    h("label", {}, showSystem, " show built-in groups"), list, detail);
  if (state.params.group) await groupDetail(state.params.group, detail);
}

function localInput(ms) {
  const d = new Date(ms - new Date().getTimezoneOffset() * 60000);
  return d.toISOString().slice(0, 19);
}

async function groupDetail(group, into) {
  const doc = await api("/api/group?group=" + encodeURIComponent(group));
  const rows = doc.queues.map((q) => h("tr", {}, h("td", {}, link(q.topic, "topics", { topic: q.topic })),
    h("td", {}, q.brokerName), num(q.queueId), num(q.brokerOffset), num(q.consumerOffset), num(q.lag),
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

// ---- producers -----------------------------------------------------------------------------
async function viewProducers() {
  const p = state.params;
  const form = h("form", { class: "inline", id: "producer-form" },
    label("Topic", input("topic", { required: true, value: p.topic || "" })),
    label("Producer group", input("group", { required: true, value: p.group || "" })),
    h("button", { type: "submit" }, "Find connections"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    navigate("producers", { topic: f.get("topic"), group: f.get("group") });
  });
  const results = h("div", { id: "producer-results" });
  main.replaceChildren(h("h2", {}, "Producers"),
    h("p", { class: "muted" }, "A producer group's clients connected to the brokers of a topic " +
      "(GET_PRODUCER_CONNECTION_LIST), as RocketMQ Dashboard's Producer page finds them."),
    form, results);
  if (!p.topic || !p.group) return;
  const doc = await api("/api/producers?" + new URLSearchParams({ topic: p.topic, group: p.group }));
  results.replaceChildren(h("p", {}, `${doc.connections.length} connection(s) of ${doc.group} on ${doc.topic}`),
    table(["Client id", "Client address", "Language", "Version"], doc.connections.map((c) => h("tr", {},
      h("td", {}, c.clientId), h("td", {}, c.clientAddr), h("td", {}, c.language), num(c.version)))));
}

// ---- messages ------------------------------------------------------------------------------
function messageRows(messages) {
  return messages.map((m) => h("tr", {},
    h("td", {}, h("div", {}, m.msgId), h("div", { class: "muted" }, m.offsetMsgId),
      h("div", {}, link("Trace", "trace", { id: m.msgId }))),
    h("td", {}, m.topic + " / " + m.queueId + " @" + m.queueOffset),
    h("td", {}, m.tags || ""), h("td", {}, (m.keys || []).join(" ")),
    h("td", {}, time(m.storeTimestamp)),
    h("td", {}, h("pre", { class: "body" }, m.bodyText !== null ? m.bodyText : "hex " + m.bodyHex),
      m.bodyTruncated ? h("span", { class: "muted" }, `first 2 KiB of ${m.bodySize} bytes`) : null)));
}

async function viewMessages() {
  const p = state.params;
  const results = h("div", { id: "message-results" });
  const byTime = h("form", { class: "inline", id: "by-time" },
    label("Topic", input("topic", { required: true, value: p.begin ? p.topic : "" })),
    label("From", input("begin", { type: "datetime-local", step: 1,
      value: localInput(p.begin ? Number(p.begin) : Date.now() - 3600000) })),
    label("To", input("end", { type: "datetime-local", step: 1,
      value: localInput(p.end ? Number(p.end) : Date.now() + 60000) })),
    h("button", { type: "submit" }, "Search by time"));
  byTime.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new FormData(byTime);
    navigate("messages", { topic: f.get("topic"),
      begin: new Date(f.get("begin")).getTime(), end: new Date(f.get("end")).getTime() });
  });
  const byKey = h("form", { class: "inline", id: "by-key" },
    label("Topic", input("topic", { required: true, value: p.key ? p.topic : "" })),
    label("Key", input("key", { required: true, value: p.key || "" })),
    h("button", { type: "submit" }, "Search by key"));
  byKey.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new FormData(byKey);
    navigate("messages", { topic: f.get("topic"), key: f.get("key") });
  });
  const byId = h("form", { class: "inline", id: "by-id" },
    label("Message id or offset message id", input("id", { required: true, size: 34, value: p.id || "" })),
    label("Topic (for a client's message id)", input("topic", { value: p.id ? p.topic || "" : "" })),
    h("button", { type: "submit" }, "Find by id"));
  byId.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new FormData(byId);
    navigate("messages", { id: f.get("id"), topic: f.get("topic") });
  });
  main.replaceChildren(h("h2", {}, "Messages"), byTime, byKey, byId,
    h("p", { class: "muted", id: "resend-note" }, "Resend: " + state.resend), results);
  let path = null;
  if (p.id) {
    const q = new URLSearchParams({ id: p.id });
    if (p.topic) q.set("topic", p.topic);
    path = "/api/messages/id?" + q;
  } else if (p.key && p.topic) {
    path = "/api/messages/key?" + new URLSearchParams({ topic: p.topic, key: p.key });
  } else if (p.topic && p.begin) {
    path = "/api/messages/time?" + new URLSearchParams({ topic: p.topic, begin: p.begin, end: p.end || "" });
  }
  if (!path) return;
  const doc = await api(path);
  results.replaceChildren(
    h("p", {}, `${doc.messages.length} message(s)` + (doc.truncated ? " (more exist: narrow the search)" : "")),
    table(["Message id / offset id", "Topic / queue @offset", "Tags", "Keys", "Stored", "Body"],
      messageRows(doc.messages)));
}

// ---- message trace -------------------------------------------------------------------------
async function viewTrace() {
  const p = state.params;
  const form = h("form", { class: "inline", id: "trace-form" },
    label("Message id (the client's)", input("id", { required: true, size: 34, value: p.id || "" })),
    label("Trace topic", input("traceTopic", { value: p.traceTopic || "RMQ_SYS_TRACE_TOPIC" })),
    h("button", { type: "submit" }, "Show the trace"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    const topic = f.get("traceTopic");
    navigate("trace", { id: f.get("id"), traceTopic: topic === "RMQ_SYS_TRACE_TOPIC" ? "" : topic });
  });
  const results = h("div", { id: "trace-results" });
  main.replaceChildren(h("h2", {}, "Message trace"),
    h("p", { class: "muted" }, "What producers and consumers with message trace on wrote about " +
      "a message (RocketMQ's trace format, in the trace topic)."), form, results);
  if (!p.id) return;
  const q = new URLSearchParams({ id: p.id });
  if (p.traceTopic) q.set("traceTopic", p.traceTopic);
  const doc = await api("/api/trace?" + q);
  if (!doc.rows.length) {
    results.replaceChildren(h("p", {}, `No trace of ${doc.msgId} in ${doc.traceTopic}.`));
    return;
  }
  const rows = doc.rows.map((r) => h("tr", { "data-type": r.type },
    h("td", {}, r.type), h("td", {}, r.group), h("td", {}, r.clientHost),
    h("td", {}, time(r.timestamp)), num(r.type === "SubBefore" ? "-" : r.costTime),
    h("td", { class: r.status === "failed" ? "bad" : "" }, r.status || "-"),
    num(r.type === "SubBefore" ? r.retryTimes : "-"), h("td", {}, r.requestId || "-"),
    h("td", {}, r.type === "Pub" ? `${r.topic} · ${r.msgType}` + (r.storeHost ? ` · stored on ${r.storeHost}` : "") : "")));
  const consumers = doc.consumers.map((c) => h("div", { class: "trace-group" },
    h("h3", {}, "Consumer group " + c.group),
    table(["Attempt (retry times)", "Client host", "Began", "Cost (ms)", "Status"],
      c.attempts.map((a) => h("tr", {}, num(a.retryTimes === null ? "-" : a.retryTimes),
        h("td", {}, a.clientHost), h("td", {}, time(a.beginTimestamp)),
        num(a.costTime === null ? "-" : a.costTime),
        h("td", { class: a.status === "failed" ? "bad" : "" }, a.status))))));
  results.replaceChildren(
    h("p", {}, `${doc.rows.length} trace record(s) of ${doc.msgId} in ${doc.traceMessages} trace ` +
      `message(s) of ${doc.traceTopic}` + (doc.unreadable ? ` (${doc.unreadable} unreadable left out)` : "")),
    table(["Type", "Group", "Client host", "Time", "Cost (ms)", "Status", "Retry times", "Request id", ""], rows),
    ...consumers);
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
  producers: viewProducers, messages: viewMessages, trace: viewTrace, charts: viewCharts };

function render() {
  const { view, params } = parseHash();
  if (state.chartTimer) { clearInterval(state.chartTimer); state.chartTimer = null; }
  state.view = view;
  state.params = params;
  for (const b of document.querySelectorAll("#tabs a")) {
    b.classList.toggle("active", b.dataset.view === view);
  }
  const pending = state.pendingNotice;
  state.pendingNotice = null;
  if (pending) show(pending[0], pending[1]);
  else show("");
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
    render();
  })().catch((e) => { error.textContent = e.message; });
});

window.addEventListener("hashchange", render);

(async () => {
  const s = await api("/api/session");
  Object.assign(state, { login: s.login, user: s.user, resend: s.resend });
  renderUser();
  if (s.login && !s.user) askLogin();
  else render();
})().catch((e) => show(e.message));
