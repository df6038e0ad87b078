// The valid-time timeline of one subject: a lane per relation, a bar per fact version as
// known at the slider's known time. Current versions are solid; versions closed in
// transaction time (superseded, re-cut or retracted by then) are hatched.

const SVG = "http://www.w3.org/2000/svg";
const LANE = 34;
const LEFT = 130;
const RIGHT = 16;
const TOP = 26;

function el(name, attrs = {}, text) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

export function day(iso) {
  return iso ? iso.slice(0, 10) : "…";
}

// The valid-time window shown: from the earliest start to the latest bound or the valid
// time asked, padded by 5%.
function windowOf(versions, validAt) {
  const times = [validAt.getTime()];
  for (const v of versions) {
    times.push(Date.parse(v.vt_from));
    if (v.vt_to) times.push(Date.parse(v.vt_to));
  }
  let lo = Math.min(...times);
  let hi = Math.max(...times);
  if (hi - lo < 86400000) { lo -= 43200000; hi += 43200000; }
  const pad = (hi - lo) * 0.05;
  return [lo - pad, hi + pad * 3];
}

export function renderTimeline(svg, versions, validAt, onPick) {
  svg.replaceChildren();
  const width = svg.clientWidth || 800;
  const relations = [...new Set(versions.map((v) => v.relation))].sort();
  const height = TOP + Math.max(1, relations.length) * LANE + 24;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("height", height);
  if (!versions.length) {
    svg.append(el("text", { x: 12, y: TOP + 14, class: "empty" }, "no fact versions known at this time"));
    return;
  }
  const [lo, hi] = windowOf(versions, validAt);
  const x = (t) => LEFT + ((t - lo) / (hi - lo)) * (width - LEFT - RIGHT);
  const defs = el("defs");
  const hatch = el("pattern", { id: "hatch", width: 6, height: 6, patternUnits: "userSpaceOnUse",
    patternTransform: "rotate(45)" });
  hatch.append(el("rect", { width: 6, height: 6, class: "hatch-bg" }), el("line", { x1: 0, y1: 0, x2: 0, y2: 6, class: "hatch-line" }));
  defs.append(hatch);
  svg.append(defs);
  axis(svg, lo, hi, x, height);
  relations.forEach((relation, lane) => {
    const y = TOP + lane * LANE;
    svg.append(el("text", { x: 8, y: y + 20, class: "lane" }, relation));
    const mine = versions.filter((v) => v.relation === relation);
    const closed = mine.filter((v) => v.tt_to);
    const open = mine.filter((v) => !v.tt_to);
    for (const [list, dy, h] of [[closed, 4, 10], [open, 15, 14]]) {
      for (const v of list) bar(svg, v, x, y + dy, h, hi, onPick);
    }
  });
  const vx = x(validAt.getTime());
  svg.append(el("line", { x1: vx, x2: vx, y1: TOP - 8, y2: height - 20, class: "valid-at" }));
  svg.append(el("text", { x: vx + 4, y: TOP - 10, class: "valid-label" }, `valid ${day(validAt.toISOString())}`));
}

function bar(svg, v, x, y, h, hi, onPick) {
  const start = x(Date.parse(v.vt_from));
  const end = v.vt_to ? x(Date.parse(v.vt_to)) : x(hi);
  const g = el("g", { class: `version ${v.tt_to ? "closed" : "current"}`, "data-version-id": v.version_id });
  const title = `${v.relation} = ${v.object}\nvalid ${day(v.vt_from)} → ${v.vt_to ? day(v.vt_to) : "open"}\n` +
    `known ${v.tt_from} → ${v.tt_to || "now"}\nsource event ${v.source_event_id}`;
  g.append(el("title", {}, title));
  g.append(el("rect", { x: start, y, width: Math.max(2, end - start), height: h, rx: 3 }));
  if (!v.tt_to && end - start > 7 * v.object.length + 8) {
    g.append(el("text", { x: start + 4, y: y + h - 3, class: "bar-label" }, v.object));
  }
  g.addEventListener("click", () => onPick(v));
  svg.append(g);
}

function axis(svg, lo, hi, x, height) {
  const ticks = 6;
  for (let i = 0; i <= ticks; i++) {
    const t = lo + ((hi - lo) * i) / ticks;
    const px = x(t);
    svg.append(el("line", { x1: px, x2: px, y1: TOP - 4, y2: height - 20, class: "grid" }));
    svg.append(el("text", { x: px, y: height - 6, class: "tick" }, day(new Date(t).toISOString())));
  }
}
