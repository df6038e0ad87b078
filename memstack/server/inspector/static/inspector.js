// The memory inspector: one tenant's subjects, a subject's fact versions on a valid-time
// timeline with an as-of slider over known (transaction) time, search with score parts,
// provenance and lineage of any row, retract and forget with the forget's audit, and the
// change feed. Everything is read from the service's HTTP API with the key typed in.

import { Api, retraction } from "./api.js";
import { day, renderTimeline } from "./timeline.js";

const $ = (selector) => document.querySelector(selector);
const state = {
  api: null, roles: [], subjects: [], subject: null, steps: [], history: [], after: null,
  shown: null, search: null, feed: null, refreshTimer: null, seq: 0,
};

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return node;
}

function toast(text, bad = false) {
  const box = $("#toast");
  box.textContent = text;
  box.className = bad ? "show bad" : "show";
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { box.className = ""; }, 5000);
}

function guard(work) {
  return async (...args) => {
    try { await work(...args); } catch (error) { toast(String(error.message || error), true); }
  };
}

// -- connect ------------------------------------------------------------------------------

async function connect(event) {
  event.preventDefault();
  const api = new Api($("#key").value.trim(), $("#tenant").value.trim());
  const grant = await api.whoami();
  $("#tenants").replaceChildren(...grant.tenants.map((t) => h("option", { value: t })));
  if (!grant.tenants.includes(api.tenant)) {
    throw new Error(`this key is not granted tenant '${api.tenant}'; it has ${grant.tenants.join(", ")}`);
  }
  if (state.feed) state.feed.abort();
  Object.assign(state, { api, roles: grant.roles, subject: null, after: null, steps: [], history: [],
    shown: null, search: null });
  localStorage.setItem("memstack.tenant", api.tenant);
  const health = await api.health();
  $("#status").textContent = `tenant ${api.tenant} · roles ${grant.roles.join(", ")} · applied ${health.applied || "(read-only stores)"}`;
  // An unsealed deployment (MEMSTACK_SEAL=0): a forget cannot reach the Kafka log.
  $("#sealing").hidden = health.sealing !== "off";
  $("#sealing").textContent = (health.warnings || []).join(" ");
  document.body.dataset.sealing = health.sealing || "on";
  document.body.dataset.tenant = api.tenant;
  await loadSubjects();
  follow();
}

// -- subjects -----------------------------------------------------------------------------

async function loadSubjects() {
  const answer = await state.api.subjects(state.after);
  state.subjects = answer.subjects;
  $("#known-range").textContent = answer.known_from
    ? `known from ${answer.known_from} to ${answer.known_to}` : "nothing known yet";
  renderSubjects();
}

function renderSubjects() {
  const filter = $("#subject-filter").value.trim().toLowerCase();
  const shown = state.subjects.filter((s) => s.subject.toLowerCase().includes(filter));
  $("#subject-count").textContent = `${shown.length} of ${state.subjects.length}`;
  $("#subjects").replaceChildren(...shown.map((s) => h("li", {
    "data-subject": s.subject, class: s.subject === state.subject ? "picked" : "",
    onclick: guard(() => pickSubject(s.subject)),
  }, h("b", {}, s.subject), h("small", {}, `${s.current} current · ${s.versions} versions · ${s.records} records`))));
}

async function pickSubject(subject) {
  state.subject = subject;
  renderSubjects();
  $("#subject-title").textContent = subject;
  $("#forget-subject").disabled = !state.roles.includes("forget");
  await reloadSubject(true);
}

// The slider's steps: every transaction time at which a version of the subject opened or
// closed, as the full history (known now) says.
async function reloadSubject(toLatest) {
  const full = await state.api.history(state.subject, undefined, state.after);
  const times = new Set();
  for (const v of full.versions) { times.add(v.tt_from); if (v.tt_to) times.add(v.tt_to); }
  const steps = [...times].sort((a, b) => Date.parse(a) - Date.parse(b) || a.localeCompare(b));
  const slider = $("#known-slider");
  const wasLatest = Number(slider.value) === state.steps.length - 1;
  state.steps = steps;
  state.history = full.versions;
  slider.max = Math.max(0, steps.length - 1);
  slider.disabled = steps.length < 2;
  if (toLatest || wasLatest || Number(slider.value) > steps.length - 1) slider.value = slider.max;
  await showAsOf();
}

