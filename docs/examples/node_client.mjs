// memstack from Node (>= 18), plain fetch: write, read your write, forget, read again.
// MEMSTACK_URL=http://127.0.0.1:8765 MEMSTACK_API_KEY=... MEMSTACK_TENANT=acme node node_client.mjs
const { MEMSTACK_URL: url, MEMSTACK_API_KEY: key, MEMSTACK_TENANT: tenant } = process.env;
const base = `${url}/v1/tenants/${encodeURIComponent(tenant)}`;
const headers = { Authorization: `Bearer ${key}`, "Content-Type": "application/json" };

async function call(method, path, body) {
  const response = await fetch(base + path, { method, headers, body: JSON.stringify(body) });
  const answer = await response.json();
  if (!response.ok) {  // an RFC 9457 problem: detail says what to change, field names the field
    throw new Error(`${method} ${path}: ${response.status} ${answer.detail}`);
  }
  return answer;
}

function uuid7() {  // event ids are UUIDv7: 48 bits of milliseconds, version 7, random rest
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  const ms = BigInt(Date.now());
  for (let i = 0; i < 6; i++) bytes[i] = Number((ms >> BigInt(8 * (5 - i))) & 0xffn);
  bytes[6] = (bytes[6] & 0x0f) | 0x70;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

const subject = process.argv[2] ?? "user:ana";
const facts = (after) =>
  call("GET", `/facts?subject=${encodeURIComponent(subject)}&after=${encodeURIComponent(after)}`);

// 1. Write a fact (the event JSON of schemas/event.v1.json); the answer has its position.
const written = await call("POST", "/events", { events: [{
  event_id: uuid7(), tenant, agent: "node-example", session: "node", kind: "fact_asserted",
  occurred_at: new Date().toISOString(), subject,
  provenance: { source: "node-example", authority: "agent" },
  payload: { relation: "lives_in", object: "Porto" },
}] });

// 2. Read it back: after= the write's position, the stores have applied it.
const before = await facts(written.position);
console.log("facts:", before.facts.map((f) => `${f.relation}=${f.object}`));

// 3. Forget the subject, then read after the forget's position: nothing is left.
const forgotten = await call("POST", "/forget", {
  scope: { type: "subject", subject }, reason: "user asked" });
const after = await facts(forgotten.position);
console.log("after forget:", after.facts.length, "facts; request", forgotten.request_id);
console.log(JSON.stringify({ before: before.facts.map((f) => f.object),
                             after: after.facts.map((f) => f.object) }));