function knownAt() {
  return state.steps.length ? state.steps[Number($("#known-slider").value)] : undefined;
}

function validAt() {
  const typed = $("#valid").value.trim();
  const parsed = typed && typed !== "now" ? Date.parse(typed) : NaN;
  return { param: typed && typed !== "now" ? typed : undefined, date: Number.isNaN(parsed) ? new Date() : new Date(parsed) };
}

async function showAsOf() {
  if (!state.subject) return;
  const seq = ++state.seq;
  const known = knownAt();
  const valid = validAt();
  const [history, facts] = await Promise.all([
    state.api.history(state.subject, known, state.after),
    state.api.facts(state.subject, valid.param, known, state.after),
  ]);
  if (seq !== state.seq) return; // a later move of the slider superseded this one
  const index = Number($("#known-slider").value);
  $("#known-label").textContent = known || "latest";
  $("#known-label").dataset.known = known || "";
  $("#known-step").textContent = state.steps.length ? `step ${index + 1} of ${state.steps.length}: ${describeStep(known)}` : "";
  renderTimeline($("#timeline"), history.versions, valid.date, (v) => guard(showProvenance)(v.source_event_id));
  renderFacts(facts, known, valid);
  renderVersions(history.versions, known);
}

function describeStep(known) {
  const opened = state.history.filter((v) => v.tt_from === known).length;
  const closed = state.history.filter((v) => v.tt_to === known).length;
  return `${opened} opened, ${closed} closed`;
}

function renderFacts(answer, known, valid) {
  $("#facts-caption").textContent = `valid at ${answer.as_of.valid}, as known at ${answer.as_of.known || known || "now"}`;
  const body = $("#facts tbody");
  body.replaceChildren(...answer.facts.map((f) => h("tr", { "data-version-id": f.version_id, onclick: guard(() => showProvenance(f.source_event_id)) },
    h("td", {}, f.relation), h("td", { "data-field": "object" }, f.object),
    h("td", {}, `${day(f.vt_from)} → ${f.vt_to ? day(f.vt_to) : "open"}`), h("td", {}, f.tt_from),
    h("td", {}, h("a", { href: "#" }, "provenance")))));
  const table = $("#facts");
  table.dataset.known = known || "";
  table.dataset.valid = valid.param || "now";
}

function renderVersions(versions, known) {
  const body = $("#versions tbody");
  body.replaceChildren(...versions.map((v) => h("tr", {
    "data-version-id": v.version_id, "data-status": v.tt_to ? "closed" : "current",
    class: v.tt_to ? "closed" : "current", onclick: guard(() => showProvenance(v.source_event_id)),
  }, h("td", {}, v.relation), h("td", {}, v.object), h("td", {}, `${day(v.vt_from)} → ${v.vt_to ? day(v.vt_to) : "open"}`),
  h("td", {}, `${v.tt_from} → ${v.tt_to || "now"}`), h("td", {}, v.tt_to ? "closed" : "current"))));
  $("#versions").dataset.known = known || "";
}

// -- search -------------------------------------------------------------------------------

async function search(event) {
  event.preventDefault();
  const text = $("#search-text").value.trim();
  if (!text) return;
  state.search = { text, mode: $("#search-mode").value };
  await showHits();
}

async function showHits() {
  const { text, mode } = state.search;
  const answer = await state.api.search(text, mode, 10, state.after);
  const num = (x, digits = 4) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));
  $("#hits tbody").replaceChildren(...answer.hits.map((hit) => h("tr", {
    "data-event-id": hit.memory.event_id, onclick: guard(() => showProvenance(hit.memory.event_id)),
  }, h("td", {}, String(hit.rank)), h("td", {}, hit.memory.text), h("td", {}, hit.memory.kind),
  h("td", {}, hit.memory.session), h("td", { "data-field": "fused" }, num(hit.score.fused)),
  h("td", {}, `${hit.score.bm25_rank ?? "–"} / ${num(hit.score.bm25_score, 2)}`),
  h("td", {}, `${hit.score.vector_rank ?? "–"} / ${num(hit.score.vector_distance, 3)}`))));
  $("#hits").dataset.query = text;
}

// -- provenance ---------------------------------------------------------------------------

async function showProvenance(eventId) {
  const p = await state.api.provenance(eventId, state.after);
  state.shown = p;
  const fields = [["event", p.event_id], ["kind", p.kind], ["log position", `partition ${p.log.partition}, offset ${p.log.offset}`],
    ["log time", p.log.log_time]];
  if (p.record) fields.push(["session", p.record.session], ["agent", p.record.agent], ["occurred", p.record.occurred_at],
    ["text", p.record.text || p.record.payload_json], ["source", `${p.record.source} (${p.record.authority})`]);
  if (p.fact) fields.push(["fact", `${p.fact.subject} · ${p.fact.relation} · ${p.fact.object ?? "(any)"}`],
    ["op", p.fact.op], ["valid", `${p.fact.vt_from} → ${p.fact.vt_to || "open"}`]);
  fields.push(["searchable", p.memory ? `yes (memory row, known ${p.memory.tt_from} → ${p.memory.tt_to || "now"})` : "no memory row"]);
  if (p.record) fields.push(["session state", await sessionStateOf(p.record.session)]);
  $("#prov-fields").replaceChildren(...fields.flatMap(([k, v]) => [h("dt", {}, k), h("dd", { "data-field": k }, v)]));
  const lineage = [["opened", p.versions_opened], ["closed", p.versions_closed], ["asserted", p.versions_asserted]];
  $("#prov-lineage").replaceChildren(h("h3", {}, "Lineage"), ...lineage.map(([what, list]) => h("div", { "data-lineage": what },
    h("b", {}, `versions ${what} by this event: ${list.length}`),
    h("ul", {}, ...list.map((v) => h("li", { "data-version-id": v.version_id },
      `${v.relation} = ${v.object}, valid ${day(v.vt_from)} → ${v.vt_to ? day(v.vt_to) : "open"}${v.tt_to ? " (closed)" : ""}`))))));
  const canRetract = p.fact && p.fact.op === "assert" && state.roles.includes("write");
  $("#retract").hidden = !canRetract;
  $("#retract-box").hidden = !canRetract;
  $("#forget-event").hidden = !state.roles.includes("forget");
  $("#provenance").hidden = false;
  $("#provenance").dataset.eventId = p.event_id;
}

async function sessionStateOf(session) {
  try {
    const s = await state.api.sessionState(session);
    const items = Object.entries(s.items).map(([head, n]) => `${head} ${n}`).join(", ");
    const ring = s.ring_capacity
      ? `; its code ring holds ${s.ring_turns} of ${s.ring_capacity} turns (${s.ring_bits}-bit codes)` : "";
    return `${s.bytes.toLocaleString("en")} bytes: items ${items}${ring}`;
  } catch (e) {
    if (e.status === 404) return "none kept";
    throw e;
  }
}

// -- retract and forget -------------------------------------------------------------------

async function retract() {
  const p = state.shown;
  const from = $("#retract-from").value.trim();
  const event = retraction(state.api.tenant, p.fact.subject, p.fact.relation, p.fact.object,
    from && from !== "now" ? new Date(from).toISOString() : undefined);
  const answer = await state.api.write([event]);
  state.after = answer.position;
  toast(`retraction ${event.event_id} written at ${answer.written[0].partition}@${answer.written[0].offset}`);
  document.body.dataset.lastWrite = event.event_id;
  document.body.dataset.lastPosition = answer.position;
  await refresh(true);
}

async function forget(scope) {
  const answer = await state.api.forget(scope, "requested in the inspector");
  state.after = answer.position;
  const item = h("li", { "data-request-id": answer.request_id, "data-status": "logged" },
    h("code", {}, answer.request_id.slice(0, 13) + "…"), " ", h("span", { class: "scope" }, describeScope(scope)), " ",
    h("b", { class: "forget-status" }, "logged"), h("div", { class: "audit muted" }));
  for (const warning of answer.warnings || []) item.append(h("div", { class: "warning" }, warning));
  $("#forgets").prepend(item);
  await watchForget(answer.request_id, item);
  await refresh(true);
}

// The audit summary of a forget (ids and counts only): per store, rows deleted.
function describeAudit(audit) {
  const count = (deleted) => (typeof deleted === "number" ? deleted
    : Object.values(deleted || {}).reduce((sum, n) => sum + Number(n), 0));
  const stores = Object.entries(audit.stores || {}).map(([name, r]) => `${name} ${count(r.deleted)}`).join(", ");
  const events = Array.isArray(audit.events) ? audit.events.length : audit.events;
  return `audit ${audit.passed ? "passed" : "FAILED"} · ${events ?? 0} event(s) · rows deleted: ${stores || "none"}` +
    ` · ${audit.keys_destroyed ?? 0} key(s) destroyed`;
}

function describeScope(scope) {
  return Object.entries(scope).map(([k, v]) => `${k}=${v}`).join(" ");
}

async function watchForget(requestId, item) {
  for (let i = 0; i < 240; i++) {
    const status = await state.api.forgetStatus(requestId);
    item.dataset.status = status.status;
    item.querySelector(".forget-status").textContent = status.status;
    if (status.audit) item.querySelector(".audit").textContent = describeAudit(status.audit);
    if (status.status === "audited") return;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

// -- live changes -------------------------------------------------------------------------

function follow() {
  const controller = new AbortController();
  state.feed = controller;
  $("#live-state").textContent = "following";
  state.api.follow(onChange, controller.signal).catch((error) => {
    if (controller.signal.aborted) return;
    $("#live-state").textContent = `stopped (${error.message || error})`;
  });
}

function onChange(change) {
  const what = change.type === "memory_added" ? `${change.kind} ${change.text ? change.text.slice(0, 60) : ""}`
    : change.type === "forgotten" ? `forgotten ${change.scope}`
      : `${change.subject} · ${change.relation} = ${change.object}`;
  const list = $("#feed");
  list.prepend(h("li", { "data-type": change.type }, h("b", {}, change.type.replace(/_/g, " ")), " ", what));
  while (list.children.length > 60) list.lastChild.remove();
  const newSubject = change.subject && !state.subjects.some((s) => s.subject === change.subject);
  const touches = change.type === "forgotten" || (change.subject && change.subject === state.subject) || newSubject;
  if (touches && !state.refreshTimer) { // at most one refresh per 300 ms, however busy the feed
    state.refreshTimer = setTimeout(() => { state.refreshTimer = null; guard(() => refresh(false))(); }, 300);
  }
}

async function refresh(toLatest) {
  await loadSubjects();
  if (state.subject) await reloadSubject(toLatest);
  if (state.search) await showHits();
  if (state.shown) {
    try { await showProvenance(state.shown.event_id); } catch { $("#provenance").hidden = true; state.shown = null; }
  }
}

// -- wiring -------------------------------------------------------------------------------

window.addEventListener("DOMContentLoaded", () => {
  $("#tenant").value = localStorage.getItem("memstack.tenant") || "";
  $("#connect").addEventListener("submit", guard(connect));
  $("#subject-filter").addEventListener("input", renderSubjects);
  $("#known-slider").addEventListener("input", guard(showAsOf));
  $("#valid").addEventListener("change", guard(showAsOf));
  $("#search").addEventListener("submit", guard(search));
  $("#retract").addEventListener("click", guard(retract));
  $("#forget-event").addEventListener("click", guard(() => forget({ type: "event", event_id: state.shown.event_id })));
  $("#forget-subject").addEventListener("click", guard(() => forget({ type: "subject", subject: state.subject })));
});
